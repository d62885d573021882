// SPDX-License-Identifier: Apache-2.0

package inventory

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/observe/allocation"
	"github.com/neureality-sdk/nr1-agent/agent/observe/cgroup"
	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime"
	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/internal/untrusted"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Snapshot is the node's CGs at one time.
type Snapshot struct {
	Taken time.Time `json:"taken"`
	view.Inputs
	CGs []*view.CG `json:"cgs"`
}

// RuntimeSource is the runtime watcher as the inventory reads it.
type RuntimeSource interface {
	Load() (*runtime.Snapshot, <-chan struct{})
}

// AllocationSource is the pod-resources tracker as the inventory reads it.
type AllocationSource interface {
	Load() (allocation.State, <-chan struct{})
	// Health's last success is when the kubelet last answered.
	Health() (time.Time, error)
}

// ClaimSource gives what a DRA claim of the NR1's driver consumed of the NR1: the DRA
// driver's prepared claims.
type ClaimSource interface {
	ClaimAmounts(namespace, name string) (nr1.Amounts, bool)
	// ReleasedCDIDeviceClaim names a claim of that share unprepared lately: a pod's
	// containers may still be seen running after the kubelet unprepared its claims.
	ReleasedCDIDeviceClaim(name string) (namespace, claim string, amounts nr1.Amounts, ok bool)
	// CDIDeviceClaim names the prepared claim of a share the kubelet gave a container
	// as a CDI device, and what the claim consumed.
	CDIDeviceClaim(name string) (namespace, claim string, amounts nr1.Amounts, ok bool)
}

// NamespaceSource gives the agent's labels on a namespace as of now, or why they are not
// known.
type NamespaceSource interface {
	Labels(namespace string, now time.Time) (map[string]string, error)
}

// Options are what a builder joins.
type Options struct {
	Runtime     RuntimeSource
	Allocations AllocationSource
	Namespaces  NamespaceSource
	// Claims are the DRA driver's prepared claims: a container the kubelet lists with a
	// claim of the NR1's driver is allocated what the claim consumed. Nil without the
	// DRA driver.
	Claims ClaimSource
	// CDIDir is the host's CDI directory, where the DRA driver writes the claims' specs:
	// the source of the shares' marks (nr1.ShareOfMount).
	CDIDir  string
	Cgroups cgroup.Hierarchy
	// CgroupChanges, when not nil, lets a build reuse a pod's cgroup tree while no
	// cgroup on the node was made or removed since it was walked.
	CgroupChanges CgroupChanges
	// MaxAllocationAge is how old an allocation table may be: older, it is as unknown as
	// none.
	MaxAllocationAge time.Duration
	Log              *slog.Logger
}

// Builder builds snapshots.
type Builder struct {
	runtime    RuntimeSource
	allocation AllocationSource
	namespaces NamespaceSource
	cgroups    cgroup.Hierarchy
	maxAge     time.Duration
	log        *slog.Logger
	plugin     *pluginBooks
	dra        claimBooks
	trees      *trees

	mu      sync.Mutex
	refused map[string]string // sandbox ID → last refusal logged
	// podDirs are the pods' cgroups (pod UID → directory), as their running containers
	// showed them or a search of the tree found them: a pod no container of which the
	// runtime describes, or none of which runs, is looked for once, not at every sample.
	podDirs map[string]string
	// podDirsMissed are the pods whose search found no cgroup (pod UID → the cgroup
	// changes counted before it, plus one): not searched again until a cgroup changes.
	podDirsMissed map[string]uint64
}

// NewBuilder returns a builder of what o's sources say.
func NewBuilder(o Options) *Builder {
	return &Builder{runtime: o.Runtime, allocation: o.Allocations, namespaces: o.Namespaces, cgroups: o.Cgroups, maxAge: o.MaxAllocationAge, log: o.Log,
		plugin: &pluginBooks{log: o.Log, reported: map[string]string{}}, dra: claimBooks{claims: o.Claims, cdiDir: o.CDIDir},
		trees: &trees{changes: o.CgroupChanges}, refused: map[string]string{}, podDirs: map[string]string{}, podDirsMissed: map[string]uint64{}}
}

// Mismatches counts containers whose Allocate annotations disagreed with the
// pod-resources API (which wins).
func (b *Builder) Mismatches() int64 { return b.plugin.mismatches.Load() }

// Build reads the sources and the cgroups now.
func (b *Builder) Build(now time.Time) *Snapshot {
	rs, _ := b.runtime.Load()
	alloc, _ := b.allocation.Load()
	answered, _ := b.allocation.Health()
	if alloc.Read.IsZero() {
		answered = time.Time{}
	}
	snap := &Snapshot{Taken: now, Inputs: view.Inputs{RuntimeConnected: rs.Connected, AllocationRead: answered}, CGs: make([]*view.CG, 0, len(rs.Pods))}
	seen, seenPods, seenUIDs := make(map[string]bool), make(map[string]bool), make(map[string]bool)
	succeeded := successors(rs.Pods)
	walks := b.trees.round()
	defer walks.end()
	for _, p := range rs.Pods {
		seenPods[p.SandboxID], seenUIDs[p.UID] = true, true
		cg := &view.CG{
			UID: p.UID, Namespace: p.Namespace, Name: p.Name, QoS: p.QoS(), Ready: p.Ready, Annotations: p.Annotations,
			Containers: make([]*view.Container, 0, len(p.Containers)),
		}
		var refused []string
		if err := untrusted.PodUID(p.UID); err != nil {
			refused = append(refused, err.Error())
		}
		for _, c := range p.Containers {
			seen[c.ID] = true
			ctr, err := b.container(c, walks)
			if err != nil {
				refused = append(refused, fmt.Sprintf("container %s: %v", c.Name, err))
			}
			cg.Containers = append(cg.Containers, ctr)
		}
		b.podCgroup(cg, walks)
		if next := succeeded[p.UID]; next != nil {
			cg.AllocationUnknown = fmt.Sprintf("a newer pod of its name (UID %s) is on the node, and the kubelet's pod-resources answer names pods, not UIDs",
				untrusted.Quote(next.UID))
		} else {
			b.allocate(now, cg, p, alloc, answered)
		}
		if len(refused) > 0 {
			b.refuse(cg, p.SandboxID, refused)
		}
		if labels, err := b.namespaces.Labels(p.Namespace, now); err != nil {
			cg.NamespaceUnknown = err.Error()
		} else {
			cg.NamespaceLabels = labels
		}
		snap.CGs = append(snap.CGs, cg)
	}
	b.forget(seenPods, seenUIDs)
	b.plugin.forget(seen)
	return snap
}

// successors names, for each pod another pod of its namespace and name succeeded on the
// node, that successor. The kubelet's pod-resources answer names pods, not UIDs: it
// speaks for the successor, allocated in part as it may be while the kubelet admits it,
// never for the predecessor still terminating.
func successors(pods []*runtime.Pod) map[string]*runtime.Pod {
	type name struct{ namespace, name string }
	newest := map[name]*runtime.Pod{}
	for _, p := range pods {
		k := name{p.Namespace, p.Name}
		if n := newest[k]; n == nil || later(p, n) {
			newest[k] = p
		}
	}
	var out map[string]*runtime.Pod
	for _, p := range pods {
		if n := newest[name{p.Namespace, p.Name}]; n.UID != p.UID {
			if out == nil {
				out = map[string]*runtime.Pod{}
			}
			out[p.UID] = n
		}
	}
	return out
}

// later orders two pods of one name: by when this agent first saw them, on its
// monotonic clock; seen at once (an agent that just started), by when the runtime
// created them, both on the runtime's clock.
func later(a, b *runtime.Pod) bool {
	if !a.Observed.Equal(b.Observed) {
		return a.Observed.After(b.Observed)
	}
	return a.CreatedAt.After(b.CreatedAt)
}

// podCgroup finds the pod's v2 cgroup and attributes to the CG what the runtime did not
// describe: a running container the runtime gave no cgroupsPath (its status unread) gets
// its cgroup, found below the pod's by its ID, and every other cgroup below the pod's is
// the CG's too. What a CG shows the runtime never decides where its processes are: the
// kubelet puts every one of them below the pod's cgroup. A live pod none of whose
// containers runs (between its init containers and the others, a container restarting)
// keeps its cgroup: what its processes left there, and its booking, are still its own.
func (b *Builder) podCgroup(cg *view.CG, walks *round) {
	dir := ""
	undescribed, running := false, false
	for _, c := range cg.Containers {
		if c.State != view.Running {
			continue
		}
		running = true
		if c.Cgroup.V2 == "" {
			undescribed = true
			continue
		}
		if parent := filepath.Dir(c.Cgroup.V2); dir == "" && cgroup.IsPodDir(filepath.Base(parent), cg.UID) {
			dir = parent
		}
	}
	switch {
	case dir != "":
		b.mu.Lock()
		b.podDirs[cg.UID] = dir
		b.mu.Unlock()
	case undescribed || (!running && cg.Ready):
		dir = b.searchPodDir(cg, walks)
	}
	// One walk of the pod's cgroup reads its containers' and every cgroup below them
	// (none while no cgroup changed on the node).
	var tree map[string]uint64
	if dir != "" {
		var err error
		if tree, err = walks.tree(dir); err != nil {
			dir, tree = "", nil // the pod gone meanwhile
		}
	}
	known := map[uint64]bool{}
	for _, c := range cg.Containers {
		if c.State != view.Running {
			continue
		}
		if c.Cgroup.V2 == "" && dir != "" {
			if d, err := cgroup.ContainerDir(dir, c.ID); err == nil && d != "" {
				c.Cgroup.V2 = d
				if c.CgroupID = tree[d]; c.CgroupID == 0 {
					c.CgroupID, _ = cgroup.ID(d) // made since the walk
				}
			}
		}
		if c.Cgroup.V2 == "" {
			continue
		}
		if c.CgroupID == 0 {
			// Read by the pod's walk; a cgroup outside it, or made since, alone.
			if c.CgroupID = tree[c.Cgroup.V2]; c.CgroupID == 0 {
				c.CgroupID, _ = cgroup.ID(c.Cgroup.V2)
			}
		}
		if below, ok := within(tree, c.Cgroup.V2); ok {
			c.ChildCgroupIDs = below
		} else if ids, err := cgroup.Descendants(c.Cgroup.V2); err == nil {
			// Not below the pod's cgroup (a layout the agent does not know): its own walk.
			// The container may have exited since the runtime said it runs: none then.
			c.ChildCgroupIDs = ids
		}
		if c.CgroupID != 0 {
			known[c.CgroupID] = true
		}
		for _, cid := range c.ChildCgroupIDs {
			known[cid] = true
		}
	}
	if dir == "" {
		return
	}
	cg.PodCgroup = dir
	cg.PodCgroupIDs = append(cg.PodCgroupIDs, tree[dir])
	for _, p := range slices.Sorted(maps.Keys(tree)) {
		if id := tree[p]; p != dir && !known[id] {
			cg.PodCgroupIDs = append(cg.PodCgroupIDs, id)
		}
	}
}

// within returns the ids of the cgroups below dir in tree, in path order; false when dir
// is not in tree.
func within(tree map[string]uint64, dir string) ([]uint64, bool) {
	if _, ok := tree[dir]; !ok {
		return nil, false
	}
	var paths []string
	for p := range tree {
		if strings.HasPrefix(p, dir+"/") {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		return nil, true
	}
	slices.Sort(paths)
	ids := make([]uint64, 0, len(paths))
	for _, p := range paths {
		ids = append(ids, tree[p])
	}
	return ids, true
}

// searchPodDir finds the pod's cgroup in the tree: no container the runtime described
// says where it is. A directory found before is reused while it exists; a search that
// found none is not made again until a cgroup is made or removed on the node.
func (b *Builder) searchPodDir(cg *view.CG, walks *round) string {
	b.mu.Lock()
	dir, known := b.podDirs[cg.UID]
	missed := walks.counted && b.podDirsMissed[cg.UID] == walks.count+1
	b.mu.Unlock()
	if known {
		if _, err := os.Stat(dir); err == nil {
			return dir
		}
	} else if missed {
		return ""
	}
	dir, err := b.cgroups.PodDir(cg.UID)
	if err != nil {
		b.log.Debug("looking for a pod's cgroup", "namespace", cg.Namespace, "pod", cg.Name, "err", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.podDirsMissed, cg.UID)
	switch {
	case dir != "":
		b.podDirs[cg.UID] = dir
	case walks.counted && err == nil:
		delete(b.podDirs, cg.UID)
		b.podDirsMissed[cg.UID] = walks.count + 1
	default:
		delete(b.podDirs, cg.UID)
	}
	return dir
}

// RunningPods are the pods the runtime runs as the allocation tracker reads them: what
// it waits for in a table it reads on demand.
type RunningPods struct{ Runtime RuntimeSource }

// Changed returns a channel closed when the runtime's pods next change.
func (r RunningPods) Changed() <-chan struct{} {
	_, changed := r.Runtime.Load()
	return changed
}

// Awaits says whether the allocation table lacks a pod the runtime runs (one with a
// running container): not listed, or listed by a read that began before the agent first
// saw the pod. The tracker reads the table again while it does.
func (r RunningPods) Awaits(alloc allocation.State) bool {
	rs, _ := r.Runtime.Load()
	for _, p := range rs.Pods {
		if !p.Running() {
			continue
		}
		if alloc.Read.Before(p.Observed) {
			return true
		}
		if _, listed := alloc.Table.Pod(p.Namespace, p.Name); !listed {
			return true
		}
	}
	return false
}

// refuse leaves a CG the runtime describes in a way the agent refuses (a pod UID that is
// none, a cgroupsPath leaving its hierarchy) unknown, so that nothing is done to it on
// the strength of that description, and logs each refusal once.
func (b *Builder) refuse(cg *view.CG, sandboxID string, refused []string) {
	problem := strings.Join(refused, "; ")
	why := problem
	if cg.AllocationUnknown != "" {
		why += "; " + cg.AllocationUnknown
	}
	cg.Allocation, cg.AllocationKnown, cg.AllocationUnknown = nr1.Amounts{}, false, why
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.refused[sandboxID] != problem {
		b.refused[sandboxID] = problem
		b.log.Warn("the runtime's description of a pod is refused; its CG is left alone",
			"namespace", cg.Namespace, "pod", cg.Name, "problem", problem)
	}
}

// container reads a container's cgroup. The error is a cgroupsPath refused; a cgroup
// gone meanwhile is no error, only no processes.
func (b *Builder) container(c *runtime.Container, walks *round) (*view.Container, error) {
	ctr := &view.Container{ID: c.ID, Name: c.Name, Image: c.Image, ImageRef: c.ImageRef, State: c.State, StartedAt: c.StartedAt}
	if c.State != view.Running || c.CgroupsPath == "" {
		return ctr, nil
	}
	paths, err := walks.resolve(b.cgroups, c.CgroupsPath)
	if err != nil {
		return ctr, err
	}
	ctr.Cgroup = view.Cgroup(paths)
	// Its cgroup's ID, and those of the cgroups it made below its own, are read with its
	// pod's (podCgroup). Its processes are read when asked (Processes), not at every
	// sample.
	return ctr, nil
}

// Processes reads c's processes now, those of its child cgroups included; none for a
// container not running. Those read already (PIDs) are returned as they are.
func Processes(c *view.Container) ([]int, error) {
	if c.PIDs != nil {
		return c.PIDs, nil
	}
	dir := cgroup.Paths(c.Cgroup).ProcsDir()
	if c.State != view.Running || dir == "" {
		return nil, nil
	}
	t, err := cgroup.ReadSubtree(dir)
	if err != nil {
		return nil, err
	}
	return t.PIDs, nil
}

// listing is the kubelet's table's entry for the pod, or why the pod's allocation
// cannot be read from it.
func (b *Builder) listing(now time.Time, p *runtime.Pod, alloc allocation.State, answered time.Time) (map[string]allocation.Listed, string) {
	if answered.IsZero() {
		return nil, "the kubelet's pod-resources API has not been read yet"
	}
	if age := now.Sub(answered); age > b.maxAge {
		return nil, fmt.Sprintf("the kubelet's pod-resources API last answered %s ago (limit %s)", age.Round(time.Millisecond), b.maxAge)
	}
	if alloc.Read.Before(p.Observed) {
		// The table may hold an earlier pod of the same name (the API names pods, it has
		// no UIDs), or not this one yet. Ordered by what this agent saw, on its monotonic
		// clock: the runtime's creation time is another clock's, and a step of either
		// would give a re-created pod its predecessor's allocation. The kubelet allocates
		// before it asks the runtime for the sandbox, so a read begun after the agent saw
		// the sandbox holds the pod's allocation.
		return nil, fmt.Sprintf("pod first seen %s after the kubelet's pod-resources answer was read",
			p.Observed.Sub(alloc.Read).Round(time.Millisecond))
	}
	listed, ok := alloc.Table.Pod(p.Namespace, p.Name)
	if !ok {
		// A restarting kubelet answers before it has read its pods again: a pod it does
		// not list is unknown, never given nothing.
		return nil, "pod not in the kubelet's pod-resources answer"
	}
	return listed, ""
}

// allocate sets the CG's allocation, or says why it is unknown: the pod-level combine
// of what each mode says its containers were given (pluginBooks, claimBooks). The
// listed containers' sum, a claim they share counted once, or the largest init
// container's when more.
func (b *Builder) allocate(now time.Time, cg *view.CG, p *runtime.Pod, alloc allocation.State, answered time.Time) {
	listed, why := b.listing(now, p, alloc, answered)
	if why != "" {
		cg.AllocationUnknown = why
		return
	}
	var sum, initMax nr1.Amounts
	var problems []string
	claimed := map[allocation.ClaimKey]nr1.Amounts{}
	unlisted := map[allocation.ClaimKey]nr1.Amounts{} // the claims of containers the kubelet does not list
	for _, name := range slices.Sorted(maps.Keys(listed)) {
		l := listed[name]
		sum = nr1.Add(sum, l.Units)
		for _, k := range l.Claims {
			if _, seen := claimed[k]; seen {
				continue
			}
			a, err := b.dra.claim(k)
			if err != nil {
				problems = append(problems, fmt.Sprintf("container %s: %v", name, err))
				continue
			}
			claimed[k] = a
			sum = nr1.Add(sum, a)
		}
	}
	latest := latestInstances(p.Containers)
	for i, c := range p.Containers {
		ctr := cg.Containers[i]
		// The claims the container holds as the kubelet gave them to it. The kubelet's
		// pod-resources answer leaves init containers out, and its claim information can
		// be missing; a container holding a share of the NR1 whose claim the agent cannot
		// tell is unknown, never given nothing.
		held, err := b.dra.held(cg, c)
		if err != nil {
			if c.State == view.Running {
				problems = append(problems, fmt.Sprintf("container %s: %v", c.Name, err))
			}
			continue
		}
		if l, ok := listed[c.Name]; ok {
			units, problem := b.plugin.listed(cg, c, l.Units, latest[c.Name] == c)
			if problem != "" {
				problems = append(problems, problem)
			}
			ctr.Allocation, ctr.AllocationSource = units, view.FromPodResources
			for _, k := range l.Claims {
				ctr.Allocation = nr1.Add(ctr.Allocation, claimed[k])
			}
			for k, a := range held {
				if slices.Contains(l.Claims, k) {
					continue
				}
				if _, seen := claimed[k]; !seen {
					claimed[k] = a
					sum = nr1.Add(sum, a)
				}
				ctr.Allocation = nr1.Add(ctr.Allocation, a)
			}
			continue
		}
		var fromClaims nr1.Amounts
		for k, a := range held {
			fromClaims = nr1.Add(fromClaims, a)
			unlisted[k] = a
		}
		units, found, problem := b.plugin.unlisted(c)
		switch {
		case problem != "":
			problems = append(problems, problem)
		case found:
			ctr.Allocation, ctr.AllocationSource = nr1.Add(units, fromClaims), view.FromAnnotations
			initMax = nr1.Max(initMax, ctr.Allocation)
		case len(held) > 0:
			ctr.Allocation, ctr.AllocationSource = fromClaims, view.FromCDIDevices
			initMax = nr1.Max(initMax, fromClaims)
		}
	}
	if len(problems) > 0 {
		cg.AllocationUnknown = strings.Join(problems, "; ")
		return
	}
	cg.Allocation, cg.AllocationKnown = nr1.Max(sum, initMax), true
	maps.Copy(unlisted, claimed) // now every claim the CG holds
	for _, k := range slices.SortedFunc(maps.Keys(unlisted), func(a, b allocation.ClaimKey) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	}) {
		cg.Claims = append(cg.Claims, view.Claim{Namespace: k.Namespace, Name: k.Name, Amounts: unlisted[k]})
	}
}

// latestInstances names, for each container name of a pod, its latest instance: the
// kubelet's highest attempt, then the runtime's latest creation.
func latestInstances(cs []*runtime.Container) map[string]*runtime.Container {
	latest := make(map[string]*runtime.Container, len(cs))
	for _, c := range cs {
		l := latest[c.Name]
		if l == nil || c.Attempt > l.Attempt || c.Attempt == l.Attempt && c.CreatedAt.After(l.CreatedAt) {
			latest[c.Name] = c
		}
	}
	return latest
}

func (b *Builder) forget(seenPods, seenUIDs map[string]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for uid := range b.podDirs {
		if !seenUIDs[uid] {
			delete(b.podDirs, uid)
		}
	}
	for uid := range b.podDirsMissed {
		if !seenUIDs[uid] {
			delete(b.podDirsMissed, uid)
		}
	}
	for id := range b.refused {
		if !seenPods[id] {
			delete(b.refused, id)
		}
	}
}

// CG returns the CG with uid, or nil.
func (s *Snapshot) CG(uid string) *view.CG {
	for _, cg := range s.CGs {
		if cg.UID == uid {
			return cg
		}
	}
	return nil
}
