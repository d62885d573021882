// SPDX-License-Identifier: Apache-2.0

// Package vforkmap is for tests only: a child that shares the caller's memory (clone with
// CLONE_VM and CLONE_VFORK, as vfork(2)) maps a file in it and exits, so that the caller
// holds a mapping no system call of its own made. The child runs in assembly: it must
// not touch the stack it shares with its suspended parent, whose frames Go code in the
// child would overwrite.
package vforkmap

import (
	"fmt"
	"syscall"
)

// Map maps size bytes of fd (shared, read-only) from a child sharing this process's
// memory, and returns once the child has exited; the mapping is then this process's.
func Map(fd, size uintptr) (int, error) {
	pid, errno := clone(fd, size)
	if errno != 0 {
		return 0, fmt.Errorf("clone(CLONE_VM|CLONE_VFORK): %w", syscall.Errno(errno))
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(int(pid), &ws, 0, nil); err != nil {
		return 0, fmt.Errorf("waiting for child %d: %w", pid, err)
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return 0, fmt.Errorf("child %d failed to map fd %d: wait status %#x", pid, fd, uint32(ws))
	}
	return int(pid), nil
}

// clone starts the child; it returns the child's PID, or the errno of clone.
func clone(fd, size uintptr) (pid, errno uintptr)
