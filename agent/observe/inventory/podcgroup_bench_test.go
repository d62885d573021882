// SPDX-License-Identifier: Apache-2.0

package inventory

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/neureality-sdk/nr1-agent/agent/observe/cgroup"
	"github.com/neureality-sdk/nr1-agent/agent/view"
)

// BenchmarkPodCgroup100 is what a sample pays, for 100 CGs of 2 containers each on the
// kernel's cgroupfs, to read the cgroups below each container (a walk of each, the
// baseline) against reading them and every cgroup below each pod's (its PodCgroupIDs)
// in one walk of the pod's cgroup, as the inventory does; and at rest, where no cgroup
// on the node changed since the last walk and none is walked again.
func BenchmarkPodCgroup100(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: cgroups")
	}
	h, err := cgroup.Detect("/sys/fs/cgroup")
	if err != nil || h.V2 == "" {
		b.Skipf("no cgroup v2 tree on this host: %v", err)
	}
	root := filepath.Join(h.V2, fmt.Sprintf("nr1-bench-%d", os.Getpid()))
	var dirs []string
	b.Cleanup(func() {
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	})
	mkdir := func(d string) {
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	mkdir(root)
	var cgs []*view.CG
	for i := range 100 {
		uid := fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
		pod := filepath.Join(root, "pod"+uid)
		mkdir(pod)
		cg := &view.CG{UID: uid}
		for k := range 2 {
			ctr := filepath.Join(pod, fmt.Sprintf("%064x", i*2+k))
			mkdir(ctr)
			cg.Containers = append(cg.Containers, &view.Container{State: view.Running, Cgroup: view.Cgroup{V2: ctr}})
		}
		cgs = append(cgs, cg)
	}
	containers := func() {
		for _, cg := range cgs {
			for _, c := range cg.Containers {
				c.CgroupID, _ = cgroup.ID(c.Cgroup.V2)
				c.ChildCgroupIDs, _ = cgroup.Descendants(c.Cgroup.V2)
			}
		}
	}
	b.Run("containers", func(b *testing.B) {
		for b.Loop() {
			containers()
		}
	})
	pods := func(bl *Builder) func(b *testing.B) {
		return func(b *testing.B) {
			for b.Loop() {
				walks := bl.trees.round()
				for _, cg := range cgs {
					cg.PodCgroup, cg.PodCgroupIDs = "", nil
					bl.podCgroup(cg, walks)
				}
				walks.end()
			}
		}
	}
	b.Run("pod", pods(&Builder{trees: &trees{}}))
	b.Run("pod-at-rest", pods(&Builder{trees: &trees{changes: counted{}}}))
	if cgs[0].PodCgroup == "" || len(cgs[0].PodCgroupIDs) != 1 {
		b.Fatalf("the pod's cgroup not read: %q %v", cgs[0].PodCgroup, cgs[0].PodCgroupIDs)
	}
}
