// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/compat32"
	"github.com/neureality-sdk/nr1-agent/internal/load32"
)

// compatOrSkip skips where this process cannot make 32-bit system calls (arm64, or an
// amd64 machine whose int $0x80 faults: a kernel without ia32 emulation, or a hypervisor
// that does not pass the gate), or the kernel cannot probe them (no kprobes).
func compatOrSkip(t *testing.T) {
	t.Helper()
	if err := compat32.Available(); err != nil {
		t.Skip(err)
	}
	kprobesOrSkip(t)
}

// kprobesOrSkip skips where the kernel has no kprobes (CONFIG_KPROBES off), which
// every probe of a 32-bit entry needs: there the 32-bit syscalls stay unseen until a
// scan, and the gate's 32-bit opens counted until the measurement settles them.
func kprobesOrSkip(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/sys/bus/event_source/devices/kprobe"); err != nil {
		t.Skipf("this kernel has no kprobes, which the probes of 32-bit entries need: %v", err)
	}
}

// Every program of a probe section names 32-bit entries the loader knows, and every
// entry known is probed by some program: a program no entry reaches would leave its
// syscall unseen.
func TestEveryCompatProbeHasItsEntries(t *testing.T) {
	used := map[string]bool{}
	for _, load := range []func() (*ebpf.CollectionSpec, error){loadFootprint, loadGate} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		for name, p := range spec.Programs {
			kind, entry, _ := strings.Cut(p.SectionName, "/")
			if kind != "kprobe" && kind != "kretprobe" {
				continue
			}
			if len(compatEntries[entry]) == 0 {
				t.Errorf("program %s of section %s: no 32-bit entries known by that name", name, p.SectionName)
			}
			used[entry] = true
		}
	}
	for entry := range compatEntries {
		if !used[entry] {
			t.Errorf("32-bit entries %s: probed by no program", entry)
		}
	}
}

// A process mapping a target with a 32-bit mmap (mmap2, or the old mmap reading its
// arguments from memory) is marked a mapper and walked at the next pass, as after a
// native mmap; the mapping is reported as a change.
func TestCompatMappingsAreFollowed(t *testing.T) {
	f := loadOrSkip(t)
	compatOrSkip(t)
	followOrFail(t, f)
	c := watchOrSkip(t, f)
	changes := reader(t, c)
	const dma = 7
	fd := dmaTarget(t, f, dma).Fd()
	self := uint32(os.Getpid())
	mappingsOf(t, f, self, dma) // the first pass walks every process

	for _, tc := range []struct {
		name string
		size uintptr
		mmap func(size uintptr) (uintptr, error)
	}{
		{"mmap2", 2 * 4096, func(size uintptr) (uintptr, error) {
			return compat32.Syscall(compat32.SysMmap2, 0, size, unix.PROT_READ, unix.MAP_SHARED, fd, 0)
		}},
		{"old mmap", 3 * 4096, func(size uintptr) (uintptr, error) {
			args, err := compat32.Low(24)
			if err != nil {
				return 0, err
			}
			for i, v := range []uint32{0, uint32(size), unix.PROT_READ, unix.MAP_SHARED, uint32(fd), 0} {
				binary.NativeEndian.PutUint32(args[4*i:], v)
			}
			return compat32.Syscall(compat32.SysOldMmap, compat32.Addr(args))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mappingsOf(t, f, self, dma) // a mapping given up is cleared by one more walk
			if _, pass := mappersPass(t, f, self, dma); slices.Contains(pass.pids, self) {
				t.Fatalf("pass %+v walked this process, which maps nothing and did nothing since", pass)
			}
			changesWithin(changes)
			addr, err := tc.mmap(tc.size)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Syscall(unix.SYS_MUNMAP, addr, tc.size, 0)
			got, pass := mappersPass(t, f, self, dma)
			if !slices.Contains(pass.pids, self) || len(got) != 1 || got[0].Size != uint64(tc.size) {
				t.Fatalf("pass %+v: mappings %+v, want this process walked and its mapping of %d bytes", pass, got, tc.size)
			}
			want := Change{CgroupId: currentCgroupID(t), Pid: self, Target: dma}
			if ch := changesWithin(changes); len(ch) != 1 || ch[0] != want {
				t.Fatalf("changes %+v, want the mapping's, %+v", ch, want)
			}
		})
	}
}

// A target opened with a 32-bit open or openat is reported as a change, as after a
// native open.
func TestCompatOpensAreReported(t *testing.T) {
	f := loadOrSkip(t)
	compatOrSkip(t)
	c := watchOrSkip(t, f)
	changes := reader(t, c)
	path := filepath.Join(t.TempDir(), "queue")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.SetTargets(map[TargetKey]uint32{keyOf(t, path): 3}); err != nil {
		t.Fatal(err)
	}
	low, err := compat32.Low(len(path) + 1)
	if err != nil {
		t.Fatal(err)
	}
	copy(low, path)
	name := compat32.Addr(low)
	const atFDCWD = 0xffffff9c // -100 in 32 bits
	for _, tc := range []struct {
		name string
		nr   uintptr
		args []uintptr
	}{
		{"open", compat32.SysOpen, []uintptr{name, unix.O_RDWR}},
		{"openat", compat32.SysOpenat, []uintptr{atFDCWD, name, unix.O_RDWR}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changesWithin(changes)
			fd, err := compat32.Syscall(tc.nr, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(int(fd))
			want := Change{CgroupId: currentCgroupID(t), Pid: uint32(os.Getpid()), Target: 3}
			if ch := changesWithin(changes); len(ch) != 1 || ch[0] != want {
				t.Fatalf("changes %+v, want the open's, %+v", ch, want)
			}
		})
	}
}

// The i386 socketcall(2) calls used.
const (
	socketcallSendmsg = 16
	socketcallAccept4 = 18
)

// compatAccept accepts on fd with a 32-bit accept4, or the same through socketcall.
func compatAccept(how string, fd int) (int, error) {
	if err := compat32.Available(); err != nil {
		return 0, err
	}
	flags := uintptr(unix.SOCK_CLOEXEC)
	if how == "accept32" {
		s, err := compat32.Syscall(compat32.SysAccept4, uintptr(fd), 0, 0, flags)
		return int(s), err
	}
	args, err := compat32.Low(16)
	if err != nil {
		return 0, err
	}
	for i, v := range []uint32{uint32(fd), 0, 0, uint32(flags)} {
		binary.NativeEndian.PutUint32(args[4*i:], v)
	}
	s, err := compat32.Syscall(compat32.SysSocketcall, socketcallAccept4, compat32.Addr(args))
	return int(s), err
}

// compatSend sends one byte on sock, carrying fd unless it is -1, with a 32-bit
// sendmsg, sendmmsg, or sendmsg through socketcall: their headers are of 32-bit fields.
func compatSend(how string, sock, fd int) error {
	if err := compat32.Available(); err != nil {
		return err
	}
	m, err := compat32.Low(256)
	if err != nil {
		return err
	}
	base := uint32(compat32.Addr(m))
	put := func(at int, vs ...uint32) {
		for i, v := range vs {
			binary.NativeEndian.PutUint32(m[at+4*i:], v)
		}
	}
	// [0] the byte; [8] its iovec; [16] the control message; [64] the msghdr; [96] the
	// mmsghdr, a msghdr and a length; [128] socketcall's arguments.
	put(8, base, 1)
	var control, controllen uint32
	if fd >= 0 {
		put(16, 16, unix.SOL_SOCKET, unix.SCM_RIGHTS, uint32(fd))
		control, controllen = base+16, 16
	}
	hdr := []uint32{0, 0, base + 8, 1, control, controllen, 0}
	put(64, hdr...)
	put(96, hdr...)
	put(128, uint32(sock), base+64, 0)
	switch how {
	case "sendmsg32":
		_, err = compat32.Syscall(compat32.SysSendmsg, uintptr(sock), uintptr(base+64), 0)
	case "sendmmsg32":
		_, err = compat32.Syscall(compat32.SysSendmmsg, uintptr(sock), uintptr(base+96), 1, 0)
	default:
		_, err = compat32.Syscall(compat32.SysSocketcall, socketcallSendmsg, uintptr(base+128))
	}
	return err
}

// A 32-bit program (nr1-load built for i386 or 32-bit ARM) is held to its pod's booking
// as a 64-bit one is: its opens (openat through the compat entry) are granted up to the
// booking and the next refused with EDQUOT, and what it held is given back when it
// exits, so that workers that come and go are never refused. On arm64 a 32-bit program
// is the one way to make 32-bit calls: an AArch32 task's. Followed by probes of the
// 32-bit entries where the kernel has kprobes, and by the raw syscall exit tracepoint
// (on every kernel, as where it has none).
func TestGateHoldsA32BitPodToItsBooking(t *testing.T) {
	load := load32.OrSkip(t)
	_, err := os.Stat("/sys/bus/event_source/devices/kprobe")
	for _, way := range []struct {
		name   string
		byExit bool
		skip   error
	}{{"ByProbes", false, err}, {"ByExit", true, nil}} {
		t.Run(way.name, func(t *testing.T) {
			if way.skip != nil {
				t.Skipf("this kernel has no kprobes, which the probes of 32-bit entries need: %v", way.skip)
			}
			compatWay = CompatByProbes
			if way.byExit {
				compatWay = CompatByExit
			}
			t.Cleanup(func() { compatWay = CompatByKernel })
			f := newGateFixture(t, false)
			if f.gate.CompatByExit != way.byExit {
				t.Fatalf("the gate follows 32-bit opens by their exit: %v, want %v", f.gate.CompatByExit, way.byExit)
			}
			holdA32BitPod(t, f, load)
		})
	}
}

// compatWay is how the fixtures' gates follow 32-bit opens.
var compatWay CompatWay

func holdA32BitPod(t *testing.T, f *gateFixture, load string) {
	id, cgroup := f.pod("pod", 2)
	dir := t.TempDir()
	for _, name := range []string{"compute", "cpu"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cg, err := os.Open(cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	cmd := exec.Command(load, "--compute-dma-file", filepath.Join(dir, "compute"), "--cpu-dma-file", filepath.Join(dir, "cpu"),
		"--queue-file", f.queue, "--write-file", filepath.Join(dir, "blob"), "--status-file", filepath.Join(dir, "status"),
		"--queues", "2", "--step", "100ms:queues=3", "--exit")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "refused: opening queue 3") || !strings.Contains(string(out), unix.EDQUOT.Error()) {
		t.Fatalf("a 32-bit process taking 3 queues on a booking of 2 (%v): want its third open refused with %v\n%s", err, unix.EDQUOT, out)
	}
	if err := f.gate.Reclaim(); err != nil {
		t.Fatal(err)
	}
	if c := f.held(id); c.Granted != 2 || c.Refused != 1 || c.Held != 0 || c.Released != 2 {
		t.Errorf("count %+v once it exited, want 2 granted, 1 refused, the 2 released", c)
	}
	// Workers that come and go at a booking of 1, each exiting with its queue open: none
	// is refused, each given back what the one before held.
	worker, workerCgroup := f.pod("workers", 1)
	wg, err := os.Open(workerCgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer wg.Close()
	for round := range 8 {
		cmd := exec.Command(load, "--compute-dma-file", filepath.Join(dir, "compute"), "--cpu-dma-file", filepath.Join(dir, "cpu"),
			"--queue-file", f.queue, "--write-file", filepath.Join(dir, "blob"), "--status-file", filepath.Join(dir, "status"),
			"--queues", "1", "--exit")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(wg.Fd())}
		if out, err := cmd.CombinedOutput(); err != nil || strings.Contains(string(out), "refused") {
			t.Fatalf("worker %d of a pod booking 1, the one before gone (count %+v): %v\n%s", round, f.held(worker), err, out)
		}
	}
	if c := f.held(worker); c.Refused != 0 || c.Granted != 8 {
		t.Errorf("count %+v, want none refused, 8 granted", c)
	}
}

// On this kernel, 32-bit system calls are said unseen exactly when this process can make
// them and the kernel has no kprobes to follow them.
func TestCompatUnseenSaysWhatThisKernelIs(t *testing.T) {
	_, kprobes := os.Stat("/sys/bus/event_source/devices/kprobe")
	err := CompatUnseen()
	switch {
	case kprobes == nil && err != nil:
		t.Errorf("a kernel with kprobes: %v, want the 32-bit entries followed", err)
	case kprobes != nil && compat32.Available() == nil && err == nil:
		t.Error("32-bit system calls are made here and no kprobe follows them, yet they are not said unseen")
	case kprobes != nil && err != nil && !strings.Contains(err.Error(), "unseen"):
		t.Errorf("said %q", err)
	}
	t.Logf("kprobes: %v; 32-bit calls: %v; said: %v", kprobes == nil, compat32.Available(), err)
}

// The kernel's symbols and command line are read as the kernel has them: an entry in
// kallsyms (a module's too) with no kprobes is unseen, unless the command line turns ia32
// emulation off, the last parameter counting and a value the kernel cannot read changing
// nothing; kprobes see every entry; symbols that cannot be read are no proof of none.
func TestCompatUnseenReadsTheKernelAsItIs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	with := write("with", "ffffffff81000000 T _stext\nffffffff8160f920 T __ia32_sys_mmap_pgoff\n")
	module := write("module", "ffffffffc0000000 t __arm64_compat_sys_sendmsg\t[some_module]\n")
	without := write("without", "ffffffff81000000 T _stext\nffffffff8160f910 T __pfx___ia32_sys_mmap_pgoff\nffffffff81000010 T __x64_sys_mmap\n")
	for _, c := range []struct {
		kprobes           bool
		kallsyms, cmdline string
		unseen            bool
	}{
		{false, with, "", true},
		{true, with, "", false},
		{false, module, "", true},
		{false, without, "", false},
		{false, filepath.Join(dir, "missing"), "", true},
		{false, with, "quiet ia32_emulation=0", false},
		{false, with, "ia32_emulation=off", false},
		{false, with, "ia32_emulation=False", false},
		{false, with, "ia32_emulation=n", false},
		{false, with, "ia32_emulation=on", true},
		{false, with, "ia32_emulation=1", true},
		{false, with, "ia32_emulation=yes", true},
		{false, with, "ia32_emulation=0 ia32_emulation=1", true},
		{false, with, "ia32_emulation=1 ia32_emulation=0", false},
		{false, with, "ia32_emulation=0 ia32_emulation=bogus", false},
		{false, with, "ia32_emulation=o ia32_emulation=", true},
		{false, with, "xia32_emulation=0", true},
		{false, with, "ia32_emulation=disabled", false},
		{false, with, "ia32_emulation=0 ia32_emulation=enabled", true},
		{false, with, "quiet -- ia32_emulation=0", true},
	} {
		err := compatUnseen(c.kprobes, c.kallsyms, write("cmdline", c.cmdline))
		if (err != nil) != c.unseen {
			t.Errorf("kprobes %v, symbols %s, cmdline %q: %v; want unseen %v", c.kprobes, filepath.Base(c.kallsyms), c.cmdline, err, c.unseen)
		}
	}
}

// A gate told to follow 32-bit opens by probes, on a kernel where no probe follows them,
// says why nothing does (the agent logs it); where probes follow them, it says nothing.
func TestGateSaysWhy32BitOpensGoUnfollowed(t *testing.T) {
	compatWay = CompatByProbes
	t.Cleanup(func() { compatWay = CompatByKernel })
	f := newGateFixture(t, false)
	want := ""
	if err := CompatUnseen(); err != nil {
		want = err.Error()
	}
	if f.gate.CompatByExit || f.gate.CompatUnfollowed != want {
		t.Errorf("by probes: followed at the exit %v, unfollowed %q; want no, %q", f.gate.CompatByExit, f.gate.CompatUnfollowed, want)
	}
}

// A 32-bit access(2) of a queue by a pod at its booking asks the device's permission
// and opens nothing: it is let through and counted for nothing, as a native one is,
// whether probes of the 32-bit entries follow it or the raw syscall exit does.
func TestGateLetsA32BitAskThrough(t *testing.T) {
	if err := compat32.Available(); err != nil {
		t.Skip(err)
	}
	_, noKprobes := os.Stat("/sys/bus/event_source/devices/kprobe")
	for _, way := range []CompatWay{CompatByProbes, CompatByExit} {
		t.Run(string(way), func(t *testing.T) {
			if way == CompatByProbes && noKprobes != nil {
				t.Skipf("this kernel has no kprobes, which the probes of 32-bit entries need: %v", noKprobes)
			}
			compatWay = way
			t.Cleanup(func() { compatWay = CompatByKernel })
			f := newGateFixture(t, false)
			id, cg := f.pod("pod", 1)
			o := f.opener(cg)
			o.must("open " + f.queue)
			for range 3 {
				if _, err := o.do("access32 " + f.queue); err != nil {
					t.Fatalf("a 32-bit access of a queue at the booking: %v, want it let through", err)
				}
			}
			if c := f.held(id); c.Held != 1 || c.Granted != 1 || c.Refused != 0 {
				t.Errorf("count %+v after 32-bit accesses, want only the open counted", c)
			}
		})
	}
}
