// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// compatEntries are the kernel's entries of the 32-bit syscalls the programs follow, by
// the name their section gives after "kprobe/" or "kretprobe/": amd64's ia32 ones and
// arm64's AArch32 ones. The syscall tracepoints skip every 32-bit syscall, which a 64-bit
// process makes too on amd64 (int $0x80). Only entries no native syscall reaches are
// named, so that native calls pay nothing for the probes: arm64's 32-bit openat2,
// pidfd_getfd and accept share the native entry and stay unseen until a scan.
var compatEntries = map[string][]string{
	"compat_ptrace":     {"__ia32_compat_sys_ptrace", "__arm64_compat_sys_ptrace"},
	"compat_mmap2":      {"__ia32_sys_mmap_pgoff", "__arm64_compat_sys_aarch32_mmap2"},
	"compat_old_mmap":   {"__ia32_compat_sys_ia32_mmap"},
	"compat_new_fd":     {"__ia32_compat_sys_open", "__ia32_compat_sys_openat", "__ia32_sys_openat2", "__ia32_sys_pidfd_getfd", "__arm64_compat_sys_open", "__arm64_compat_sys_openat"},
	"compat_gate_open":  {"__ia32_compat_sys_open", "__ia32_compat_sys_openat", "__ia32_sys_openat2", "__arm64_compat_sys_open", "__arm64_compat_sys_openat"},
	"compat_sendmsg":    {"__ia32_compat_sys_sendmsg", "__arm64_compat_sys_sendmsg"},
	"compat_sendmmsg":   {"__ia32_compat_sys_sendmmsg", "__arm64_compat_sys_sendmmsg"},
	"compat_socketcall": {"__ia32_compat_sys_socketcall"},
	"compat_accept":     {"__ia32_sys_accept4"},
}

// compatProbe is a program of a kprobe or kretprobe section, by the section's name.
type compatProbe struct {
	section string
	prog    *ebpf.Program
}

// attachCompat attaches p to each of its entries this kernel has, calling keep with the
// entry's name and its link. A kernel without 32-bit syscalls has none, which is no
// error; one whose probes cannot attach at all is.
func attachCompat(p compatProbe, keep func(entry string, l link.Link) error) error {
	kind, name, ok := strings.Cut(p.section, "/")
	entries, known := compatEntries[name]
	if !ok || !known || (kind != "kprobe" && kind != "kretprobe") {
		return fmt.Errorf("program of section %s: no 32-bit syscall entries known by that name", p.section)
	}
	attach := link.Kprobe
	if kind == "kretprobe" {
		attach = link.Kretprobe
	}
	for _, entry := range entries {
		l, err := attach(entry, p.prog, nil)
		// Older kernels answer EINVAL for a symbol they lack.
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.EINVAL) {
			continue
		}
		if err != nil {
			return fmt.Errorf("attaching a %s to %s: %w", kind, entry, err)
		}
		if err := keep(entry, l); err != nil {
			return err
		}
	}
	return nil
}
