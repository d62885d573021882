// SPDX-License-Identifier: Apache-2.0

package cgroupfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// v2Scratch makes a scratch cgroup on this host's v2 hierarchy; it skips without root or
// one.
func v2Scratch(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups and opening them by handle need root")
	}
	for _, v2 := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var st unix.Statfs_t
		if unix.Statfs(v2, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			dir := filepath.Join(v2, fmt.Sprintf("nr1-cgroupfs-%d", os.Getpid()))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				below, _ := Below(dir)
				for i := len(below) - 1; i >= 0; i-- {
					_ = Remove(dir, below[i])
				}
				_ = os.Remove(dir)
			})
			return dir
		}
	}
	t.Skip("no cgroup v2 hierarchy on this host")
	return ""
}

// Below lists a tree nested past PATH_MAX whole, each cgroup after its parent with the
// length of its path; Remove removes it from the bottom by ids, with no path; a cgroup
// removed meanwhile is not an error of the walk.
func TestBelowAndRemoveReachPastPathMax(t *testing.T) {
	dir := v2Scratch(t)
	name := strings.Repeat("d", 250)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want []uint64
	for range 20 {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		_ = unix.Close(fd)
		fd = next
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		want = append(want, st.Ino)
	}
	_ = unix.Close(fd)
	if err := os.Mkdir(filepath.Join(dir, "side"), 0o755); err != nil {
		t.Fatal(err)
	}
	below, err := Below(dir)
	if err != nil {
		t.Fatalf("Below a tree nested past PATH_MAX: %v", err)
	}
	var chain []uint64
	seen := map[uint64]int{}
	for i, e := range below {
		seen[e.ID] = i
		if p, ok := seen[e.Parent]; ok && p >= i {
			t.Errorf("cgroup %d listed before its parent", e.ID)
		}
		if e.Name == name {
			chain = append(chain, e.ID)
			if want := len(dir) + len(chain)*251; e.PathLen != want {
				t.Errorf("level %d: path length %d, want %d", len(chain), e.PathLen, want)
			}
		}
	}
	if !slices.Equal(chain, want) || len(below) != len(want)+1 {
		t.Fatalf("Below listed %d cgroups, the chain %v; want the chain %v and one beside it", len(below), chain, want)
	}
	for i := len(below) - 1; i >= 0; i-- {
		if err := Remove(dir, below[i]); err != nil {
			t.Fatalf("removing %d: %v", below[i].ID, err)
		}
	}
	if err := Remove(dir, below[0]); !Gone(err) {
		t.Errorf("removing a cgroup twice: %v, want it gone", err)
	}
	if err := os.Remove(dir); err != nil {
		t.Errorf("the scratch cgroup not empty after removing all below it: %v", err)
	}
	if err := Walk(dir, func(int, uint64) error { return nil }); !errors.Is(err, unix.ENOENT) {
		t.Errorf("walking a cgroup gone: %v, want ENOENT", err)
	}
}

// ProcsOf lists the processes of a cgroup named by its id alone; a cgroup removed
// since is told as gone.
func TestProcsOfListsACgroupByItsID(t *testing.T) {
	dir := v2Scratch(t)
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	pids, err := ProcsOf(filepath.Dir(dir), st.Ino, []int{1})
	if err != nil || !slices.Equal(pids, []int{1, cmd.Process.Pid}) {
		t.Fatalf("ProcsOf = %v, %v; want [1 %d] (appended)", pids, err, cmd.Process.Pid)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := ProcsOf(filepath.Dir(dir), st.Ino, nil); !Gone(err) {
		t.Errorf("ProcsOf a removed cgroup: %v, want an error Gone tells", err)
	}
}
