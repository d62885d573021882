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
	// resolved are the containers' cgroupsPaths resolved in the hierarchy: a function
	// of the path alone, kept while a container of that path is seen.
	resolved map[string]resolution
}

type resolution struct {
	paths cgroup.Paths
	err   error
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
	paths   map[string]bool
}

func (t *trees) round() *round {
	r := &round{t: t, used: map[string]bool{}, paths: map[string]bool{}}
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

// resolve is h.Resolve(cgroupsPath), once for as long as a container of that path is
// seen: every build meets every running container's.
func (r *round) resolve(h cgroup.Hierarchy, cgroupsPath string) (cgroup.Paths, error) {
	r.paths[cgroupsPath] = true
	r.t.mu.Lock()
	res, ok := r.t.resolved[cgroupsPath]
	r.t.mu.Unlock()
	if ok {
		return res.paths, res.err
	}
	res.paths, res.err = h.Resolve(cgroupsPath)
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	if r.t.resolved == nil {
		r.t.resolved = map[string]resolution{}
	}
	r.t.resolved[cgroupsPath] = res
	return res.paths, res.err
}

// end forgets the trees of the pods this round did not walk, and the resolutions of
// the paths it did not meet.
func (r *round) end() {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	for dir := range r.t.walked {
		if !r.used[dir] {
			delete(r.t.walked, dir)
		}
	}
	for p := range r.t.resolved {
		if !r.paths[p] {
			delete(r.t.resolved, p)
		}
	}
}
