// SPDX-License-Identifier: Apache-2.0

//go:build !amd64

package compat32

// Syscall answers ErrUnsupported: see the package's doc.
func Syscall(nr uintptr, args ...uintptr) (uintptr, error) { return 0, ErrUnsupported }

// Low answers ErrUnsupported: see the package's doc.
func Low(b []byte) (uintptr, error) { return 0, ErrUnsupported }

// Available answers ErrUnsupported: see the package's doc.
func Available() error { return ErrUnsupported }
