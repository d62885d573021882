// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"fmt"
	"math"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// haveSyscall fails, as ebpf.ErrNotSupported, where there is no bpf(2) at all: a kernel
// built without CONFIG_BPF_SYSCALL, or a user-mode emulator (qemu-user implements no
// bpf). The library would report that as ENOSYS from whichever probe it ran first, not
// as the kernel lacking what the programs need, which is what it is.
func haveSyscall() error {
	// An unknown command: a kernel with the syscall answers EINVAL (or EPERM).
	_, _, errno := unix.Syscall(unix.SYS_BPF, math.MaxInt32, 0, 0)
	if errno == unix.ENOSYS {
		return fmt.Errorf("no bpf syscall (%w): %w", errno, ebpf.ErrNotSupported)
	}
	return nil
}
