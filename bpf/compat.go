// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"bufio"
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
	"compat_ptrace":    {"__ia32_compat_sys_ptrace", "__arm64_compat_sys_ptrace"},
	"compat_mmap2":     {"__ia32_sys_mmap_pgoff", "__arm64_compat_sys_aarch32_mmap2"},
	"compat_old_mmap":  {"__ia32_compat_sys_ia32_mmap"},
	"compat_new_fd":    {"__ia32_compat_sys_open", "__ia32_compat_sys_openat", "__ia32_sys_openat2", "__ia32_sys_pidfd_getfd", "__arm64_compat_sys_open", "__arm64_compat_sys_openat"},
	"compat_gate_open": {"__ia32_compat_sys_open", "__ia32_compat_sys_openat", "__ia32_sys_openat2", "__arm64_compat_sys_open", "__arm64_compat_sys_openat"},
	// arm64 has no native access(2): its entry is the 32-bit one's only.
	"compat_gate_ask": {"__ia32_sys_access", "__ia32_sys_faccessat", "__ia32_sys_faccessat2", "__ia32_sys_inotify_add_watch", "__ia32_compat_sys_fanotify_mark",
		"__arm64_sys_access", "__arm64_compat_sys_fanotify_mark"},
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

// CompatUnseen says why this node's 32-bit system calls go unseen, nil when the probes
// of their entries follow them or no such call can be made: the kernel has the entries
// (a 64-bit process on amd64 reaches them with int $0x80, a 32-bit one on either
// architecture), was not booted with amd64's ia32 emulation off, and has no kprobes to
// follow them with. Such a node's 64-bit processes' int $0x80 mappings are found by the
// full pass only and their 32-bit sends are charged to the receiving socket's creator:
// an operator must know. The gate follows 32-bit opens and ptrace there by the raw
// syscall exit tracepoint instead (CompatByExit), which costs every syscall.
func CompatUnseen() error {
	return compatUnseen(kprobesPresent(), "/proc/kallsyms", "/proc/cmdline")
}

// kprobesPresent says whether the kernel can make kprobes, through the perf PMU or
// tracefs, as the link package makes them.
func kprobesPresent() bool {
	for _, p := range []string{"/sys/bus/event_source/devices/kprobe", "/sys/kernel/tracing/kprobe_events", "/sys/kernel/debug/tracing/kprobe_events"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// compatUnseen is CompatUnseen reading the kernel's symbols from kallsyms and its boot
// parameters from cmdline. Symbols that cannot be read leave the entries unknown, which
// is said as unseen: absence of data is no proof of absence.
func compatUnseen(kprobes bool, kallsyms, cmdline string) error {
	if kprobes {
		return nil
	}
	if args, err := os.ReadFile(cmdline); err == nil && ia32Off(string(args)) {
		return nil
	}
	entries := map[string]bool{}
	for _, names := range compatEntries {
		for _, n := range names {
			entries[n] = true
		}
	}
	f, err := os.Open(kallsyms)
	if err != nil {
		return fmt.Errorf("32-bit system calls may go unseen: no kprobes, and the kernel's symbols are not readable: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address type name [module]
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && entries[fields[2]] {
			return fmt.Errorf("32-bit system calls go unseen: the kernel has their entries (%s) and no kprobes to follow them (CONFIG_KPROBES)", fields[2])
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("32-bit system calls may go unseen: no kprobes, and reading %s: %w", kallsyms, err)
	}
	return nil
}

// ia32Off says whether a kernel command line turns amd64's ia32 emulation off, as the
// kernel reads the parameter (kstrtobool, by its first letters; a value it cannot read
// changes nothing; the last one given counts; what follows "--" is init's).
func ia32Off(cmdline string) bool {
	off := false
	for _, arg := range strings.Fields(cmdline) {
		if arg == "--" {
			break
		}
		v, ok := strings.CutPrefix(arg, "ia32_emulation=")
		if !ok || v == "" {
			continue
		}
		switch v[0] {
		case 'e', 'E', 'y', 'Y', 't', 'T', '1':
			off = false
		case 'd', 'D', 'n', 'N', 'f', 'F', '0':
			off = true
		case 'o', 'O':
			if len(v) > 1 && strings.ContainsRune("nN", rune(v[1])) {
				off = false
			} else if len(v) > 1 && strings.ContainsRune("fF", rune(v[1])) {
				off = true
			}
		}
	}
	return off
}
