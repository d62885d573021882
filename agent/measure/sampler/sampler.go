// SPDX-License-Identifier: Apache-2.0

package sampler

import (
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neureality-sdk/nr1-agent/agent/observe/inventory"
	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/internal/latest"
	"github.com/neureality-sdk/nr1-agent/internal/loop"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/footprint"
)

// Snapshot is one sample of the node: what the policy judges, and the records behind
// each CG's usage.
type Snapshot struct {
	*view.Sample
	// Detail is the records behind each CG's usage, by CG UID: shown, never judged.
	Detail map[string]*Detail `json:"-"`
	// Phases are where the sample's time went (nr1_sample_phase_seconds).
	Phases []footprint.Phase `json:"-"`
}

// Detail is the records behind a CG's usage: the largest mappings and the first handles
// up to MaxDetail each, since a CG that makes 400000 of them must not make the sample
// (and /debug/cgs) as large. The totals count them all.
type Detail struct {
	Mappings      []footprint.Mapping `json:"mappings,omitempty"`
	Handles       []footprint.Handle  `json:"handles,omitempty"`
	MappingsTotal int                 `json:"mappingsTotal"`
	HandlesTotal  int                 `json:"handlesTotal"`
}

// Inventory builds the node's view of CGs.
type Inventory interface {
	Build(now time.Time) *inventory.Snapshot
}

// Partition gives each container's docker-partition usage (image + writable layer),
// measured at its own, slower interval.
type Partition interface {
	Load() (PartitionUsage, <-chan struct{})
}

// PartitionUsage is the docker partition measured per CG.
type PartitionUsage struct {
	Read  time.Time
	ByCG  map[string]nr1.Base // CG UID → bytes (distinct images + writable layers)
	ByCtr map[string]nr1.Base // container ID → bytes of its writable layer
	// SizedAt is, per CG UID, when the runtime sized the oldest of its layers: a file
	// removed from a layer before then is in no figure of it by name.
	SizedAt map[string]time.Time
	// Failed says, per CG UID, why its measurement failed; such a CG has no ByCG entry.
	Failed map[string]string
}

// Lineage finds which of the CGs' cgroups a cgroup is below when no walk read it: a pod
// that nests its cgroups past PATH_MAX, where no path reaches (cgroup.Lineage).
type Lineage interface {
	Below(id uint64, in func(uint64) bool) (uint64, bool, error)
	Forget(keep func(uint64) bool)
}

// Options are what a sampler measures with.
type Options struct {
	Inventory Inventory
	Source    footprint.Source
	Targets   *footprint.Targets
	Partition Partition
	// ScanTimeout bounds one scan: a source slowed down by what a CG does (a flood of fds
	// or mappings) stops, and the CGs it did not read are uncertain, not the node.
	ScanTimeout time.Duration
	// Lineage places a record of a cgroup no walk read below the CG whose cgroup it is
	// in; nil without a cgroup2 hierarchy.
	Lineage Lineage
	Clock   clock.PassiveClock
	Log     *slog.Logger
}

// Sampler measures the node when stepped (the cadence decides when) and publishes each
// sample.
type Sampler struct {
	opts     Options
	duration prometheus.Histogram
	phases   *prometheus.HistogramVec
	value    *latest.Value[*Snapshot] // nil before the first sample
	latest.View[*Snapshot]

	mu     sync.Mutex
	failed map[uint64]bool // cgroups whose climb failed, logged
}

// New returns a sampler; nothing is sampled until Step.
func New(opts Options) *Sampler {
	value := latest.New[*Snapshot](nil)
	return &Sampler{opts: opts, duration: newSampleDuration(), phases: newSamplePhases(), value: value, View: value.View(), failed: map[uint64]bool{}}
}

// Unsettled says why the node must be sampled at the interval rather than at rest, as
// far as the last sample can tell: a CG whose allocation is not read yet, whose usage is
// a lower bound, or whose namespace's labels (which may exempt it) are not known is
// judged once they are, at the next sample. Whether a CG is over is the enforcement's to
// say (its exemptions, its partition rule), not the sampler's.
func (s *Sampler) Unsettled(time.Time) string {
	snap, _ := s.Load()
	if snap == nil {
		return "no sample yet"
	}
	for _, cg := range snap.CGs {
		switch {
		case !cg.AllocationKnown:
			return fmt.Sprintf("the allocation of %s/%s is not known", cg.Namespace, cg.Name)
		case cg.UsageUncertain != "":
			return fmt.Sprintf("the usage of %s/%s is a lower bound", cg.Namespace, cg.Name)
		case cg.NamespaceUnknown != "":
			return fmt.Sprintf("the labels of namespace %s are not known", cg.Namespace)
		}
	}
	return ""
}

// Step samples once and publishes the sample; a failure is the stage's health.
func (s *Sampler) Step(ctx context.Context) {
	snap, err := s.Sample(ctx)
	if err != nil {
		s.opts.Log.Warn("sample failed", "err", err)
		s.value.Fail(err)
		return
	}
	s.duration.Observe(snap.Took.Seconds())
	for _, p := range snap.Phases {
		s.phases.WithLabelValues(p.Name).Observe(p.Took.Seconds())
	}
	s.value.Publish(snap.Taken, snap)
}

// Sample takes one sample now: the inventory, then one scan of every process. Took is
// the whole sample's time, inventory and attribution included: what a sample costs.
func (s *Sampler) Sample(ctx context.Context) (*Snapshot, error) {
	now := s.opts.Clock.Now()
	inv := s.opts.Inventory.Build(now)
	if g, ok := s.opts.Source.(grouper); ok {
		g.SetGroups(podGroups(inv))
	}
	built := s.opts.Clock.Now()
	sctx, cancel := context.WithTimeout(ctx, s.opts.ScanTimeout)
	if loop.Woken(ctx) {
		// A change woke this sample: the walk of a flood can wait for the next.
		sctx = footprint.InAHurry(sctx)
	} else {
		// At its time, it leaves the walk of a flood to a later one when a change waits.
		sctx = footprint.YieldingTo(sctx, func() bool { return loop.WakePending(ctx) })
	}
	scan, err := s.opts.Source.Scan(sctx)
	cancel()
	if err != nil {
		return nil, err
	}
	part, _ := s.opts.Partition.Load()
	var lineage Lineage
	if s.opts.Lineage != nil {
		l := s.lineage()
		defer l.forget()
		lineage = l
	}
	scanned := s.opts.Clock.Now()
	snap := Attribute(now, inv, scan, s.opts.Targets, part, lineage)
	snap.Took = s.opts.Clock.Since(now)
	snap.Phases = append(append([]footprint.Phase{{Name: "inventory", Took: built.Sub(now)}}, scan.Phases...),
		footprint.Phase{Name: "attribution", Took: s.opts.Clock.Since(scanned)})
	return snap, nil
}

// grouper is a source that walks the cgroups of a pod as one (footprint.BPF): a flood of
// fds spread over a pod's containers is then as heavy as in one of them.
type grouper interface {
	SetGroups(groups map[uint64]uint64)
}

// podGroups names, for each cgroup of a CG's pod (its containers', those nested below
// them, the pod's own), the pod's cgroup.
func podGroups(inv *inventory.Snapshot) map[uint64]uint64 {
	groups := map[uint64]uint64{}
	for _, cg := range inv.CGs {
		if len(cg.PodCgroupIDs) == 0 || cg.PodCgroupIDs[0] == 0 {
			continue
		}
		pod := cg.PodCgroupIDs[0]
		for _, id := range cg.PodCgroupIDs {
			groups[id] = pod
		}
		for _, c := range cg.Containers {
			for _, id := range append([]uint64{c.CgroupID}, c.ChildCgroupIDs...) {
				if id != 0 {
					groups[id] = pod
				}
			}
		}
	}
	return groups
}

// owner is who a container cgroup's records count for: its CG's tally group and its
// container's.
type owner struct {
	cg                *view.Measured
	detail            *Detail
	cgGroup, ctrGroup int
	sharedGroup       int // the group of the pods it shares a claim with; -1 for none
}

// group is one sum of the tally: a CG, a container of a CG (perContainer), or the
// unattributed (no CG).
type group struct {
	cg           *view.Measured
	perContainer bool
	container    string
	shared       *view.Shared
}

// Attribute joins a scan with the inventory by cgroup id. A CG's usage is the union of
// all its containers' records and a container's the union of its own: a range mapped by
// two containers of a pod is held once by the pod, yet each container holds it. What no
// known container holds is unattributed, also as one union.
//
// A record of a cgroup no CG's walk read (a pod's cgroups nested past PATH_MAX) is the
// CG's whose cgroup lineage finds it below: what a CG does to its cgroups never takes
// what it holds out of its usage. lineage may be nil. A file in flight whose sender's
// cgroup is gone (its container exited) is the CG's that owns the nearest of the
// ancestors it was sent with.
func Attribute(now time.Time, inv *inventory.Snapshot, scan *footprint.Scan, targets *footprint.Targets, part PartitionUsage, lineage Lineage) *Snapshot {
	snap := &Snapshot{Sample: &view.Sample{
		Taken: now, Took: scan.Took, Source: scan.Source, Inputs: inv.Inputs, PartitionRead: part.Read, CGs: make([]*view.Measured, 0, len(inv.CGs)),
	}, Detail: make(map[string]*Detail, len(inv.CGs))}
	const unattributed = 0
	groups := []group{unattributed: {}}
	owners := map[uint64]owner{}
	for _, icg := range inv.CGs {
		why, cause := unread(icg, scan)
		snap.CGs = append(snap.CGs, &view.Measured{CG: icg, PerContainer: map[string]nr1.Usage{}, UsageUncertain: why, UncertainCause: cause, UncertainOwn: view.OwnCause(cause),
			PastCap: pastCap(icg, scan, targets)})
	}
	shared := shareClaims(snap.CGs)
	sharedGroup := map[*view.Shared]int{}
	for _, s := range shared {
		sharedGroup[s] = len(groups)
		groups = append(groups, group{shared: s})
		for _, m := range s.Members {
			m.Shared = s
		}
	}
	for i, icg := range inv.CGs {
		cg := snap.CGs[i]
		cgGroup := len(groups)
		groups = append(groups, group{cg: cg})
		detail := &Detail{}
		snap.Detail[icg.UID] = detail
		sg, ok := sharedGroup[cg.Shared]
		if !ok {
			sg = -1
		}
		for _, c := range icg.Containers {
			if c.CgroupID != 0 {
				o := owner{cg: cg, detail: detail, cgGroup: cgGroup, ctrGroup: containerGroup(&groups, cgGroup, c.Name), sharedGroup: sg}
				owners[c.CgroupID] = o
				for _, id := range c.ChildCgroupIDs {
					owners[id] = o
				}
			}
			if v, ok := part.ByCtr[c.ID]; ok {
				u := cg.PerContainer[c.Name]
				u[nr1.DockerPartition] += v
				cg.PerContainer[c.Name] = u
			}
		}
		// The rest of the pod's cgroup is the CG's, no container's in particular.
		for _, id := range icg.PodCgroupIDs {
			if _, taken := owners[id]; !taken {
				owners[id] = owner{cg: cg, detail: detail, cgGroup: cgGroup, ctrGroup: -1, sharedGroup: sg}
			}
		}
		if v, ok := part.ByCG[icg.UID]; ok {
			cg.Usage[nr1.DockerPartition] = v
		} else if why, failed := part.Failed[icg.UID]; failed {
			cg.PartitionUnknown = why
		} else {
			cg.PartitionUnknown = "not measured yet"
		}
	}
	find := ownerFinder(owners, lineage)
	tally := footprint.NewTally(targets, len(groups))
	for _, m := range scan.Mappings {
		o, ok := find(m.CgroupID)
		if !ok {
			tally.AddMapping(unattributed, m)
			continue
		}
		tally.AddMapping(o.cgGroup, m)
		if o.ctrGroup >= 0 {
			tally.AddMapping(o.ctrGroup, m)
		}
		if o.sharedGroup >= 0 {
			tally.AddMapping(o.sharedGroup, m)
		}
		o.detail.keepMapping(m)
	}
	for _, h := range scan.Handles {
		o, ok := find(h.CgroupID)
		// A file in flight whose sender's container is gone: its pod's, the nearest
		// ancestor some CG owns.
		for _, up := range h.Up {
			if ok || up == 0 {
				break
			}
			o, ok = find(up)
		}
		if !ok {
			tally.AddHandle(unattributed, h)
			continue
		}
		tally.AddHandle(o.cgGroup, h)
		if o.ctrGroup >= 0 {
			tally.AddHandle(o.ctrGroup, h)
		}
		if o.sharedGroup >= 0 {
			tally.AddHandle(o.sharedGroup, h)
		}
		o.detail.HandlesTotal++
		if len(o.detail.Handles) < MaxDetail {
			o.detail.Handles = append(o.detail.Handles, h)
		}
	}
	for g, u := range tally.Sums() {
		switch gr := groups[g]; {
		case g == unattributed:
			snap.Unattributed = u
		case gr.shared != nil:
			gr.shared.Usage = u
		case !gr.perContainer:
			gr.cg.Usage = nr1.Add(gr.cg.Usage, u)
		case u != nr1.Usage{}:
			gr.cg.PerContainer[gr.container] = nr1.Add(gr.cg.PerContainer[gr.container], u)
		}
	}
	addUnlinked(scan.Unlinked, part.SizedAt, find, groups)
	for _, cg := range snap.CGs {
		cg.Ratio = view.Ratios(cg.Usage, cg.Allocation)
	}
	for _, s := range shared {
		settle(s)
	}
	return snap
}

// addUnlinked adds to each CG's docker partition, and its container's, the files removed
// from its writable layer that its processes hold open: the runtime, which sizes a layer
// by walking its names, leaves them out, yet they take the layer's blocks until closed.
// An inode two containers of a CG hold counts once for the CG; one no CG holds is no
// CG's layer. A file counts once the runtime sized the CG's layers after it was found
// with no name: a figure taken before may still hold it by its name, and counting it
// twice would put a CG that removes a file it keeps open over for a round.
func addUnlinked(unlinked []footprint.Unlinked, sizedAt map[string]time.Time, find func(uint64) (owner, bool), groups []group) {
	type held struct {
		group int
		inode uint64
	}
	counted := map[held]bool{}
	for _, u := range unlinked {
		o, ok := find(u.CgroupID)
		if !ok || o.cg.PartitionUnknown != "" || !u.Since.Before(sizedAt[o.cg.UID]) {
			continue
		}
		if k := (held{o.cgGroup, u.Inode}); !counted[k] {
			counted[k] = true
			o.cg.Usage[nr1.DockerPartition] += nr1.Base(u.Bytes)
		}
		if k := (held{o.ctrGroup, u.Inode}); o.ctrGroup >= 0 && !counted[k] {
			counted[k] = true
			name := groups[o.ctrGroup].container
			c := o.cg.PerContainer[name]
			c[nr1.DockerPartition] += nr1.Base(u.Bytes)
			o.cg.PerContainer[name] = c
		}
	}
}

// lineage is the sampler's Lineage for one sample: the cgroups asked of it are the ones
// it remembers after the sample, and a failed climb is logged once per cgroup (it may
// leave what a CG holds unattributed).
func (s *Sampler) lineage() *sampleLineage {
	return &sampleLineage{Lineage: s.opts.Lineage, sampler: s, asked: map[uint64]bool{}}
}

type sampleLineage struct {
	Lineage
	sampler *Sampler
	asked   map[uint64]bool
}

func (l *sampleLineage) Below(id uint64, in func(uint64) bool) (uint64, bool, error) {
	l.asked[id] = true
	a, ok, err := l.Lineage.Below(id, in)
	if err != nil {
		l.sampler.climbFailed(id, err)
	}
	return a, ok, err
}

// forget drops what was found of the cgroups not asked of in this sample.
func (l *sampleLineage) forget() {
	l.Forget(func(id uint64) bool { return l.asked[id] })
	l.sampler.mu.Lock()
	defer l.sampler.mu.Unlock()
	for id := range l.sampler.failed {
		if !l.asked[id] {
			delete(l.sampler.failed, id)
		}
	}
}

// climbFailed logs a failed climb, once per cgroup while it fails.
func (s *Sampler) climbFailed(id uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed[id] {
		return
	}
	s.failed[id] = true
	s.opts.Log.Warn("a cgroup no walk read could not be placed below a CG; what its processes hold is unattributed", "cgroupID", id, "err", err)
}

// ownerFinder returns who a cgroup's records count for: its owner, else the owner of the
// cgroup lineage finds it below, which is then its owner for the rest of the sample.
func ownerFinder(owners map[uint64]owner, lineage Lineage) func(uint64) (owner, bool) {
	below := map[uint64]bool{} // climbed from, below no owner
	known := func(id uint64) bool { _, ok := owners[id]; return ok }
	return func(id uint64) (owner, bool) {
		if o, ok := owners[id]; ok || lineage == nil || id == 0 || below[id] {
			return o, ok
		}
		a, ok, err := lineage.Below(id, known)
		if err != nil || !ok {
			below[id] = true
			return owner{}, false
		}
		owners[id] = owners[a]
		return owners[id], true
	}
}

// containerGroup is the group of the CG's container of that name, added if new: a
// restarted container keeps its name, and PerContainer is by name.
func containerGroup(groups *[]group, cgGroup int, name string) int {
	for g := cgGroup + 1; g < len(*groups); g++ {
		if (*groups)[g].perContainer && (*groups)[g].container == name {
			return g
		}
	}
	*groups = append(*groups, group{cg: (*groups)[cgGroup].cg, perContainer: true, container: name})
	return len(*groups) - 1
}

// MaxDetail bounds the records a CG keeps in the sample, per kind.
const MaxDetail = 32

// keepMapping counts m and keeps it if it is among the MaxDetail largest.
func (d *Detail) keepMapping(m footprint.Mapping) {
	d.MappingsTotal++
	// A min-heap by size: a CG of 60000 mappings costs a comparison each, not 32.
	h := (*smallestFirst)(&d.Mappings)
	switch {
	case len(d.Mappings) < MaxDetail:
		heap.Push(h, m)
	case m.Size > d.Mappings[0].Size:
		d.Mappings[0] = m
		heap.Fix(h, 0)
	}
}

// smallestFirst orders the kept mappings as a heap with the smallest on top.
type smallestFirst []footprint.Mapping

func (h smallestFirst) Len() int           { return len(h) }
func (h smallestFirst) Less(i, j int) bool { return h[i].Size < h[j].Size }
func (h smallestFirst) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *smallestFirst) Push(x any)        { *h = append(*h, x.(footprint.Mapping)) } //nolint:forcetypeassert // only mappings are pushed
func (h *smallestFirst) Pop() any {
	old := *h
	m := old[len(old)-1]
	*h = old[:len(old)-1]
	return m
}

// holderOf names what of the CG the cgroup id is: its container (its own cgroup or one it
// made), or the pod for another cgroup below the pod's.
func holderOf(cg *view.CG, id uint64) (string, bool) {
	if c := containerOf(cg, id); c != nil {
		return c.Name, true
	}
	if id != 0 && slices.Contains(cg.PodCgroupIDs, id) {
		return "the pod's cgroup", true
	}
	return "", false
}

// containerOf is the CG's container of the cgroup id (its own or one it made), or nil.
func containerOf(cg *view.CG, id uint64) *view.Container {
	for _, c := range cg.Containers {
		if id != 0 && (c.CgroupID == id || slices.Contains(c.ChildCgroupIDs, id)) {
			return c
		}
	}
	return nil
}

// pastCap says, per resource, which socket or ring of the CG holds more distinct files
// of it than a scan counts; nil when none does.
func pastCap(cg *view.CG, scan *footprint.Scan, targets *footprint.Targets) map[nr1.Resource]string {
	var out map[nr1.Resource]string
	for _, p := range scan.PastCap {
		name, ok := holderOf(cg, p.CgroupID)
		if !ok {
			continue
		}
		r := targets.At(p.Target).Resource
		if _, said := out[r]; said {
			continue
		}
		if out == nil {
			out = map[nr1.Resource]string{}
		}
		out[r] = fmt.Sprintf("a socket or io_uring of %s holds more distinct %s files than the %s scan counts for one", name, r.Name(), scan.Source)
	}
	return out
}

// unread says why the scan did not read all the CG holds, and the cause's name; "" when
// it did. The CG's own causes are named before the node's: one that holds more in
// flight than a scan reads is not shielded by a scan that also ran short of time.
func unread(cg *view.CG, scan *footprint.Scan) (why, cause string) {
	for _, id := range scan.InFlightUnread {
		if name, ok := holderOf(cg, id); ok {
			return fmt.Sprintf("a socket of %s holds more queue handles in flight than a scan reads", name), view.CauseInFlight
		}
	}
	for _, id := range scan.RingUnread {
		if name, ok := holderOf(cg, id); ok {
			return fmt.Sprintf("an io_uring of %s holds more files than the %s scan reads", name, scan.Source), view.CauseRing
		}
	}
	// The walk of a flood of fds is the flooder's cost: when it runs the scan out of
	// time, the flooder's usage is uncertain by its own doing, not shielded by the cut.
	for _, id := range scan.Unfinished {
		if name, ok := holderOf(cg, id); ok {
			return fmt.Sprintf("processes of %s hold more than %d fds, alone or together, walked after every other process and every smaller such cgroup, and the %s scan walks %d of their fds at most, within its time", name, footprint.HeavyFDs, scan.Source, footprint.HeavyWalk), view.CauseFDTable
		}
	}
	for _, id := range scan.Heavy {
		if name, ok := holderOf(cg, id); ok && scan.Cutoff != 0 {
			return fmt.Sprintf("processes of %s hold more than %d fds, alone or together, and the %s scan ran out of time", name, footprint.HeavyFDs, scan.Source), view.CauseFDTable
		}
	}
	for _, id := range scan.UnlinkedUnread {
		if name, ok := holderOf(cg, id); ok {
			return fmt.Sprintf("a process of %s holds more than %d files removed from its writable layer, more than the %s scan sizes", name, footprint.MaxUnlinked, scan.Source), view.CauseUnlinked
		}
	}
	for _, id := range scan.Uncounted {
		if name, ok := holderOf(cg, id); ok {
			return fmt.Sprintf("a process of %s holds queues with no fd on them (mapped, in an io_uring), which the %s scan cannot tell apart", name, scan.Source), view.CauseNoFD
		}
	}
	// Processes are attributed by cgroup: those of a running container without one the
	// agent could read count for the CG through the pod's cgroup, which holds them all.
	// Without that either (a host without cgroup v2, the pod's cgroup not found) they
	// count as no CG's, so the CG's usage is a lower bound.
	for _, c := range cg.Containers {
		if c.State == view.Running && c.CgroupID == 0 && len(cg.PodCgroupIDs) == 0 {
			return fmt.Sprintf("container %s runs without a cgroup the agent can read: what its processes hold is no CG's", c.Name), view.CauseNoCgroup
		}
	}
	for _, id := range scan.RingLayout {
		if name, ok := holderOf(cg, id); ok {
			return fmt.Sprintf("an io_uring of %s is of a kernel layout the %s scan does not know", name, scan.Source), view.CauseRingLayout
		}
	}
	if scan.InFlightCut {
		return "the pass over handles in flight on sockets ran out of time: what its sockets hold is a lower bound", view.CauseInFlightTime
	}
	for _, id := range scan.InFlightForeign {
		if name, ok := holderOf(cg, id); ok {
			return fmt.Sprintf("a socket of %s is of a network namespace the scan could not enter", name), view.CauseNetNS
		}
	}
	for _, id := range scan.Unreached {
		if name, ok := holderOf(cg, id); ok {
			return fmt.Sprintf("the %s scan ran out of time before it walked the processes of %s whole, walked after every other process (more than %d fds, or among the largest past %d on the node)", scan.Source, name, footprint.HeavyFDs, footprint.LightWalk), view.CauseScanTime
		}
	}
	if scan.Cutoff == 0 {
		return "", ""
	}
	for _, c := range cg.Containers {
		pids, err := inventory.Processes(c)
		if err != nil {
			return fmt.Sprintf("the %s scan ran out of time at PID %d, and the processes of %s could not be read: %v", scan.Source, scan.Cutoff, c.Name, err), view.CauseScanTime
		}
		for _, pid := range pids {
			if pid >= scan.Cutoff {
				return fmt.Sprintf("the %s scan ran out of time at PID %d, before process %d of %s", scan.Source, scan.Cutoff, pid, c.Name), view.CauseScanTime
			}
		}
	}
	return "", ""
}
