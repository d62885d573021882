// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary is also the workers' executable (os.Executable), and nr1-load itself
// when NR1_LOAD_TEST_MAIN is set.
func TestMain(m *testing.M) {
	if (len(os.Args) > 1 && (os.Args[1] == workerArg || os.Args[1] == poolArg)) || os.Getenv("NR1_LOAD_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type procMapping struct {
	offset, size int64
}

// procMappings lists pid's mappings of path, from /proc/PID/maps.
func procMappings(t *testing.T, pid int, path string) []procMapping {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []procMapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != path {
			continue
		}
		var lo, hi, off int64
		if _, err := fmt.Sscanf(fields[0], "%x-%x", &lo, &hi); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscanf(fields[2], "%x", &off); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(fields[1], "s") {
			t.Errorf("pid %d maps %s %s: want shared", pid, path, fields[1])
		}
		out = append(out, procMapping{off, hi - lo})
	}
	return out
}

// procFDs lists pid's fds open on path.
func procFDs(t *testing.T, pid int, path string) []int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var fds []int
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && target == path {
			fd, _ := strconv.Atoi(e.Name())
			fds = append(fds, fd)
		}
	}
	return fds
}

// sameDescription says whether two fds of two processes are one open file description.
func sameDescription(t *testing.T, pid1, fd1, pid2, fd2 int) bool {
	t.Helper()
	r, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(pid1), uintptr(pid2), 0 /* KCMP_FILE */, uintptr(fd1), uintptr(fd2), 0)
	if errno != 0 {
		t.Skipf("kcmp: %v", errno)
	}
	return r == 0
}

func mappedRange(ms []procMapping) (lo, total int64) {
	lo = -1
	for _, m := range ms {
		if lo < 0 || m.offset < lo {
			lo = m.offset
		}
		total += m.size
	}
	return lo, total
}

func TestForkWorkersHoldTheSameRangesAndDescriptions(t *testing.T) {
	l := newLoad(t)
	// Grown in two steps, so that the DMA file is held as two mappings.
	if err := l.apply(Holding{ComputeDMAMB: 2, CPUDMAMB: 1, Queues: 3}); err != nil {
		t.Fatal(err)
	}
	if err := l.apply(Holding{ComputeDMAMB: 5, CPUDMAMB: 1, Queues: 4}); err != nil {
		t.Fatal(err)
	}
	w, err := l.fork(3)
	if err != nil {
		t.Fatal(err)
	}
	pids := w.pids()
	if len(pids) != 3 {
		t.Fatalf("%d workers, want 3", len(pids))
	}
	self := os.Getpid()
	var parentQueues []int // in the order the workers inherit them
	for _, q := range l.queues.fds {
		parentQueues = append(parentQueues, int(q.Fd()))
	}
	for _, pid := range pids {
		for _, d := range []*dmaFile{&l.compute, &l.cpu} {
			lo, total := mappedRange(procMappings(t, pid, d.path))
			if lo != 0 || total != d.held()*mb {
				t.Errorf("worker %d maps %d bytes of %s from offset %d, want %d MB from 0", pid, total, d.path, lo, d.held())
			}
			fds := procFDs(t, pid, d.path)
			if len(fds) != 1 || !sameDescription(t, self, int(d.f.Fd()), pid, fds[0]) {
				t.Errorf("worker %d: fds %v on %s, want the parent's open file", pid, fds, d.path)
			}
		}
		fds := procFDs(t, pid, l.queues.path)
		slices.Sort(fds)
		if len(fds) != len(parentQueues) {
			t.Fatalf("worker %d holds %d queue fds, the parent %d", pid, len(fds), len(parentQueues))
		}
		for i, fd := range fds {
			if !sameDescription(t, self, parentQueues[i], pid, fd) {
				t.Errorf("worker %d fd %d is not the parent's queue fd %d", pid, fd, parentQueues[i])
			}
		}
	}
	if err := w.stop(); err != nil {
		t.Fatalf("workers ended with %v", err)
	}
	for _, pid := range pids {
		if err := unix.Kill(pid, 0); err == nil {
			t.Errorf("worker %d still runs after stop", pid)
		}
	}
}

func TestForkWithNothingHeld(t *testing.T) {
	l := newLoad(t)
	w, err := l.fork(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
}

// alive says whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// TestForkWorkersEndWithTheProcess runs nr1-load --fork as a process and kills it with
// SIGKILL: no worker may outlive it.
func TestForkWorkersEndWithTheProcess(t *testing.T) {
	l := newLoad(t)
	cmd := exec.Command(os.Args[0],
		"--compute-dma-file", l.compute.path, "--cpu-dma-file", l.cpu.path, "--queue-file", l.queues.path,
		"--write-file", l.write.path, "--status-file", l.status,
		"--compute-dma-mb", "3", "--queues", "2", "--fork", "4")
	cmd.Env = append(os.Environ(), "NR1_LOAD_TEST_MAIN=1")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var st status
	deadline := time.Now().Add(10 * time.Second)
	for len(st.Workers) == 0 {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("no workers reported:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
		if b, err := os.ReadFile(l.status); err == nil {
			_ = json.Unmarshal(b, &st)
		}
	}
	if len(st.Workers) != 4 || st.ComputeDMAMB != 3 || st.Queues != 2 {
		t.Errorf("status %+v, want 4 workers holding 3 MB and 2 queues", st)
	}
	for _, pid := range st.Workers {
		if _, total := mappedRange(procMappings(t, pid, l.compute.path)); total != 3*mb {
			t.Errorf("worker %d maps %d bytes, want 3 MB", pid, total)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline = time.Now().Add(5 * time.Second)
	for _, pid := range st.Workers {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("worker %d outlived nr1-load", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !strings.Contains(out.String(), "workers=4") {
		t.Errorf("log does not report the workers:\n%s", out.String())
	}
}

func TestForkRefusesNegative(t *testing.T) {
	if err := run(t.Context(), []string{"--fork", "-1", "--exit"}, &strings.Builder{}); err == nil {
		t.Error("--fork -1 accepted")
	}
}
