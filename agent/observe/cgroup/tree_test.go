// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// realTree makes, on this host's v2 cgroups, a pod's cgroup with containers below it,
// one of which nests cgroups of its own, and returns the pod's directory and every
// directory made. It skips where it cannot: no root, no v2 tree.
func realTree(tb testing.TB, pods, containers int) (root string, dirs []string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("creating cgroups needs root")
	}
	h, err := Detect("/sys/fs/cgroup")
	if err != nil || h.V2 == "" {
		tb.Skipf("no cgroup v2 tree on this host: %v", err)
	}
	root = filepath.Join(h.V2, fmt.Sprintf("nr1-tree-%d", os.Getpid()))
	tb.Cleanup(func() {
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	})
	mkdir := func(d string) {
		if err := os.Mkdir(d, 0o755); err != nil {
			tb.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	mkdir(root)
	for p := range pods {
		pod := filepath.Join(root, fmt.Sprintf("pod%08x-0000-4000-8000-000000000000", p))
		mkdir(pod)
		for c := range containers {
			ctr := filepath.Join(pod, fmt.Sprintf("%064x", p*containers+c))
			mkdir(ctr)
			if c == 0 {
				mkdir(filepath.Join(ctr, "worker"))
				mkdir(filepath.Join(ctr, "worker", "deeper"))
			}
		}
	}
	return root, dirs
}

// statTree is the tree as a walk that stats each directory reads it: the ids Tree must
// give.
func statTree(tb testing.TB, dir string) map[string]uint64 {
	tb.Helper()
	tree := map[string]uint64{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		id, err := ID(p)
		tree[p] = id
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return tree
}

// Tree's ids, read from the directory entries, are the inodes stat gives (the ids BPF
// knows cgroups by), on the kernel's cgroupfs, for every cgroup below the walked one.
func TestTreeReadsTheIDsStatGives(t *testing.T) {
	root, dirs := realTree(t, 3, 2)
	got, err := Tree(root)
	if err != nil {
		t.Fatal(err)
	}
	want := statTree(t, root)
	if len(want) != len(dirs) {
		t.Fatalf("the stat walk found %d cgroups, %d were made", len(want), len(dirs))
	}
	if !maps.Equal(got, want) {
		t.Errorf("Tree = %v\nwant %v", got, want)
	}
	if _, err := Tree(filepath.Join(root, "gone")); err == nil {
		t.Error("Tree of a cgroup that is not there: no error")
	}
	// A cgroup of its own too, on an ordinary file system.
	dir := t.TempDir()
	for _, d := range []string{"a", "a/b", "c"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = Tree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := statTree(t, dir); !maps.Equal(got, want) {
		t.Errorf("Tree of a plain directory = %v, want %v (keys %v)", got, want, slices.Sorted(maps.Keys(want)))
	}
}

// BenchmarkTree is what a sample pays to read the cgroups below 100 pods of 2
// containers each on the kernel's cgroupfs: Tree against a walk that stats each
// cgroup (the baseline).
func BenchmarkTree(b *testing.B) {
	root, _ := realTree(b, 100, 2)
	entries, err := os.ReadDir(root)
	if err != nil {
		b.Fatal(err)
	}
	var pods []os.DirEntry
	for _, e := range entries {
		if e.IsDir() {
			pods = append(pods, e)
		}
	}
	b.Run("stat-walk", func(b *testing.B) {
		for b.Loop() {
			for _, p := range pods {
				statTree(b, filepath.Join(root, p.Name()))
			}
		}
	})
	b.Run("tree", func(b *testing.B) {
		for b.Loop() {
			for _, p := range pods {
				if _, err := Tree(filepath.Join(root, p.Name())); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
