// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
)

// Processes names every process as /proc lists it, each once, and no thread: a process
// started and one that ended between two listings are named as they are then.
func TestProcessesAreEveryProcess(t *testing.T) {
	f := loadOrSkip(t)
	list := func() []uint32 {
		t.Helper()
		var pids []uint32
		if err := f.Processes(func(pid uint32) error {
			pids = append(pids, pid)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return pids
	}
	proc := func() []uint32 {
		t.Helper()
		entries, err := os.ReadDir("/proc")
		if err != nil {
			t.Fatal(err)
		}
		var pids []uint32
		for _, e := range entries {
			if n, err := strconv.ParseUint(e.Name(), 10, 32); err == nil {
				pids = append(pids, uint32(n))
			}
		}
		return pids
	}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	before, got, after := proc(), list(), proc()
	self, started := uint32(os.Getpid()), uint32(child.Process.Pid)
	// Listed by both and by /proc after: there throughout.
	for _, pid := range before {
		if slices.Contains(after, pid) && !slices.Contains(got, pid) {
			t.Errorf("process %d, listed by /proc before and after, not named", pid)
		}
	}
	sorted := slices.Clone(got)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(got) {
		t.Errorf("a process named twice: %v", got)
	}
	if !slices.Contains(got, self) || !slices.Contains(got, started) {
		t.Errorf("this process %d or its child %d not named among %d", self, started, len(got))
	}
	threads, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range threads {
		if n, err := strconv.ParseUint(th.Name(), 10, 32); err == nil && uint32(n) != self && slices.Contains(got, uint32(n)) {
			t.Errorf("thread %d of this process named as a process", n)
		}
	}
	_ = child.Process.Kill()
	_ = child.Wait()
	if slices.Contains(list(), started) {
		t.Errorf("process %d named once it was reaped", started)
	}
}

// ProcessesMade counts each process made once the mappers are followed, and nothing
// before: a list of processes is good while it stays.
func TestProcessesMadeCountsEachProcess(t *testing.T) {
	f := loadOrSkip(t)
	if _, counted, err := f.ProcessesMade(); err != nil || counted {
		t.Fatalf("before the mappers are followed: counted %v, %v; want nothing counted", counted, err)
	}
	followOrFail(t, f)
	before, counted, err := f.ProcessesMade()
	if err != nil || !counted {
		t.Fatalf("counted %v, %v", counted, err)
	}
	for range 3 {
		if err := exec.Command("true").Run(); err != nil {
			t.Fatal(err)
		}
	}
	if after, _, err := f.ProcessesMade(); err != nil || after < before+3 {
		t.Errorf("3 processes made: the count went from %d to %d (%v), want 3 more at least", before, after, err)
	}
}
