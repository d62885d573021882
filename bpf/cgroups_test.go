// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
)

// TestCgroupChangesCountEachMkdirAndRmdir: a cgroup made and removed in the host's v2
// tree moves the count at each step, and v2 refuses to rename one (a walk's paths hold
// while the count does).
func TestCgroupChangesCountEachMkdirAndRmdir(t *testing.T) {
	parent := v2CgroupOrSkip(t)
	c, err := WatchCgroups()
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("kernel lacks BPF or the cgroup tracepoints: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	count := func() uint64 {
		t.Helper()
		n, err := c.Count()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	child := filepath.Join(parent, "a")
	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"mkdir", func() error { return os.Mkdir(child, 0o755) }},
		{"rename refused", func() error {
			if err := os.Rename(child, child+"-renamed"); !errors.Is(err, os.ErrPermission) {
				t.Errorf("renaming a v2 cgroup: %v, want EPERM", err)
			}
			return os.Mkdir(child+"-2", 0o755) // a change of the test's own
		}},
		{"rmdir", func() error { return errors.Join(os.Remove(child), os.Remove(child+"-2")) }},
	} {
		// Other cgroups may change meanwhile: the count only ever grows, and a step
		// of the test's own grows it.
		before := count()
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if after := count(); after <= before {
			t.Errorf("%s: the count went from %d to %d", step.name, before, after)
		}
	}
}
