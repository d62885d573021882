// SPDX-License-Identifier: Apache-2.0

package sampler

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/neureality-sdk/nr1-agent/agent/observe/inventory"
	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
	"github.com/neureality-sdk/nr1-agent/nr1/footprint"
)

type fixedInventory struct{ s *inventory.Snapshot }

func (f fixedInventory) Build(now time.Time) *inventory.Snapshot { f.s.Taken = now; return f.s }

type fixedScan struct{ s *footprint.Scan }

func (f fixedScan) Name() string                                  { return f.s.Source }
func (f fixedScan) Scan(context.Context) (*footprint.Scan, error) { return f.s, nil }
func (f fixedScan) Close() error                                  { return nil }

type fixedPartition struct{ u PartitionUsage }

func (f fixedPartition) Load() (PartitionUsage, <-chan struct{}) { return f.u, nil }

func targets(t *testing.T) *footprint.Targets {
	t.Helper()
	dir := t.TempDir()
	var specs []footprint.TargetSpec
	for _, r := range []nr1.Resource{nr1.ComputeDMAMemory, nr1.HypervisorQueue} {
		p := filepath.Join(dir, r.Short())
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		id, err := device.Identify(p)
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, footprint.TargetSpec{Resource: r, Path: p, Measure: footprint.DefaultMeasure(r), Identity: id})
	}
	tg, err := footprint.NewTargets(specs)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func fixture(t *testing.T) (*Sampler, *testingclock.FakeClock) {
	t.Helper()
	inv := &inventory.Snapshot{Inputs: view.Inputs{RuntimeConnected: true, AllocationRead: time.Unix(100, 0)}, CGs: []*view.CG{
		{UID: "u1", Namespace: "default", Name: "resnet50", AllocationKnown: true, Allocation: nr1.Amounts{3, 0, 2392, 7},
			Containers: []*view.Container{{ID: "hh", Name: "health-handler", CgroupID: 11}, {ID: "g", Name: "graph", CgroupID: 12}}},
		{UID: "u2", Namespace: "default", Name: "greedy", AllocationKnown: true,
			Containers: []*view.Container{{ID: "x", Name: "health-handler", CgroupID: 21}}},
	}}
	scan := &footprint.Scan{Source: "fake", Took: time.Millisecond,
		Mappings: []footprint.Mapping{
			{CgroupID: 11, PID: 1, Target: 0, Size: 1 << 20},
			{CgroupID: 12, PID: 2, Target: 0, Offset: 1 << 20, Size: 2 << 20},
			{CgroupID: 99, PID: 9, Target: 0, Size: 5 << 20}, // a process outside every container
		},
		Handles: []footprint.Handle{
			{CgroupID: 11, PID: 1, FD: 3, Target: 1, Description: 1},
			{CgroupID: 11, PID: 1, FD: 4, Target: 1, Description: 1}, // a dup: one queue
			{CgroupID: 11, PID: 1, FD: 5, Target: 1, Description: 2},
			{CgroupID: 21, PID: 5, FD: 3, Target: 1, Description: 3},
		},
	}
	part := PartitionUsage{Read: time.Unix(90, 0), ByCG: map[string]nr1.Base{"u1": 2000 << 20}, ByCtr: map[string]nr1.Base{"hh": 100 << 20},
		Failed: map[string]string{"u2": "ContainerStats of health-handler: deadline exceeded"}}
	clk := testingclock.NewFakeClock(time.Unix(200, 0))
	return New(Options{Inventory: fixedInventory{inv}, Source: fixedScan{scan}, Targets: targets(t), Partition: fixedPartition{part},
		ScanTimeout: time.Second, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}), clk
}

func TestSampleAttributesByCgroup(t *testing.T) {
	s, clk := fixture(t)
	now := clk.Now()
	snap, err := s.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !snap.Taken.Equal(now) || snap.Source != "fake" || !snap.PartitionRead.Equal(time.Unix(90, 0)) {
		t.Errorf("snapshot header %+v", snap)
	}
	resnet, greedy := snap.CGs[0], snap.CGs[1]
	if want := (nr1.Usage{3 << 20, 0, 2000 << 20, 2}); resnet.Usage != want {
		t.Errorf("resnet usage %v, want %v", resnet.Usage, want)
	}
	if hh := resnet.PerContainer["health-handler"]; hh != (nr1.Usage{1 << 20, 0, 100 << 20, 2}) {
		t.Errorf("health-handler %v", hh)
	}
	if g := resnet.PerContainer["graph"]; g != (nr1.Usage{2 << 20, 0, 0, 0}) {
		t.Errorf("graph %v", g)
	}
	if r := resnet.Ratio; r[nr1.ComputeDMAMemory] != 1 || math.Abs(float64(r[nr1.HypervisorQueue])-2.0/7) > 1e-9 || r[nr1.CPUDMAMemory] != 0 {
		t.Errorf("resnet ratios %v", r)
	}
	// A failed partition reading is unknown, never zero bytes.
	if resnet.PartitionUnknown != "" || !strings.Contains(greedy.PartitionUnknown, "deadline exceeded") {
		t.Errorf("partition unknown: resnet %q, greedy %q", resnet.PartitionUnknown, greedy.PartitionUnknown)
	}
	if !math.IsInf(float64(greedy.Ratio[nr1.HypervisorQueue]), 1) {
		t.Errorf("usage without allocation: ratio %v, want +Inf", greedy.Ratio[nr1.HypervisorQueue])
	}
	if snap.Unattributed != (nr1.Usage{5 << 20, 0, 0, 0}) {
		t.Errorf("unattributed %v", snap.Unattributed)
	}
	if d := snap.Detail[resnet.UID]; len(d.Mappings) != 2 || len(d.Handles) != 3 {
		t.Errorf("detail: %d mappings, %d handles", len(d.Mappings), len(d.Handles))
	}
	b, err := json.Marshal(snap)
	if err != nil || !strings.Contains(string(b), `"ai_hypervisor_queue":"+Inf"`) {
		t.Errorf("JSON %s: %v", b, err)
	}
}

// TestAttributeCountsTheUnionPerCGAndContainer: pages mapped by several processes of a
// CG — forked workers, a second mapping, a sidecar — are held once by the CG; each
// container holds what it maps itself.
func TestAttributeCountsTheUnionPerCGAndContainer(t *testing.T) {
	const mb = 1 << 20
	inv := &inventory.Snapshot{CGs: []*view.CG{
		{UID: "u1", Name: "forking", Allocation: nr1.Amounts{3, 0, 0, 2}, Containers: []*view.Container{
			{ID: "hh", Name: "health-handler", CgroupID: 11},
			{ID: "w", Name: "worker", CgroupID: 12},
			{ID: "side", Name: "sidecar", CgroupID: 13},
			{ID: "w-old", Name: "worker", CgroupID: 14}, // the worker before its restart
			{ID: "gone", Name: "gone"},                  // no cgroup: claims nothing
		}},
		{UID: "u2", Name: "other", Containers: []*view.Container{{ID: "o", Name: "main", CgroupID: 21}}},
	}}
	m := func(cg uint64, pid int, offMB, sizeMB uint64) footprint.Mapping {
		return footprint.Mapping{CgroupID: cg, PID: pid, Target: 0, Start: 0x7f0000000000, Offset: offMB * mb, Size: sizeMB * mb}
	}
	scan := &footprint.Scan{
		Mappings: []footprint.Mapping{
			// 3 MB mapped once, then four workers forked.
			m(12, 1, 0, 3), m(12, 2, 0, 3), m(12, 3, 0, 3), m(12, 4, 0, 3), m(12, 5, 0, 3),
			m(14, 6, 0, 3),                 // the old worker, same range
			m(13, 7, 0, 3), m(13, 7, 2, 2), // the sidecar: the same range, and 1 MB more
			m(11, 8, 0, 1), m(11, 8, 0, 1), // the same range twice in one process
			m(21, 9, 0, 3),                   // another CG: its own 3 MB
			m(99, 10, 0, 2), m(98, 11, 1, 2), // outside every container: one union
		},
		Handles: []footprint.Handle{
			{CgroupID: 12, PID: 1, FD: 3, Target: 1, Description: 1},
			{CgroupID: 12, PID: 2, FD: 3, Target: 1, Description: 1}, // inherited
			{CgroupID: 13, PID: 7, FD: 5, Target: 1, Description: 1}, // passed to the sidecar
			{CgroupID: 13, PID: 7, FD: 6, Target: 1, Description: 2},
			{CgroupID: 99, PID: 10, FD: 3, Target: 1, Description: 3},
			{CgroupID: 98, PID: 11, FD: 3, Target: 1, Description: 3},
		},
	}
	snap := Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	forking, other := snap.CGs[0], snap.CGs[1]
	if want := (nr1.Usage{4 * mb, 0, 0, 2}); forking.Usage != want {
		t.Errorf("CG usage %v, want %v (not the 25 MB of its mappings)", forking.Usage, want)
	}
	for name, want := range map[string]nr1.Usage{
		"health-handler": {1 * mb},
		"worker":         {3 * mb, 0, 0, 1},
		"sidecar":        {4 * mb, 0, 0, 2},
	} {
		if got := forking.PerContainer[name]; got != want {
			t.Errorf("container %s: %v, want %v", name, got, want)
		}
	}
	if _, ok := forking.PerContainer["gone"]; ok || len(forking.PerContainer) != 3 {
		t.Errorf("containers %v, want health-handler, worker and sidecar", forking.PerContainer)
	}
	if r := forking.Ratio[nr1.ComputeDMAMemory]; math.Abs(float64(r)-4.0/3) > 1e-9 {
		t.Errorf("ratio %v, want 4/3", r)
	}
	if want := (nr1.Usage{3 * mb}); other.Usage != want || other.PerContainer["main"] != want {
		t.Errorf("other CG %v (%v), want %v", other.Usage, other.PerContainer, want)
	}
	if want := (nr1.Usage{3 * mb, 0, 0, 1}); snap.Unattributed != want {
		t.Errorf("unattributed %v, want %v", snap.Unattributed, want)
	}
	if f, o := snap.Detail[forking.UID], snap.Detail[other.UID]; len(f.Mappings) != 10 || len(f.Handles) != 4 || len(o.Mappings) != 1 {
		t.Errorf("detail: %d and %d mappings, %d handles", len(f.Mappings), len(o.Mappings), len(f.Handles))
	}
}

// Each step publishes its sample, wakes the sample's readers and counts its time.
func TestStepPublishesEachSample(t *testing.T) {
	s, clk := fixture(t)
	_, changed := s.Load()
	for n := range 3 {
		s.Step(context.Background())
		<-changed
		snap, next := s.Load()
		if want := time.Unix(200+int64(n), 0); snap == nil || !snap.Taken.Equal(want) {
			t.Fatalf("sample %d: %v, want taken at %v", n, snap, want)
		}
		changed = next
		clk.Step(time.Second)
	}
	if got := testutil.CollectAndCount(s.Duration(), "nr1_sample_duration_seconds"); got != 1 {
		t.Errorf("%d duration series, want 1", got)
	}
	// The inventory's and the attribution's phases, around the scan's (none here).
	if got := testutil.CollectAndCount(s.Phases(), "nr1_sample_phase_seconds"); got != 2 {
		t.Errorf("%d phase series, want the inventory's and the attribution's", got)
	}
	var m dto.Metric
	if err := s.duration.(prometheus.Metric).Write(&m); err != nil || m.GetHistogram().GetSampleCount() != 3 {
		t.Errorf("duration histogram counted %d samples (%v), want 3", m.GetHistogram().GetSampleCount(), err)
	}
}

// A worker the container moved into a child cgroup holds what it holds for the
// container: nothing of it is unattributed.
func TestChildCgroupsCountForTheirContainer(t *testing.T) {
	inv := &inventory.Snapshot{CGs: []*view.CG{{UID: "u1", Name: "cg", AllocationKnown: true, Allocation: nr1.Amounts{3, 0, 0, 7},
		Containers: []*view.Container{{ID: "hh", Name: "health-handler", CgroupID: 11, ChildCgroupIDs: []uint64{111, 112}}}}}}
	scan := &footprint.Scan{
		Mappings: []footprint.Mapping{{CgroupID: 11, PID: 1, Size: 1 << 20}, {CgroupID: 112, PID: 2, Offset: 1 << 20, Size: 2 << 20}},
		Handles:  []footprint.Handle{{CgroupID: 111, PID: 3, FD: 3, Target: 1, Description: 1}},
	}
	snap := Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	want := nr1.Usage{3 << 20, 0, 0, 1}
	if cg := snap.CGs[0]; cg.Usage != want || cg.PerContainer["health-handler"] != want {
		t.Errorf("CG %v, container %v; want %v for both", cg.Usage, cg.PerContainer["health-handler"], want)
	}
	if snap.Unattributed != (nr1.Usage{}) {
		t.Errorf("unattributed %v, want nothing", snap.Unattributed)
	}
}

// A CG that makes many records keeps MaxDetail of each kind in the sample, the largest
// mappings, with the totals; its usage counts them all.
func TestSampleDetailIsBounded(t *testing.T) {
	inv := &inventory.Snapshot{CGs: []*view.CG{{UID: "u1", Name: "cg", AllocationKnown: true,
		Containers: []*view.Container{{ID: "hh", Name: "health-handler", CgroupID: 11}}}}}
	scan := &footprint.Scan{}
	const n = 1000
	for i := range n {
		scan.Mappings = append(scan.Mappings, footprint.Mapping{CgroupID: 11, PID: 1, Start: uint64(i) << 30, Offset: uint64(i) << 20, Size: uint64(i+1) << 12})
		scan.Handles = append(scan.Handles, footprint.Handle{CgroupID: 11, PID: 1, FD: i, Target: 1, Description: uint64(i + 1)})
	}
	snap := Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	cg := snap.Detail[snap.CGs[0].UID]
	if len(cg.Mappings) != MaxDetail || len(cg.Handles) != MaxDetail || cg.MappingsTotal != n || cg.HandlesTotal != n {
		t.Fatalf("kept %d mappings of %d and %d handles of %d; want %d of %d each", len(cg.Mappings), cg.MappingsTotal, len(cg.Handles), cg.HandlesTotal, MaxDetail, n)
	}
	for _, m := range cg.Mappings {
		if m.Size <= (n-MaxDetail)<<12 {
			t.Errorf("kept a mapping of %d bytes, not among the %d largest", m.Size, MaxDetail)
		}
	}
	if u := snap.CGs[0].Usage; u[nr1.HypervisorQueue] != n {
		t.Errorf("usage %v: every handle counts", u)
	}
}

// A scan that ran out of time leaves the CGs with a process at or past its cutoff
// uncertain, and only those.
func TestOutOfTimeScanLeavesUnreadCGsUncertain(t *testing.T) {
	inv := &inventory.Snapshot{CGs: []*view.CG{
		{UID: "early", Name: "early", AllocationKnown: true, Containers: []*view.Container{{Name: "main", CgroupID: 11, PIDs: []int{100, 900}}}},
		{UID: "late", Name: "late", AllocationKnown: true, Containers: []*view.Container{{Name: "main", CgroupID: 12, PIDs: []int{200, 5000}}}},
	}}
	scan := &footprint.Scan{Source: "procfs", Cutoff: 4000}
	snap := Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	if early, late := snap.CGs[0], snap.CGs[1]; early.UsageUncertain != "" || !strings.Contains(late.UsageUncertain, "ran out of time at PID 4000, before process 5000 of main") {
		t.Errorf("early %q, late %q", early.UsageUncertain, late.UsageUncertain)
	}
	scan.Cutoff = 0
	if snap := Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil); snap.CGs[1].UsageUncertain != "" {
		t.Errorf("a complete scan left %q", snap.CGs[1].UsageUncertain)
	}
	// More in flight on a socket of the late CG than a scan reads.
	scan.InFlightUnread = []uint64{12}
	snap = Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	if early, late := snap.CGs[0], snap.CGs[1]; early.UsageUncertain != "" || !strings.Contains(late.UsageUncertain, "in flight") {
		t.Errorf("in flight unread: early %q, late %q", early.UsageUncertain, late.UsageUncertain)
	}
	// A process of the late CG maps a queue whose description procfs cannot tell.
	scan.InFlightUnread, scan.Uncounted = nil, []uint64{12}
	snap = Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	if early, late := snap.CGs[0], snap.CGs[1]; early.UsageUncertain != "" || !strings.Contains(late.UsageUncertain, "holds queues with no fd on them") {
		t.Errorf("uncounted mapping: early %q, late %q", early.UsageUncertain, late.UsageUncertain)
	}
	// An io_uring of the late CG holds files the scan did not read.
	scan.Uncounted, scan.RingUnread = nil, []uint64{12}
	snap = Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	if early, late := snap.CGs[0], snap.CGs[1]; early.UsageUncertain != "" || !strings.Contains(late.UsageUncertain, "io_uring of main") {
		t.Errorf("ring unread: early %q, late %q", early.UsageUncertain, late.UsageUncertain)
	}
	// A ring of a layout the scan does not know: uncertain by the node's failing.
	scan.RingUnread, scan.RingLayout = nil, []uint64{12}
	snap = Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	if late := snap.CGs[1]; late.UncertainCause != view.CauseRingLayout || late.UncertainOwn {
		t.Errorf("ring layout unknown: cause %q own %v, want %q, the node's", late.UncertainCause, late.UncertainOwn, view.CauseRingLayout)
	}
	// More distinct queues in flight on a socket of the late CG than a scan counts: over
	// on queues, not uncertain.
	scan.RingLayout, scan.PastCap = nil, []footprint.PastCap{{CgroupID: 12, Target: 1}}
	snap = Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	if early, late := snap.CGs[0], snap.CGs[1]; early.PastCap != nil || late.UsageUncertain != "" ||
		!strings.Contains(late.PastCap[nr1.HypervisorQueue], "of main holds more distinct neureality.ai/ai_hypervisor_queue files") || len(late.PastCap) != 1 {
		t.Errorf("past the cap: early %v, late %v (uncertain %q)", early.PastCap, late.PastCap, late.UsageUncertain)
	}
	scan.PastCap = nil
	// The pass over what is in flight cut short: any CG may hold more.
	scan.InFlightUnread, scan.InFlightCut = nil, true
	snap = Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	for _, cg := range snap.CGs {
		if !strings.Contains(cg.UsageUncertain, "in flight") {
			t.Errorf("in-flight pass cut: %s %q, want uncertain", cg.Name, cg.UsageUncertain)
		}
	}
}

// A running container without a cgroup the agent could read makes its CG's usage a lower
// bound: its processes' holdings are no CG's. One that has exited needs none.
func TestContainerWithoutCgroupLeavesItsCGUncertain(t *testing.T) {
	inv := &inventory.Snapshot{CGs: []*view.CG{
		{UID: "blind", Name: "blind", AllocationKnown: true, Allocation: nr1.Amounts{3, 0, 0, 7}, Containers: []*view.Container{
			{Name: "health-handler", State: view.Running, CgroupID: 11}, {Name: "graph", State: view.Running}}},
		{UID: "seen", Name: "seen", AllocationKnown: true, Allocation: nr1.Amounts{3, 0, 0, 7}, Containers: []*view.Container{
			{Name: "health-handler", State: view.Running, CgroupID: 12}, {Name: "init", State: view.Exited}}},
	}}
	scan := &footprint.Scan{Source: "bpf", Mappings: []footprint.Mapping{{CgroupID: 11, PID: 1, Target: 0, Size: 1 << 20}}}
	snap := Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	if blind := snap.CGs[0]; !strings.Contains(blind.UsageUncertain, "container graph runs without a cgroup") {
		t.Errorf("blind: uncertain %q, want the graph container named", blind.UsageUncertain)
	}
	if seen := snap.CGs[1]; seen.UsageUncertain != "" {
		t.Errorf("seen: uncertain %q", seen.UsageUncertain)
	}
}

// What the processes of a cgroup below the pod's hold is the CG's, though the runtime
// described no container there: a container without a cgroup of its own leaves the CG
// certain when its pod's cgroup holds it, and its holdings count for the CG, no
// container's.
func TestPodCgroupHoldsWhatNoContainerDescribes(t *testing.T) {
	inv := &inventory.Snapshot{CGs: []*view.CG{
		{UID: "hidden", Name: "hidden", AllocationKnown: true, Allocation: nr1.Amounts{3, 0, 0, 2}, PodCgroupIDs: []uint64{20, 21}, Containers: []*view.Container{
			{Name: "health-handler", State: view.Running, CgroupID: 11}, {Name: "sidecar", State: view.Running}}},
	}}
	scan := &footprint.Scan{Source: "bpf",
		Mappings: []footprint.Mapping{{CgroupID: 11, PID: 1, Target: 0, Size: 1 << 20}},
		Handles:  []footprint.Handle{{CgroupID: 21, PID: 2, FD: 3, Target: 1, Description: 1}, {CgroupID: 21, PID: 2, FD: 4, Target: 1, Description: 2}, {CgroupID: 20, PID: 3, FD: 3, Target: 1, Description: 3}}}
	snap := Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	cg := snap.CGs[0]
	if cg.UsageUncertain != "" {
		t.Errorf("uncertain %q, want certain: the pod's cgroup holds the sidecar", cg.UsageUncertain)
	}
	if cg.Usage[nr1.HypervisorQueue] != 3 || cg.Usage[nr1.ComputeDMAMemory] != 1<<20 || snap.Unattributed != (nr1.Usage{}) {
		t.Errorf("usage %v, unattributed %v: want the 3 queues below the pod's cgroup the CG's", cg.Usage, snap.Unattributed)
	}
	if cg.Ratio[nr1.HypervisorQueue] != 1.5 {
		t.Errorf("queue ratio %v, want 1.5: judged with the pod's booking", cg.Ratio[nr1.HypervisorQueue])
	}
	if u := cg.PerContainer["health-handler"]; u[nr1.HypervisorQueue] != 0 {
		t.Errorf("health-handler charged %v for the pod's cgroup", u)
	}
}

// The sampler needs samples at the interval while a CG of its last sample is not
// known in full; whether one is over is the enforcement's to say.
func TestUnsettledWhileACGIsNotKnownInFull(t *testing.T) {
	s, clk := fixture(t)
	if why := s.Unsettled(clk.Now()); why == "" {
		t.Error("settled before the first sample")
	}
	cg := func(ratio view.Ratio, uncertain string, known bool) *Snapshot {
		return &Snapshot{Sample: &view.Sample{CGs: []*view.Measured{
			{CG: &view.CG{UID: "calm", AllocationKnown: true}, Ratio: view.Ratio{0.5, 0, 1, 1}},
			{CG: &view.CG{UID: "other", Namespace: "ml", Name: "other", AllocationKnown: known}, Ratio: ratio, UsageUncertain: uncertain},
		}}}
	}
	for _, c := range []struct {
		name string
		snap *Snapshot
		want string
	}{
		{"all within", cg(view.Ratio{1, 1, 0.2, 0}, "", true), ""},
		{"one over, not judged yet", cg(view.Ratio{1.01, 0, 0, view.Fraction(math.Inf(1))}, "", true), ""},
		{"one uncertain", cg(view.Ratio{}, "out of time", true), "the usage of ml/other is a lower bound"},
		{"an allocation unknown", cg(view.Ratio{}, "", false), "the allocation of ml/other is not known"},
		{"a namespace's labels unknown", func() *Snapshot {
			s := cg(view.Ratio{}, "", true)
			s.CGs[1].NamespaceUnknown = "namespaces not listed yet"
			return s
		}(), "the labels of namespace ml are not known"},
	} {
		s.value.Publish(clk.Now(), c.snap)
		if why := s.Unsettled(clk.Now()); why != c.want {
			t.Errorf("%s: %q, want %q", c.name, why, c.want)
		}
	}
}

// Every pod's image sits in the docker partition: a pod given no NR1 resource is not
// over a partition budget it was never given (its ratio would fire the over-allocation
// alert for the agent itself), while one holding a queue is over its zero allocation,
// and a CG given other resources but no partition is over on the partition too.
func TestRatiosOfPodsGivenNothing(t *testing.T) {
	image := nr1.Usage{0, 0, 18 << 20, 0}
	if r := view.Ratios(image, nr1.Amounts{}); r[nr1.DockerPartition] != 0 {
		t.Errorf("a pod given nothing, holding its image: partition ratio %v, want 0", r[nr1.DockerPartition])
	}
	if r := view.Ratios(nr1.Usage{0, 0, 18 << 20, 1}, nr1.Amounts{}); !math.IsInf(float64(r[nr1.HypervisorQueue]), 1) || r[nr1.DockerPartition] != 0 {
		t.Errorf("a pod given nothing, holding a queue: ratios %v, want +Inf on queues only", r)
	}
	if r := view.Ratios(image, nr1.Amounts{3, 0, 0, 7}); !math.IsInf(float64(r[nr1.DockerPartition]), 1) {
		t.Errorf("a CG given no partition, holding its image: partition ratio %v, want +Inf", r[nr1.DockerPartition])
	}
}

// fakeLineage places cgroups below others by a table.
type fakeLineage struct {
	parent map[uint64]uint64 // cgroup → its parent
	fail   map[uint64]bool
	asked  int
}

func (f *fakeLineage) Below(id uint64, in func(uint64) bool) (uint64, bool, error) {
	f.asked++
	if f.fail[id] {
		return 0, false, fmt.Errorf("cgroup %d: refused", id)
	}
	for p, ok := f.parent[id]; ok; p, ok = f.parent[p] {
		if in(p) {
			return p, true, nil
		}
	}
	return 0, false, nil
}

func (f *fakeLineage) Forget(func(uint64) bool) {}

// A process in a cgroup no walk read (nested past PATH_MAX) holds for the container
// whose cgroup it is below, and for no one when it is below none; a cgroup whose climb
// fails is no CG's, and the other records are counted as they are.
func TestACgroupNoWalkReadIsPlacedBelowItsContainer(t *testing.T) {
	inv := &inventory.Snapshot{CGs: []*view.CG{{UID: "u1", Name: "cg", AllocationKnown: true, Allocation: nr1.Amounts{3, 0, 0, 7},
		Containers: []*view.Container{{ID: "hh", Name: "health-handler", CgroupID: 11}}, PodCgroupIDs: []uint64{10}}}}
	scan := &footprint.Scan{Handles: []footprint.Handle{
		{CgroupID: 11, PID: 1, FD: 3, Target: 1, Description: 1},
		{CgroupID: 501, PID: 2, FD: 3, Target: 1, Description: 2}, // deep below the container
		{CgroupID: 502, PID: 3, FD: 3, Target: 1, Description: 3}, // deep below the pod's cgroup
		{CgroupID: 503, PID: 4, FD: 3, Target: 1, Description: 4}, // below no CG
		{CgroupID: 504, PID: 5, FD: 3, Target: 1, Description: 5}, // its climb refused
		{CgroupID: 501, PID: 6, FD: 3, Target: 1, Description: 6},
	}}
	lineage := &fakeLineage{parent: map[uint64]uint64{501: 500, 500: 11, 11: 10, 502: 10, 503: 1, 504: 11}, fail: map[uint64]bool{504: true}}
	snap := Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, lineage)
	cg := snap.CGs[0]
	if want := (nr1.Usage{0, 0, 0, 4}); cg.Usage != want {
		t.Errorf("CG %v, want %v: its own, two below its container, one below its pod's cgroup", cg.Usage, want)
	}
	if want := (nr1.Usage{0, 0, 0, 3}); cg.PerContainer["health-handler"] != want {
		t.Errorf("container %v, want %v", cg.PerContainer["health-handler"], want)
	}
	if want := (nr1.Usage{0, 0, 0, 2}); snap.Unattributed != want {
		t.Errorf("unattributed %v, want %v: below no CG, and the refused climb", snap.Unattributed, want)
	}
	if lineage.asked != 4 {
		t.Errorf("%d climbs, want one per cgroup no walk read (4)", lineage.asked)
	}
	if Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil).CGs[0].Usage != (nr1.Usage{0, 0, 0, 1}) {
		t.Error("without a lineage, the CG holds only what its own cgroup's records say")
	}
}

// Queues in flight count for their sender: a container that sent them and exited leaves
// a cgroup no CG owns, and they count for the pod above it, never for nobody; a sender
// outside every pod leaves them unattributed.
func TestInFlightHandlesOfAnExitedSenderCountForItsPod(t *testing.T) {
	inv := &inventory.Snapshot{CGs: []*view.CG{
		{UID: "p", Name: "parker", AllocationKnown: true, Allocation: nr1.Amounts{0, 0, 0, 1}, PodCgroupIDs: []uint64{20}, Containers: []*view.Container{
			{Name: "health-handler", State: view.Running, CgroupID: 21}}},
	}}
	scan := &footprint.Scan{Source: "bpf", Handles: []footprint.Handle{
		{CgroupID: 22, Up: [3]uint64{20, 2, 1}, FD: -1, Target: 1, Description: 1},  // the exited container's
		{CgroupID: 23, Up: [3]uint64{22, 20, 2}, FD: -1, Target: 1, Description: 2}, // a cgroup below it
		{CgroupID: 90, Up: [3]uint64{9, 1}, FD: -1, Target: 1, Description: 3},      // a host process's
	}}
	snap := Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	if got := snap.CGs[0].Usage[nr1.HypervisorQueue]; got != 2 {
		t.Errorf("the pod holds %d queues in flight, want the 2 its exited container sent", got)
	}
	if got := snap.Unattributed[nr1.HypervisorQueue]; got != 1 {
		t.Errorf("unattributed %d queues, want the host process's 1", got)
	}
}

// A scan cut short while a process of one CG holds a flood of fds is that CG's doing: its
// usage is uncertain by its own cause, which protects nothing; a CG the cut left unread is
// uncertain by the node's. Without a cut, holding many fds makes nobody uncertain.
func TestAFloodOfFdsThatRunsTheScanOutOfTimeIsTheFloodersDoing(t *testing.T) {
	inv := &inventory.Snapshot{CGs: []*view.CG{
		{UID: "flood", Name: "flood", AllocationKnown: true, Containers: []*view.Container{{Name: "main", CgroupID: 11, PIDs: []int{100}}}},
		{UID: "late", Name: "late", AllocationKnown: true, Containers: []*view.Container{{Name: "main", CgroupID: 12, PIDs: []int{5000}}}},
	}}
	scan := &footprint.Scan{Source: "bpf", Heavy: []uint64{11}}
	snap := Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	for _, cg := range snap.CGs {
		if cg.UsageUncertain != "" {
			t.Errorf("a scan in time: %s uncertain %q", cg.Name, cg.UsageUncertain)
		}
	}
	scan.Cutoff = 4000
	snap = Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	flood, late := snap.CGs[0], snap.CGs[1]
	if flood.UncertainCause != view.CauseFDTable || !flood.UncertainOwn || !strings.Contains(flood.UsageUncertain, "hold more than 65536 fds") {
		t.Errorf("the flooder: cause %q own %v %q, want its own %q", flood.UncertainCause, flood.UncertainOwn, flood.UsageUncertain, view.CauseFDTable)
	}
	if late.UncertainCause != view.CauseScanTime || late.UncertainOwn {
		t.Errorf("a CG the cut left unread: cause %q own %v, want the node's %q", late.UncertainCause, late.UncertainOwn, view.CauseScanTime)
	}
}

// A flooder walked last and not finished is uncertain by its own doing, and the CGs
// beside it, read whole, are judged: the cut is the flooder's alone.
func TestAnUnfinishedFlooderIsUncertainAlone(t *testing.T) {
	inv := &inventory.Snapshot{CGs: []*view.CG{
		{UID: "flood", Name: "flood", AllocationKnown: true, Containers: []*view.Container{{Name: "main", CgroupID: 11, PIDs: []int{100}}}},
		{UID: "late", Name: "late", AllocationKnown: true, Containers: []*view.Container{{Name: "main", CgroupID: 12, PIDs: []int{5000}}}},
	}}
	scan := &footprint.Scan{Source: "bpf", Heavy: []uint64{11}, Unfinished: []uint64{11}}
	snap := Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	flood, late := snap.CGs[0], snap.CGs[1]
	if flood.UncertainCause != view.CauseFDTable || !flood.UncertainOwn || !strings.Contains(flood.UsageUncertain, "walked after every other process") {
		t.Errorf("the flooder: cause %q own %v %q, want its own %q", flood.UncertainCause, flood.UncertainOwn, flood.UsageUncertain, view.CauseFDTable)
	}
	if late.UsageUncertain != "" {
		t.Errorf("a CG read whole beside the flood: uncertain %q", late.UsageUncertain)
	}
}

// A container that left more in flight than a scan reads, or more distinct queues than
// it counts, and exited: its pod is uncertain, or over, by its own doing, never nobody.
func TestInFlightExcessOfAnExitedSenderIsItsPods(t *testing.T) {
	inv := &inventory.Snapshot{CGs: []*view.CG{
		{UID: "p", Name: "parker", AllocationKnown: true, PodCgroupIDs: []uint64{20}, Containers: []*view.Container{
			{Name: "health-handler", State: view.Running, CgroupID: 21}}},
	}}
	scan := &footprint.Scan{Source: "bpf"}
	scan.InFlightUnread = []uint64{22, 20, 2, 1} // the exited container's id, then its ancestors
	snap := Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	if cg := snap.CGs[0]; cg.UncertainCause != view.CauseInFlight || !cg.UncertainOwn {
		t.Errorf("cause %q own %v, want the pod uncertain by its own doing", cg.UncertainCause, cg.UncertainOwn)
	}
}

// Files removed from a writable layer and held open add to the holder's docker
// partition, beside what the runtime measured: once per inode for the CG and for each
// container holding it, once the runtime sized the layers after the file was found
// with no name (before, its figure may hold the file by name); a CG whose partition is
// unknown stays unknown; one no CG holds counts for no one; a CG holding more than a
// scan sizes is uncertain by its own doing.
func TestUnlinkedFilesAddToTheirHoldersPartition(t *testing.T) {
	const mb = 1 << 20
	inv := &inventory.Snapshot{CGs: []*view.CG{
		{UID: "u1", Name: "writer", Containers: []*view.Container{
			{ID: "hh", Name: "health-handler", CgroupID: 11},
			{ID: "w", Name: "worker", CgroupID: 12},
		}},
		{UID: "u2", Name: "unmeasured", Containers: []*view.Container{{ID: "o", Name: "main", CgroupID: 21}}},
		{UID: "u3", Name: "hoarder", Containers: []*view.Container{{ID: "h", Name: "main", CgroupID: 31}}},
	}}
	found, sized := time.Unix(100, 0), time.Unix(110, 0)
	scan := &footprint.Scan{
		Unlinked: []footprint.Unlinked{
			{CgroupID: 11, Inode: 1, Bytes: 5 * mb, Since: found},
			{CgroupID: 12, Inode: 1, Bytes: 5 * mb, Since: found}, // passed to the worker: one file
			{CgroupID: 12, Inode: 2, Bytes: 2 * mb, Since: found},
			{CgroupID: 12, Inode: 5, Bytes: 3 * mb, Since: sized}, // removed since the layer was sized
			{CgroupID: 21, Inode: 3, Bytes: 9 * mb, Since: found},
			{CgroupID: 99, Inode: 4, Bytes: 7 * mb, Since: found}, // a host process's
		},
		UnlinkedUnread: []uint64{31},
	}
	part := PartitionUsage{Read: time.Unix(120, 0), ByCG: map[string]nr1.Base{"u1": 100 * mb, "u3": 10 * mb},
		ByCtr: map[string]nr1.Base{"hh": 1 * mb, "h": 1 * mb}, SizedAt: map[string]time.Time{"u1": sized, "u3": sized},
		Failed: map[string]string{"u2": "writable layer of main: unavailable"}}
	snap := Attribute(time.Unix(1, 0), inv, scan, targets(t), part, nil)
	writer, unmeasured, hoarder := snap.CGs[0], snap.CGs[1], snap.CGs[2]
	if got := writer.Usage[nr1.DockerPartition]; got != 107*mb {
		t.Errorf("writer's partition %d MB, want 107 (100 measured, 5 + 2 removed and held)", got/mb)
	}
	if hh, w := writer.PerContainer["health-handler"][nr1.DockerPartition], writer.PerContainer["worker"][nr1.DockerPartition]; hh != 6*mb || w != 7*mb {
		t.Errorf("containers' partitions %d and %d MB, want 6 (1 measured + 5) and 7 (5 + 2)", hh/mb, w/mb)
	}
	if unmeasured.PartitionUnknown == "" || unmeasured.Usage[nr1.DockerPartition] != 0 {
		t.Errorf("a CG whose layer is unread: %d bytes, unknown %q; want unknown, nothing added", unmeasured.Usage[nr1.DockerPartition], unmeasured.PartitionUnknown)
	}
	if snap.Unattributed[nr1.DockerPartition] != 0 {
		t.Errorf("a host process's removed file counted as unattributed partition: %d", snap.Unattributed[nr1.DockerPartition])
	}
	if hoarder.UncertainCause != view.CauseUnlinked || !hoarder.UncertainOwn || writer.UsageUncertain != "" {
		t.Errorf("hoarder uncertain %q (%s, own %v), writer %q; want the hoarder alone uncertain by its own doing", hoarder.UsageUncertain, hoarder.UncertainCause, hoarder.UncertainOwn, writer.UsageUncertain)
	}
}

// groupingScan is a source that walks a pod's cgroups as one: it records the groups
// it was given before each scan.
type groupingScan struct {
	fixedScan
	groups map[uint64]uint64
}

func (g *groupingScan) SetGroups(groups map[uint64]uint64) { g.groups = groups }

// A source that walks a pod's cgroups as one is told, before each scan, the pod's
// cgroup of each cgroup of a CG: its containers', those nested below them, the pod's
// own and those below it no container's; a CG whose pod's cgroup is not known names
// none, and a container without a cgroup none.
func TestTheSourceIsToldEachPodsCgroups(t *testing.T) {
	inv := &inventory.Snapshot{CGs: []*view.CG{
		{UID: "a", Name: "a", PodCgroupIDs: []uint64{20, 25}, Containers: []*view.Container{
			{Name: "health-handler", CgroupID: 21, ChildCgroupIDs: []uint64{22, 23}}, {Name: "sidecar", CgroupID: 24}, {Name: "starting"}}},
		{UID: "b", Name: "b", Containers: []*view.Container{{Name: "health-handler", CgroupID: 31}}},
	}}
	src := &groupingScan{fixedScan: fixedScan{&footprint.Scan{Source: "fake"}}}
	s := New(Options{Inventory: fixedInventory{inv}, Source: src, Targets: targets(t), Partition: fixedPartition{},
		ScanTimeout: time.Second, Clock: testingclock.NewFakeClock(time.Unix(200, 0)), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if _, err := s.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]uint64{20: 20, 21: 20, 22: 20, 23: 20, 24: 20, 25: 20}
	if !maps.Equal(src.groups, want) {
		t.Errorf("groups %v, want %v", src.groups, want)
	}
}
