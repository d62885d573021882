// SPDX-License-Identifier: Apache-2.0

package bpf

import "golang.org/x/sys/unix"

// compatSyscalls are the 32-bit syscalls (32-bit ARM's EABI table, an AArch32 task's)
// that open a file, ptrace, and those that ask a file's permission without opening it,
// by name, and their numbers.
var compatSyscalls = map[string]int64{
	"open":              5,
	"creat":             8,
	"ptrace":            26,
	"openat":            322,
	"open_by_handle_at": 371,
	"openat2":           437,
	// The asks: permission asked of the device, nothing opened.
	"access":            33,
	"inotify_add_watch": 317,
	"faccessat":         334,
	"fanotify_mark":     368,
	"faccessat2":        439,
}

// openSyscalls are the native syscalls that open a file, by name, and their numbers:
// arm64 has no open(2) or creat(2).
var openSyscalls = map[string]int64{
	"openat":            unix.SYS_OPENAT,
	"openat2":           unix.SYS_OPENAT2,
	"open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT,
}
