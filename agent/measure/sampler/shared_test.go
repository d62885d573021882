// SPDX-License-Identifier: Apache-2.0

package sampler

import (
	"slices"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/observe/inventory"
	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/footprint"
)

// Pods sharing a claim are summed together, as one union against each claim once and
// what else each was given; pods sharing through a third are one group; a pod whose
// allocation is unknown, and a claim of one pod only, stay apart.
func TestPodsSharingAClaimAreHeldToItTogether(t *testing.T) {
	const mb = 1 << 20
	shared := view.Claim{Namespace: "ml", Name: "nr1-shared", Amounts: nr1.Amounts{4, 0, 0, 2}}
	second := view.Claim{Namespace: "ml", Name: "nr1-second", Amounts: nr1.Amounts{2}}
	own := func(name string) view.Claim {
		return view.Claim{Namespace: "ml", Name: name, Amounts: nr1.Amounts{1}}
	}
	cg := func(uid string, known bool, cgroup uint64, claims ...view.Claim) *view.CG {
		c := &view.CG{UID: uid, Namespace: "ml", Name: uid, AllocationKnown: known, Claims: claims,
			Containers: []*view.Container{{ID: uid, Name: "health-handler", CgroupID: cgroup}}}
		for _, cl := range claims {
			c.Allocation = nr1.Add(c.Allocation, cl.Amounts)
		}
		return c
	}
	inv := &inventory.Snapshot{CGs: []*view.CG{
		cg("a", true, 1, shared, own("a-own")),
		cg("b", true, 2, shared),
		cg("c", true, 3, second, shared), // shares with a and b
		cg("d", true, 4, second),         // shares with c only: joins them through it
		cg("e", false, 5, shared),        // unknown: judged on its own
		cg("f", true, 6, own("f-own")),   // shares nothing
	}}
	m := func(cg uint64, offMB, sizeMB uint64) footprint.Mapping {
		return footprint.Mapping{CgroupID: cg, PID: int(cg), Target: 0, Offset: offMB * mb, Size: sizeMB * mb}
	}
	scan := &footprint.Scan{
		Mappings: []footprint.Mapping{m(1, 0, 3), m(2, 1, 3), m(3, 6, 2), m(4, 7, 2), m(5, 0, 8), m(6, 0, 8)},
		Handles: []footprint.Handle{
			{CgroupID: 1, PID: 1, FD: 3, Target: 1, Description: 1},
			{CgroupID: 2, PID: 2, FD: 3, Target: 1, Description: 2},
			{CgroupID: 3, PID: 3, FD: 3, Target: 1, Description: 2}, // passed from b to c
		},
	}
	snap := Attribute(time.Unix(1, 0), inv, scan, targets(t), PartitionUsage{}, nil)
	group := snap.CGs[0].Shared
	if group == nil {
		t.Fatal("a shares a claim and has no group")
	}
	for i, name := range []string{"a", "b", "c", "d"} {
		if snap.CGs[i].Shared != group {
			t.Errorf("%s is not in the group of a", name)
		}
	}
	if snap.CGs[4].Shared != nil || snap.CGs[5].Shared != nil {
		t.Error("a pod of unknown allocation, or one sharing nothing, is in a group")
	}
	if want := []string{"ml/a", "ml/b", "ml/c", "ml/d"}; !slices.Equal(group.Pods, want) {
		t.Errorf("pods %v, want %v", group.Pods, want)
	}
	if want := []string{"ml/nr1-second", "ml/nr1-shared"}; !slices.Equal(group.Claims, want) {
		t.Errorf("claims %v, want %v (a claim of one pod is not shared)", group.Claims, want)
	}
	// Each claim once: shared 4, second 2, a's own 1.
	if want := (nr1.Amounts{7, 0, 0, 2}); group.Allocation != want {
		t.Errorf("allocation %v, want %v", group.Allocation, want)
	}
	// [0,4) ∪ [6,9) of compute; descriptions 1 and 2.
	if want := (nr1.Usage{7 * mb, 0, 0, 2}); group.Usage != want {
		t.Errorf("usage %v, want %v", group.Usage, want)
	}
	if group.Ratio[nr1.ComputeDMAMemory] != 1 {
		t.Errorf("compute ratio %v, want 1", group.Ratio[nr1.ComputeDMAMemory])
	}
	// Each pod's own figures are unchanged.
	if want := (nr1.Usage{3 * mb, 0, 0, 1}); snap.CGs[0].Usage != want {
		t.Errorf("a's own usage %v, want %v", snap.CGs[0].Usage, want)
	}
}

// A group with a member the scan did not read in full is a lower bound.
func TestSharedUsageOfAnUncertainMemberIsUncertain(t *testing.T) {
	claim := view.Claim{Namespace: "ml", Name: "nr1-shared", Amounts: nr1.Amounts{4}}
	inv := &inventory.Snapshot{CGs: []*view.CG{
		{UID: "a", Namespace: "ml", Name: "a", AllocationKnown: true, Allocation: claim.Amounts, Claims: []view.Claim{claim},
			Containers: []*view.Container{{ID: "a", Name: "hh", CgroupID: 1}}},
		{UID: "b", Namespace: "ml", Name: "b", AllocationKnown: true, Allocation: claim.Amounts, Claims: []view.Claim{claim},
			Containers: []*view.Container{{ID: "b", Name: "hh", State: view.Running}}}, // no cgroup: uncertain
	}}
	snap := Attribute(time.Unix(1, 0), inv, &footprint.Scan{}, targets(t), PartitionUsage{}, nil)
	if g := snap.CGs[0].Shared; g == nil || g.Uncertain == "" {
		t.Fatalf("group %+v: want it uncertain, b's usage being a lower bound", g)
	}
}
