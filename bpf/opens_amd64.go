// SPDX-License-Identifier: Apache-2.0

package bpf

import "golang.org/x/sys/unix"

// compatSyscalls are the 32-bit syscalls (i386's table) that open a file, ptrace, and
// those that ask a file's permission without opening it, by name, and their numbers: a
// 64-bit process makes them too, with int $0x80.
var compatSyscalls = map[string]int64{
	"open":              5,
	"creat":             8,
	"ptrace":            26,
	"openat":            295,
	"open_by_handle_at": 342,
	"openat2":           437,
	// The asks: permission asked of the device, nothing opened.
	"access":            33,
	"inotify_add_watch": 292,
	"faccessat":         307,
	"fanotify_mark":     339,
	"faccessat2":        439,
}

// openSyscalls are the native syscalls that open a file, by name, and their numbers.
var openSyscalls = map[string]int64{
	"openat":            unix.SYS_OPENAT,
	"openat2":           unix.SYS_OPENAT2,
	"open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT,
	"open":              unix.SYS_OPEN,
	"creat":             unix.SYS_CREAT,
}
