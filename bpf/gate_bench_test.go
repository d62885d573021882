// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// joinCgroup moves the benchmark's process into cgroup, in the v2 tree mounted at mnt,
// and back where it was once b ends.
func joinCgroup(b *testing.B, mnt, cgroup string) {
	b.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		b.Fatal(err)
	}
	var home string
	for _, line := range bytes.Split(self, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("0::")); ok {
			home = filepath.Join(mnt, string(rest))
		}
	}
	move := func(dir string) {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			b.Fatalf("moving the benchmark into %s: %v", dir, err)
		}
	}
	move(cgroup)
	b.Cleanup(func() { move(home) })
}

// BenchmarkGate times an open and a close of a regular file, of a device that is not
// an NR1's (/dev/null) and of a gated queue, by a process of a pod under the gate and by one of
// the host: with no BPF, with the footprint's tracepoints (what the agent runs without
// the gate; any syscall tracepoint moves every syscall of the node to the kernel's
// slower path) and with the footprint's and the gate's, linking grants to their opens by
// the registers (gate) or by the opens' entry tracepoints (gate-entries, where the
// registers are read wrong). `make bench-gate` prints each
// against no BPF (benchstat -col /bpf); the gate's own share is gate against footprint.
func BenchmarkGate(b *testing.B) {
	for _, file := range []string{"file", "null", "queue"} {
		for _, in := range []string{"pod", "host"} {
			for _, loaded := range []string{"none", "footprint", "gate", "gate-entries"} {
				b.Run(fmt.Sprintf("file=%s/in=%s/bpf=%s", file, in, loaded), func(b *testing.B) {
					benchmarkGate(b, file, in == "pod", loaded)
				})
			}
		}
	}
}

func benchmarkGate(b *testing.B, file string, inPod bool, loaded string) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: cgroups, bpffs, BPF")
	}
	if loaded != "none" {
		watchFootprint(b)
	}
	f := newGateBench(b, strings.HasPrefix(loaded, "gate"), GateOptions{ByEntries: loaded == "gate-entries"})
	path := "/dev/null"
	switch file {
	case "queue":
		path = f.queue
	case "file":
		// A regular file: no device program is asked, the syscalls' tracepoints are.
		path = filepath.Join(b.TempDir(), "file")
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	if inPod {
		joinCgroup(b, f.mnt, f.pod)
	}
	b.ResetTimer()
	for b.Loop() {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		_ = unix.Close(fd)
	}
}

// watchFootprint loads the footprint's programs and attaches its tracepoints, as the
// agent runs them beside the gate, until b ends.
func watchFootprint(b *testing.B) {
	b.Helper()
	fp, err := LoadFootprint()
	if errors.Is(err, ebpf.ErrNotSupported) {
		b.Skipf("kernel lacks what the footprint needs: %v", err)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = fp.Close() })
	ch, err := fp.WatchChanges()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ch.Close() })
}

type gateBench struct {
	mnt, pod, queue string
	gate            *Gate // nil without the gate
}

// newGateBench makes a gate root with one pod booking every queue it will open, and a
// queue device; with gate, the gate is loaded (linking as way says) and attached.
func newGateBench(b *testing.B, gate bool, way GateOptions) gateBench {
	b.Helper()
	var mnt string
	for _, m := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(m, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			mnt = m
		}
	}
	root := filepath.Join(mnt, fmt.Sprintf("nr1-gate-bench-%d", os.Getpid()))
	if mnt == "" {
		b.Skip("no cgroup v2 tree on this host")
	}
	pod := filepath.Join(root, "pod")
	if err := os.MkdirAll(pod, 0o755); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.Remove(pod); _ = os.Remove(root) })
	dev, err := os.MkdirTemp("/dev", "nr1-gate-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dev) })
	queue := filepath.Join(dev, "queue")
	if err := unix.Mknod(queue, unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200))); err != nil {
		b.Fatal(err)
	}
	if !gate {
		return gateBench{mnt: mnt, pod: pod, queue: queue}
	}
	pins := filepath.Join(b.TempDir(), "bpffs")
	if err := os.Mkdir(pins, 0o700); err != nil {
		b.Fatal(err)
	}
	if err := unix.Mount("bpf", pins, "bpf", 0, ""); err != nil {
		b.Fatalf("mounting bpffs: %v", err)
	}
	b.Cleanup(func() { _ = unix.Unmount(pins, unix.MNT_DETACH) })
	g, err := LoadGate(GateOptions{PinDir: filepath.Join(pins, "gate"), Devices: []Device{{Major: 10, Minor: 200}}, ByEntries: way.ByEntries, Compat: way.Compat})
	if errors.Is(err, ebpf.ErrNotSupported) {
		b.Skipf("kernel lacks what the gate needs: %v", err)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = g.Close()
		if err := RemoveGate(filepath.Join(pins, "gate")); err != nil {
			b.Error(err)
		}
	})
	if err := g.Attach(root); err != nil {
		b.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(pod, &st); err != nil {
		b.Fatal(err)
	}
	if err := g.Book(st.Ino, "", 1<<40); err != nil {
		b.Fatal(err)
	}
	return gateBench{mnt: mnt, pod: pod, queue: queue, gate: g}
}

// BenchmarkGateRefusal times an open past a pod's booking, which the gate refuses only
// after walking the descriptions it charged, node-wide, for the gone ones: charged=N is
// N descriptions held by another pod (none of them gone). The walk runs in the refused
// opener's own syscall, so it is that pod that pays it.
func BenchmarkGateRefusal(b *testing.B) {
	for _, n := range []int{0, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("charged=%d", n), func(b *testing.B) {
			if os.Geteuid() != 0 {
				b.Skip("needs root: cgroups, bpffs, BPF")
			}
			f := newGateBench(b, true, GateOptions{})
			g := f.gate
			// The holder: this process, in a pod booking n, opens n queues.
			holder := filepath.Join(filepath.Dir(f.pod), "holder")
			if err := os.Mkdir(holder, 0o755); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = os.Remove(holder) })
			var st unix.Stat_t
			if err := unix.Stat(holder, &st); err != nil {
				b.Fatal(err)
			}
			if err := g.Book(st.Ino, "", int64(n)); err != nil {
				b.Fatal(err)
			}
			fds := make([]int, 0, n)
			joinCgroup(b, f.mnt, holder)
			for range n {
				fd, err := unix.Open(f.queue, unix.O_RDWR|unix.O_CLOEXEC, 0)
				if err != nil {
					b.Fatal(err)
				}
				fds = append(fds, fd)
			}
			b.Cleanup(func() {
				for _, fd := range fds {
					_ = unix.Close(fd)
				}
			})
			// The refused: the bench pod, booking nothing.
			if err := unix.Stat(f.pod, &st); err != nil {
				b.Fatal(err)
			}
			if err := g.Book(st.Ino, "", 0); err != nil {
				b.Fatal(err)
			}
			joinCgroup(b, f.mnt, f.pod)
			b.ResetTimer()
			for b.Loop() {
				if _, err := unix.Open(f.queue, unix.O_RDWR|unix.O_CLOEXEC, 0); !errors.Is(err, unix.EDQUOT) {
					b.Fatalf("open past the booking: %v, want EDQUOT", err)
				}
			}
		})
	}
}

// BenchmarkGateCompatExit times the cheapest syscall (getppid), which no program of the
// gate's asks about, by a process of a pod and by one of the host, with the footprint's
// tracepoints and the gate following 32-bit opens by probes of their entries or by the
// raw syscall exit tracepoint (a kernel without kprobes): what every syscall of the
// node pays for the second. `make bench-gate` prints exit against probes.
func BenchmarkGateCompatExit(b *testing.B) {
	for _, in := range []string{"pod", "host"} {
		for _, way := range []CompatWay{CompatByProbes, CompatByExit} {
			b.Run(fmt.Sprintf("in=%s/compat=%s", in, way), func(b *testing.B) {
				if os.Geteuid() != 0 {
					b.Skip("needs root: cgroups, bpffs, BPF")
				}
				watchFootprint(b)
				f := newGateBench(b, true, GateOptions{Compat: way})
				if f.gate.CompatByExit != (way == CompatByExit) {
					b.Skipf("the gate follows 32-bit opens by their exit: %v (registers unread here: %s)", f.gate.CompatByExit, f.gate.NotByRegisters)
				}
				if in == "pod" {
					joinCgroup(b, f.mnt, f.pod)
				}
				b.ResetTimer()
				for b.Loop() {
					unix.Getppid()
				}
			})
		}
	}
}
