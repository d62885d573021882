// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A killed container that nested its cgroups past PATH_MAX: every process ends, the
// cgroups no path reaches are removed, and those a path reaches stay for the runtime,
// which can then remove them all by path.
func TestKillRemovesWhatNoPathReaches(t *testing.T) {
	root, _ := realTree(t, 1, 1)
	h, err := Detect("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	ctr := filepath.Join(root, "pod00000000-0000-4000-8000-000000000000", strings.Repeat("0", 64))
	chain, deepFD := deepChain(t, ctr, 20)
	sleep := exec.Command("sleep", "60")
	sleep.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: deepFD}
	if err := sleep.Start(); errors.Is(err, unix.ENOSYS) {
		t.Skipf("no clone3(CLONE_INTO_CGROUP) to start a process inside a cgroup: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sleep.Wait() }()

	if err := h.Kill(ctr); err != nil {
		t.Fatalf("kill: %v", err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("the process in the deepest cgroup: %v, want killed", err)
	}
	// What a path reaches is left; the rest is gone.
	dir, kept := ctr, 0
	for {
		next := filepath.Join(dir, strings.Repeat("n", 250))
		if len(next) >= unix.PathMax {
			break
		}
		if _, err := os.Stat(next); err != nil {
			break
		}
		dir, kept = next, kept+1
	}
	if kept == 0 || kept == len(chain) {
		t.Fatalf("%d of the chain's %d cgroups left after the kill; want those a path reaches", kept, len(chain))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			t.Errorf("%s still nests %s, past PATH_MAX", dir, e.Name())
		}
	}
	// As a runtime does: everything removed by path, from the bottom.
	for ; dir != ctr; dir = filepath.Dir(dir) {
		if err := os.Remove(dir); err != nil {
			t.Fatalf("removing %s by path: %v", dir, err)
		}
	}
}
