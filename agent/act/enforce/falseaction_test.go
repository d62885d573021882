// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

func noWarmup() Policy {
	p := DefaultPolicy()
	p.Warmup = Duration{Duration: 0}
	return p
}

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

// Stale or failed readings never act: an old allocation table, an old or failed
// docker-partition measurement.
func TestStaleReadingsDoNothing(t *testing.T) {
	p := noWarmup()
	hog := func() *view.Measured { return cg("a", nr1.Usage{0, 0, 5000 * mb, 20}) }
	oldAlloc := snap(t0, hog())
	oldAlloc.AllocationRead = t0.Add(-p.MaxAllocationAge.Duration - time.Second)
	if a := Decide(t0, oldAlloc, NewState(t0.Add(-time.Hour)), p); len(a) != 0 {
		t.Errorf("allocations older than their age limit: %v", a)
	}

	partitionOnly := func() *view.Measured { return cg("a", nr1.Usage{0, 0, 5000 * mb, 0}) }
	never := snap(t0, partitionOnly())
	never.PartitionRead = time.Time{}
	old := snap(t0, partitionOnly())
	old.PartitionRead = t0.Add(-p.MaxPartitionAge.Duration - time.Second)
	failed := snap(t0, partitionOnly())
	failed.CGs[0].PartitionUnknown = "ContainerStats of health-handler: deadline exceeded"
	for name, s := range map[string]*view.Sample{"never measured": never, "measured too long ago": old, "measurement failed": failed} {
		if a := Decide(t0, s, NewState(t0.Add(-time.Hour)), p); len(a) != 0 {
			t.Errorf("docker partition %s: %v", name, a)
		}
	}
}

// A CG whose allocation becomes unknown while it is over keeps its ladder: no step is
// taken while unknown, none is repeated or reset when it is known again, and the time
// it was unknown is not time over (seen over 0–3 s, unknown 3–11 s: the throttle at 13 s).
func TestUnknownAllocationFreezesTheLadder(t *testing.T) {
	p := noWarmup()
	st := NewState(t0.Add(-time.Hour))
	over := func(known bool) *view.Sample {
		c := cg("a", nr1.Usage{4 * mb, 0, 0, 0})
		c.AllocationKnown = known
		return snap(t0, c)
	}
	var got []string
	for s := 0; s <= 25; s++ {
		sn := over(s < 3 || s > 10)
		sn.Taken, sn.AllocationRead, sn.PartitionRead = at(s), at(s), at(s)
		for _, a := range Decide(at(s), sn, st, p) {
			got = append(got, fmt.Sprintf("%d:%s", s, a.Kind))
		}
	}
	if fmt.Sprint(got) != "[0:warn 13:throttle 23:kill]" {
		t.Errorf("actions %v, want warn at 0, nothing while unknown, the ladder going on after with its clock stopped meanwhile", got)
	}
}

// A throttle never outlives its reason: exemption, dry-run, a kill.
func TestThrottleIsLiftedWhenItsReasonGoes(t *testing.T) {
	p := noWarmup()
	throttled := func() *State {
		st := NewState(t0.Add(-time.Hour))
		st.AdoptThrottle("a")
		return st
	}
	over := cg("a", nr1.Usage{4 * mb, 0, 0, 0})
	over.Containers[0].StartedAt = t0.Add(-time.Hour)

	exempt := cg("a", nr1.Usage{4 * mb, 0, 0, 0})
	exempt.Annotations = map[string]string{AnnotationKey: "disabled"}
	exempt.NamespaceLabels = map[string]string{AllowPodExemptionLabel: "true"}
	if a := Decide(t0, snap(t0, exempt), throttled(), p); len(a) != 1 || a[0].Kind != Unthrottle || a[0].DryRun {
		t.Errorf("exempt CG: %+v", a)
	}

	dry := p
	dry.Mode = DryRun
	a := Decide(t0, snap(t0, over), throttled(), dry)
	if len(a) == 0 || a[0].Kind != Unthrottle || a[0].DryRun {
		t.Errorf("dry-run: %+v, want a real unthrottle first", a)
	}

	// Unknown allocation: the throttle stays (its reason is not known to be gone).
	unknown := cg("a", nr1.Usage{4 * mb, 0, 0, 0})
	unknown.AllocationKnown = false
	if a := Decide(t0, snap(t0, unknown), throttled(), p); len(a) != 0 {
		t.Errorf("unknown allocation: %+v", a)
	}

	st := throttled()
	hog := cg("a", nr1.Usage{0, 0, 0, 20})
	got := Decide(t0, snap(t0, hog), st, p)
	kill := got[len(got)-1]
	if kill.Kind != Kill || !kill.LiftThrottle {
		t.Fatalf("kill of a throttled CG %+v: must lift the throttle", kill)
	}
	st.Outcome(kill, nil, t0)
	if len(st.Throttled()) != 0 {
		t.Errorf("after the kill the state still holds a throttle: %v", st.Throttled())
	}
}

// The kill takes the container most over its own allocation.
func TestKillTakesTheContainerMostOverItsOwnAllocation(t *testing.T) {
	p := noWarmup()
	c := &view.Measured{CG: &view.CG{
		UID: "a", Namespace: "default", Name: "cg-a", AllocationKnown: true, Allocation: nr1.Amounts{0, 0, 0, 7},
		Containers: []*view.Container{
			{ID: "hh", Name: "health-handler", State: view.Running, StartedAt: t0.Add(-time.Hour), Allocation: nr1.Amounts{0, 0, 0, 7}},
			{ID: "sc", Name: "sidecar", State: view.Running, StartedAt: t0.Add(-time.Hour)},
		},
	}, Usage: nr1.Usage{0, 0, 0, 15}, PerContainer: map[string]nr1.Usage{"health-handler": {0, 0, 0, 7}, "sidecar": {0, 0, 0, 8}}}
	c.Ratio = view.Ratios(c.Usage, c.Allocation)
	got := Decide(t0, snap(t0, c), NewState(t0.Add(-time.Hour)), p)
	kill := got[len(got)-1]
	if kill.Kind != Kill || len(kill.Containers) != 1 || kill.Containers[0].Name != "sidecar" {
		t.Fatalf("kill %+v: the health-handler holds what it was given; the sidecar holds 8 of 0", kill)
	}
}

// The ladder advances on outcomes: a failed action is undone, retried after a backoff
// that grows, and a success resets the backoff.
func TestFailedActionsAreRetriedWithBackoff(t *testing.T) {
	p := noWarmup()
	st := NewState(t0.Add(-time.Hour))
	hog := func(s int) *view.Sample { return snap(at(s), cg("a", nr1.Usage{0, 0, 0, 20})) }
	fail := errors.New("CRI: deadline exceeded")
	var kills []int
	for s := 0; s <= 12; s++ {
		for _, a := range Decide(at(s), hog(s), st, p) {
			if a.Kind != Kill {
				st.Outcome(a, nil, at(s))
				continue
			}
			kills = append(kills, s)
			err := fail
			if s >= 7 {
				err = nil
			}
			st.Outcome(a, err, at(s))
		}
	}
	// Failures at 0, 1 and 3 back off 1 s, 2 s, 4 s; the kill at 7 succeeds and ends it.
	if fmt.Sprint(kills) != "[0 1 3 7]" {
		t.Errorf("kills proposed at %v, want [0 1 3 7]", kills)
	}
	if c := st.cgs["a"]; !c.Ended || c.Failures != 0 {
		t.Errorf("after the successful kill: ended %v failures %d", c.Ended, c.Failures)
	}

	// A failed unthrottle keeps the throttle in the state and is tried again.
	st = NewState(t0.Add(-time.Hour))
	st.AdoptThrottle("gone")
	first := Decide(t0, snap(t0), st, p)
	st.Outcome(first[0], fail, t0)
	if len(st.Throttled()) != 1 {
		t.Fatal("a failed unthrottle forgot the throttle")
	}
	if again := Decide(at(1), snap(at(1)), st, p); len(again) != 1 || again[0].Kind != Unthrottle {
		t.Errorf("unthrottle not retried: %+v", again)
	}
}
