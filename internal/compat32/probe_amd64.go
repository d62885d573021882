// SPDX-License-Identifier: Apache-2.0

package compat32

import (
	"fmt"
	"runtime/debug"
	"sync"

	"golang.org/x/sys/unix"
)

// Available says whether this machine makes 32-bit system calls at all: a kernel built
// without them, booted with ia32_emulation=off, or a hypervisor that does not pass the
// int $0x80 gate faults the call instead.
var Available = sync.OnceValue(func() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: int $0x80 faults here (%v)", ErrUnsupported, r)
		}
	}()
	if pid, err := Syscall(sysGetpid); err != nil || int(pid) != unix.Getpid() {
		return fmt.Errorf("%w: a 32-bit getpid answered %d, %w", ErrUnsupported, pid, err)
	}
	return nil
})

const sysGetpid = 20
