// SPDX-License-Identifier: Apache-2.0

// Package uring sets up io_urings with registered files, or with one read pending, the
// ways a process can hold files open with no fd on them: enough for nr1-load's
// adversaries and the tests of the footprint scans, not a ring to do work with.
package uring

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// params is struct io_uring_params: the kernel fills in what it set up.
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff, cqOff                                                           [40]byte
}

// registerFiles is IORING_REGISTER_FILES.
const registerFiles = 2

// New sets up a ring of one entry and returns its fd.
func New() (int, error) {
	var p params
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&p)), 0) //nolint:gosec // the kernel fills in the params it is given
	if errno != 0 {
		return -1, fmt.Errorf("io_uring_setup: %w", errno)
	}
	return int(fd), nil
}

// Register registers fds as ring's fixed files: the ring holds each open until it is
// closed, whatever becomes of the fds.
func Register(ring int, fds []int32) error {
	if len(fds) == 0 {
		return nil
	}
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(ring), registerFiles, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), 0, 0) //nolint:gosec // the kernel reads the fds it is given
	if errno != 0 {
		return fmt.Errorf("registering %d files with io_uring %d: %w", len(fds), ring, errno)
	}
	return nil
}

// The offsets io_uring_setup gives of its submission ring, and where the rings are
// mapped (IORING_OFF_SQ_RING, IORING_OFF_SQES).
const (
	offSQRing = 0
	offSQEs   = 0x10000000
	sqeSize   = 64
	opRead    = 22 // IORING_OP_READ
)

// ReadPending sets up a ring of one entry and submits to it a read of fd into buf, which
// must stay alive until the read ends: a read that blocks (a device with nothing to
// read) stays pending, and holds fd's open file, whatever becomes of fd, until it ends
// or the ring is closed. It returns the ring's fd.
func ReadPending(fd int, buf []byte) (int, error) {
	var p params
	ring, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&p)), 0) //nolint:gosec // the kernel fills in the params it is given
	if errno != 0 {
		return -1, fmt.Errorf("io_uring_setup: %w", errno)
	}
	fail := func(err error) (int, error) {
		_ = unix.Close(int(ring))
		return -1, err
	}
	off := func(i int) uint32 { return *(*uint32)(unsafe.Pointer(&p.sqOff[4*i])) } //nolint:gosec // struct io_sqring_offsets: u32 fields
	tail, mask, array := off(1), off(2), off(6)
	sq, err := unix.Mmap(int(ring), offSQRing, int(array+p.sqEntries*4), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail(fmt.Errorf("mapping io_uring %d's submission ring: %w", ring, err))
	}
	sqes, err := unix.Mmap(int(ring), offSQEs, int(p.sqEntries*sqeSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		_ = unix.Munmap(sq)
		return fail(fmt.Errorf("mapping io_uring %d's entries: %w", ring, err))
	}
	defer func() { _ = unix.Munmap(sqes); _ = unix.Munmap(sq) }()
	clear(sqes[:sqeSize])
	sqes[0] = opRead
	*(*int32)(unsafe.Pointer(&sqes[4])) = int32(fd)                                         //nolint:gosec // struct io_uring_sqe: fd
	*(*uint64)(unsafe.Pointer(&sqes[8])) = ^uint64(0)                                       //nolint:gosec // off: the file's position
	*(*uint64)(unsafe.Pointer(&sqes[16])) = uint64(uintptr(unsafe.Pointer(&buf[0])))        //nolint:gosec // addr
	*(*uint32)(unsafe.Pointer(&sqes[24])) = uint32(len(buf))                                //nolint:gosec // len
	t := (*uint32)(unsafe.Pointer(&sq[tail]))                                               //nolint:gosec // the ring's tail, shared with the kernel
	*(*uint32)(unsafe.Pointer(&sq[array+4*(*t&*(*uint32)(unsafe.Pointer(&sq[mask])))])) = 0 //nolint:gosec // the slot names entry 0
	atomic.AddUint32(t, 1)
	n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, ring, 1, 0, 0, 0, 0)
	if errno != 0 || n != 1 {
		return fail(fmt.Errorf("submitting a read of fd %d to io_uring %d: %d submitted, %w", fd, ring, n, errno))
	}
	return int(ring), nil
}
