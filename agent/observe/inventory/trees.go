// SPDX-License-Identifier: Apache-2.0

package inventory

import (
	"sync"

	"github.com/neureality-sdk/nr1-agent/agent/observe/cgroup"
)

// CgroupChanges counts the cgroups made and removed on the node, as the kernel reports
// them (bpf.CgroupChanges): while the count stands, every cgroup tree is as it was.
type CgroupChanges interface {
	Count() (uint64, error)
}

// trees keeps each pod's cgroup tree as last walked, and walks it again only once a
// cgroup was made or removed somewhere on the node: at rest, a build walks no pod's
// cgroups. Without a count of changes (no BPF, or it failed), every build walks them all.
type trees struct {
	changes CgroupChanges

	mu     sync.Mutex
	walked map[string]walked // pod's cgroup directory → its tree
}

type walked struct {
	count uint64 // the changes counted before the walk
	tree  map[string]uint64
}

// round is one build's view of the trees: the count read once, before any walk, so
// that a change during a walk makes the next build walk again.
type round struct {
	t       *trees
	count   uint64
	counted bool
	used    map[string]bool
}

func (t *trees) round() *round {
	r := &round{t: t, used: map[string]bool{}}
	if t.changes != nil {
		n, err := t.changes.Count()
		r.count, r.counted = n, err == nil
	}
	return r
}

// tree is cgroup.Tree(dir), walked again only when a cgroup changed since its last walk.
func (r *round) tree(dir string) (map[string]uint64, error) {
	r.used[dir] = true
	if r.counted {
		r.t.mu.Lock()
		w, ok := r.t.walked[dir]
		r.t.mu.Unlock()
		if ok && w.count == r.count {
			return w.tree, nil
		}
	}
	tree, err := cgroup.Tree(dir)
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	if err != nil || !r.counted {
		delete(r.t.walked, dir)
		return tree, err
	}
	if r.t.walked == nil {
		r.t.walked = map[string]walked{}
	}
	r.t.walked[dir] = walked{count: r.count, tree: tree}
	return tree, nil
}

// end forgets the trees of the pods this round did not walk.
func (r *round) end() {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	for dir := range r.t.walked {
		if !r.used[dir] {
			delete(r.t.walked, dir)
		}
	}
}
