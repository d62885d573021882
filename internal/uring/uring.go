// SPDX-License-Identifier: Apache-2.0

// Package uring sets up io_urings with registered files, the way a process can hold
// files open with no fd on them: enough for nr1-load's adversaries and the tests of the
// footprint scans, not a ring to submit work to.
package uring

import (
	"fmt"
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
