// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// deepChain makes below dir a chain of cgroups whose path passes PATH_MAX, made and
// removed by descriptors since no path reaches its bottom, and returns the id of each
// level, the deepest last, and the deepest level open.
func deepChain(tb testing.TB, dir string, levels int) ([]uint64, int) {
	tb.Helper()
	name := strings.Repeat("n", 250)
	fds := []int{}
	open := func(parent int, n string) int {
		fd, err := unix.Openat(parent, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			tb.Fatalf("opening level %d: %v", len(fds), err)
		}
		return fd
	}
	fds = append(fds, open(unix.AT_FDCWD, dir))
	tb.Cleanup(func() {
		for i := len(fds) - 1; i > 0; i-- {
			if err := unix.Unlinkat(fds[i-1], name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
				tb.Errorf("removing level %d: %v", i, err)
			}
		}
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	})
	ids := make([]uint64, 0, levels)
	for range levels {
		parent := fds[len(fds)-1]
		if err := unix.Mkdirat(parent, name, 0o755); err != nil {
			tb.Fatalf("making level %d: %v", len(fds), err)
		}
		fd := open(parent, name)
		fds = append(fds, fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			tb.Fatal(err)
		}
		ids = append(ids, st.Ino)
	}
	return ids, fds[len(fds)-1]
}

// A pod that nests its cgroups past PATH_MAX: the walk reads what a path reaches and
// does not fail, and every cgroup below is placed below the pod's by its id alone.
func TestLineagePlacesACgroupNestedPastPathMax(t *testing.T) {
	root, _ := realTree(t, 1, 2)
	pod := filepath.Join(root, "pod00000000-0000-4000-8000-000000000000")
	ctr := filepath.Join(pod, strings.Repeat("0", 64))
	chain, deepFD := deepChain(t, ctr, 20) // 20 × 251 bytes below the container
	tree, err := Tree(pod)
	if err != nil {
		t.Fatalf("the walk of a pod nesting past PATH_MAX failed: %v", err)
	}
	podID, ctrID := tree[pod], tree[ctr]
	if podID == 0 || ctrID == 0 {
		t.Fatalf("the pod's and container's cgroups not read: %v", tree)
	}
	reached := 0
	for _, id := range tree {
		for _, c := range chain {
			if id == c {
				reached++
			}
		}
	}
	if reached == 0 || reached == len(chain) {
		t.Fatalf("the walk read %d of the chain's %d levels: it should read those a path reaches, and only those", reached, len(chain))
	}

	l, err := OpenLineage(filepath.Dir(root))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	in := func(set ...uint64) func(uint64) bool {
		return func(id uint64) bool {
			for _, s := range set {
				if s == id {
					return true
				}
			}
			return false
		}
	}
	deepest := chain[len(chain)-1]
	if a, ok, err := l.Below(deepest, in(ctrID, podID)); err != nil || !ok || a != ctrID {
		t.Errorf("the deepest cgroup placed below %d (%v, %v), want its container's %d", a, ok, err, ctrID)
	}
	if a, ok, err := l.Below(deepest, in(podID)); err != nil || !ok || a != podID {
		t.Errorf("with only the pod's cgroup known: below %d (%v, %v), want %d", a, ok, err, podID)
	}
	other := tree[filepath.Join(pod, strings.Repeat("0", 63)+"1")]
	if a, ok, err := l.Below(deepest, in(other)); err != nil || ok {
		t.Errorf("placed below the other container's cgroup %d (%v, %v): it is not", a, ok, err)
	}
	if _, ok, err := l.Below(other, in(chain...)); err != nil || ok {
		t.Errorf("a cgroup above the chain placed below it (%v, %v)", ok, err)
	}
	// What was found is remembered while its ancestor is asked for; forgotten on Forget.
	l.Below(deepest, in(ctrID))
	if a := l.found[deepest]; a != ctrID {
		t.Errorf("remembered %d for the deepest cgroup, want %d", a, ctrID)
	}
	l.Forget(func(uint64) bool { return false })
	if len(l.found) != 0 {
		t.Errorf("remembered %v after forgetting all", l.found)
	}
	// A process there is the container's: read with its processes, its cgroup with its
	// descendants.
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
	procs, err := unix.Openat(deepFD, "cgroup.procs", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = unix.Write(procs, []byte(strconv.Itoa(sleep.Process.Pid)))
	_ = unix.Close(procs)
	if err != nil {
		t.Fatalf("moving a process to the deepest cgroup: %v", err)
	}
	defer func() {
		// Back to the test's cgroup, so that the chain can be removed once it has exited.
		_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0o644)
	}()
	sub, err := ReadSubtree(ctr)
	if err != nil {
		t.Fatalf("reading the processes of a container nesting past PATH_MAX: %v", err)
	}
	if !slices.Contains(sub.PIDs, sleep.Process.Pid) || !slices.Contains(sub.Descendants, deepest) || len(sub.Descendants) != len(chain)+2 {
		t.Errorf("the container's subtree: %d processes %v, %d descendants; want process %d and the chain's %d cgroups and the worker's 2, the deepest %d",
			len(sub.PIDs), sub.PIDs, len(sub.Descendants), sleep.Process.Pid, len(chain), deepest)
	}
	if ids, err := Descendants(ctr); err != nil || len(ids) != len(chain)+2 {
		t.Errorf("the container's descendants: %d (%v), want %d", len(ids), err, len(chain)+2)
	}
	// A cgroup gone is below nothing, and no error.
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(root, "gone")
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	goneID, _ := ID(gone)
	_ = os.Remove(gone)
	if _, ok, err := l.Below(goneID, in(st.Ino)); ok || err != nil {
		t.Errorf("a removed cgroup: %v, %v; want below nothing, no error", ok, err)
	}
}
