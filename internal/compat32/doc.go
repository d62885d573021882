// SPDX-License-Identifier: Apache-2.0

// Package compat32 makes 32-bit system calls from a 64-bit process, as a hostile CG can
// on amd64 (int $0x80): the syscall tracepoints do not see them, and the agent's probes
// of the kernel's 32-bit entries must. arm64 has no such door: a 64-bit process cannot
// make an AArch32 system call.
package compat32

import "errors"

// ErrUnsupported is returned where a 64-bit process has no 32-bit system calls.
var ErrUnsupported = errors.New("no 32-bit system calls from this 64-bit process")

// The i386 system call numbers used.
const (
	SysOldMmap    = 90
	SysPtrace     = 26
	SysOpen       = 5
	SysAccess     = 33
	SysSocketcall = 102
	SysMmap2      = 192
	SysOpenat     = 295
	SysSendmsg    = 370
	SysSendmmsg   = 345
	SysAccept4    = 364
)
