// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/sim"
)

// A process whose cgroup is nested past PATH_MAX (where /proc cannot write its cgroup's
// path) is measured by both sources for that cgroup, and the scan of every other
// process goes on.
func TestSourcesMeasureAProcessNestedPastPathMax(t *testing.T) {
	p, dir := newCgroups(t, 1)
	name := strings.Repeat("n", 250)
	fds := []int{}
	top, err := unix.Open(p.cgroups[0], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fds = append(fds, top)
	var load *exec.Cmd
	t.Cleanup(func() {
		if load != nil && load.Process != nil {
			_ = load.Process.Kill()
			_ = load.Wait()
		}
		for i := len(fds) - 1; i > 0; i-- {
			for range 50 {
				err := unix.Unlinkat(fds[i-1], name, unix.AT_REMOVEDIR)
				if err == nil || errors.Is(err, unix.ENOENT) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	})
	var deepest uint64
	for range 20 {
		parent := fds[len(fds)-1]
		if err := unix.Mkdirat(parent, name, 0o755); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		deepest = st.Ino
	}
	status := filepath.Join(dir, "deep-status")
	load = exec.Command(nr1Load, "--compute-dma-file", p.sim.File(sim.ComputeDMA), "--cpu-dma-file", p.sim.File(sim.CPUDMA),
		"--queue-file", p.sim.File(sim.HypervisorQ), "--write-file", filepath.Join(dir, "blob"), "--status-file", status,
		"--compute-dma-mb", "2", "--queues", "3")
	load.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fds[len(fds)-1]}
	if err := load.Start(); errors.Is(err, unix.ENOSYS) {
		t.Skipf("no clone3(CLONE_INTO_CGROUP) to start a process inside a cgroup: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	// Beside it, a process the scans read by its path, in the chain's top cgroup.
	p.start(t, 0, exec.Command(nr1Load, "--compute-dma-file", p.sim.File(sim.ComputeDMA), "--cpu-dma-file", p.sim.File(sim.CPUDMA),
		"--queue-file", p.sim.File(sim.HypervisorQ), "--write-file", filepath.Join(dir, "blob"), "--status-file", status+"-top", "--queues", "1"))
	for _, f := range []string{status, status + "-top"} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			b, err := os.ReadFile(f)
			var st struct{ Queues int64 }
			if err == nil && json.Unmarshal(b, &st) == nil && st.Queues > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the load never reported its holding: %s %v", f, b, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(load.Process.Pid), "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok {
			if err := unix.Stat(filepath.Join(p.cgroupV2, path), new(unix.Stat_t)); !errors.Is(err, unix.ENAMETOOLONG) {
				t.Fatalf("the deep process's cgroup is reached by the path /proc gives (%v): the test does not nest past PATH_MAX", err)
			}
		}
	}
	want := map[uint64]nr1.Usage{deepest: {2 << 20, 0, 0, 3}, p.ids[0]: {0, 0, 0, 1}}
	sources := []Source{NewProcfs("/proc", p.cgroupV2, p.targets)}
	if b, err := NewBPF("/proc", p.cgroupV2, p.targets); err == nil {
		defer func() { _ = b.Close() }()
		sources = append(sources, b)
	} else {
		t.Logf("BPF source not run: %v", err)
	}
	for _, src := range sources {
		s, err := src.Scan(context.Background())
		if err != nil {
			t.Fatalf("a scan with a process nested past PATH_MAX failed: %v", err)
		}
		got := byCgroup(s, p.targets)
		for id, u := range want {
			if got[id] != u {
				t.Errorf("%s: cgroup %d holds %v, want %v", s.Source, id, got[id], u)
			}
		}
	}
}
