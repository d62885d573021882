// SPDX-License-Identifier: Apache-2.0

//go:build !amd64

package compat32

// Syscall answers ErrUnsupported: see the package's doc.
func Syscall(nr uintptr, args ...uintptr) (uintptr, error) { return 0, ErrUnsupported }

// Low answers ErrUnsupported: see the package's doc.
func Low(n int) ([]byte, error) { return nil, ErrUnsupported }

// Addr is 0: there is no memory from Low here.
func Addr(b []byte) uintptr { return 0 }

// Available answers ErrUnsupported: see the package's doc.
func Available() error { return ErrUnsupported }
