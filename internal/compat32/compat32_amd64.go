// SPDX-License-Identifier: Apache-2.0

package compat32

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func int80(nr, a0, a1, a2, a3, a4, a5 uintptr) uintptr

// Syscall makes the 32-bit system call nr with up to six arguments, each truncated to 32
// bits as the kernel reads them: a pointer must be below 4 GiB (see Low). It blocks the
// thread as a raw system call does.
func Syscall(nr uintptr, args ...uintptr) (uintptr, error) {
	var a [6]uintptr
	if len(args) > len(a) {
		return 0, fmt.Errorf("%d arguments to a system call, at most 6", len(args))
	}
	copy(a[:], args)
	// The kernel answers in the low 32 bits: -errno, or a value.
	r := uint32(int80(nr, a[0], a[1], a[2], a[3], a[4], a[5])) //nolint:gosec // truncated on purpose
	if errno := -int32(r); errno > 0 && errno <= 4095 {        //nolint:gosec // the same 32 bits, signed
		return 0, fmt.Errorf("32-bit system call %d: %w", nr, syscall.Errno(errno))
	}
	return uintptr(r), nil
}

// Low is n bytes of memory below 4 GiB, which a 32-bit system call can point at (see
// Addr); it stays until the process ends.
func Low(n int) ([]byte, error) {
	size := (max(n, 1) + unix.Getpagesize() - 1) &^ (unix.Getpagesize() - 1)
	m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_32BIT)
	if err != nil {
		return nil, fmt.Errorf("memory below 4 GiB: %w", err)
	}
	return m[:n], nil
}

// Addr is the address of b, as a 32-bit system call's argument: b must come from Low.
func Addr(b []byte) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b))) //nolint:gosec // an address for the kernel, of memory never freed
}
