// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// uncertainCG is a CG whose usage, within its booking as far as it was read, is a lower
// bound for cause.
func uncertainCG(uid, cause string) *view.Measured {
	c := cg(uid, nr1.Usage{3 * mb, 0, 0, 5})
	c.UsageUncertain, c.UncertainCause, c.UncertainOwn = "uncertain: "+cause, cause, view.OwnCause(cause)
	return c
}

// A CG uncertain by its own doing is warned at once, naming the cause, and throttled
// past the policy's grace, whatever its booking; uncertain for the node's cause, it is
// left alone however long it lasts; certain again, the throttle is lifted.
func TestOwnUncertaintyEscalates(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup = Duration{}
	for _, tc := range []struct {
		cause string
		want  string
	}{
		{view.CauseInFlight, "0:warn/ai_hypervisor_queue 30:throttle/ai_hypervisor_queue 61:unthrottle/compute_dma_memory"},
		{view.CauseRing, "0:warn/ai_hypervisor_queue 30:throttle/ai_hypervisor_queue 61:unthrottle/compute_dma_memory"},
		{view.CauseScanTime, ""},
		{view.CauseInFlightTime, ""},
		{view.CauseNoCgroup, ""},
		{view.CauseNetNS, ""},
		{view.CauseNoFD, ""},
		{view.CauseRingLayout, ""},
	} {
		var warn Action
		got := run(p, 90, func(s int) *view.Sample {
			at := t0.Add(time.Duration(s) * time.Second)
			if s > 60 {
				return snap(at, cg("a", nr1.Usage{3 * mb, 0, 0, 5}))
			}
			return snap(at, uncertainCG("a", tc.cause))
		})
		if k := kinds(got); k != tc.want {
			t.Errorf("%s: actions %q, want %q", tc.cause, k, tc.want)
		}
		if len(got[0]) == 1 {
			warn = got[0][0]
			if warn.Cause != tc.cause || !strings.Contains(warn.Message, tc.cause) || !strings.Contains(warn.Message, "by its own doing") {
				t.Errorf("%s: the warning %+v does not name the cause", tc.cause, warn)
			}
		}
	}
}

// A kill is taken only where the policy lists it, of every running container; a step
// that fails is undone and taken again after the backoff; dry-run reports the steps.
func TestOwnUncertaintyLadderAsThePolicySays(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup = Duration{}
	p.SelfUncertain.Ladder = []Step{{Warn, Duration{}}, {Kill, Duration{Duration: 10 * time.Second}}}
	got := run(p, 20, func(s int) *view.Sample {
		return snap(t0.Add(time.Duration(s)*time.Second), uncertainCG("a", view.CauseInFlight))
	})
	if k := kinds(got); k != "0:warn/ai_hypervisor_queue 10:kill/ai_hypervisor_queue" {
		t.Errorf("with a kill listed: %q", k)
	}
	if kill := got[10][0]; len(kill.Containers) != 2 {
		t.Errorf("the kill stops %+v, want every running container", kill.Containers)
	}

	st := NewState(t0.Add(-time.Hour))
	p = DefaultPolicy()
	p.Warmup = Duration{}
	at := func(s int) (time.Time, *view.Sample) {
		now := t0.Add(time.Duration(s) * time.Second)
		return now, snap(now, uncertainCG("a", view.CauseRing))
	}
	now, sample := at(0)
	if acts := Decide(now, sample, st, p); len(acts) != 1 || acts[0].Kind != Warn {
		t.Fatalf("at once: %+v, want the warning", acts)
	}
	now, sample = at(30)
	acts := Decide(now, sample, st, p)
	if len(acts) != 1 || acts[0].Kind != Throttle {
		t.Fatalf("30 s in: %+v, want the throttle", acts)
	}
	st.Outcome(acts[0], errors.New("bpffs read-only"), now)
	now, sample = at(30)
	if acts := Decide(now.Add(500*time.Millisecond), sample, st, p); len(acts) != 0 {
		t.Errorf("within the backoff: %+v", acts)
	}
	now, sample = at(31)
	if acts := Decide(now, sample, st, p); len(acts) != 1 || acts[0].Kind != Throttle {
		t.Errorf("after the backoff: %+v, want the throttle again", acts)
	}

	p.Mode = DryRun
	got = run(p, 40, func(s int) *view.Sample {
		return snap(t0.Add(time.Duration(s)*time.Second), uncertainCG("a", view.CauseInFlight))
	})
	if k := kinds(got); k != "0:warn/ai_hypervisor_queue(dry) 30:throttle/ai_hypervisor_queue(dry)" {
		t.Errorf("dry-run: %q", k)
	}
}

// Marks the agent did not write are reported once for each set of them, whatever else
// the CG's ladders do, and never rate-limited away.
func TestIgnoredMarksAreReportedOnce(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup = Duration{}
	p.MaxActionsPerMinute = 1
	marked := func(marks ...string) *view.Measured {
		c := cg("a", nr1.Usage{3 * mb, 0, 0, 7})
		c.IgnoredMarks = marks
		return c
	}
	got := run(p, 10, func(s int) *view.Sample {
		at := t0.Add(time.Duration(s) * time.Second)
		switch {
		case s < 5:
			return snap(at, marked("container x: a forged mark"), cg("b", nr1.Usage{0, 0, 0, 20}))
		default:
			return snap(at, marked("container x: a forged mark", "container y: another"), cg("b", nr1.Usage{0, 0, 0, 20}))
		}
	})
	var marks []string
	for s := 0; s <= 10; s++ {
		for _, a := range got[s] {
			if a.Kind == IgnoredMark {
				marks = append(marks, a.Message)
			}
		}
	}
	if len(marks) != 2 || !strings.Contains(marks[0], "a forged mark") || !strings.Contains(marks[1], "another") {
		t.Errorf("reports %q, want one per set of marks", marks)
	}
}

// A CG holding more distinct files than a scan counts is over on that resource, whatever
// its booking and what was counted, and its ladder runs as for any overrun; the same CG
// without the cap passed is within.
func TestPastTheCapIsOver(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup = Duration{}
	got := run(p, 20, func(s int) *view.Sample {
		c := cg("a", nr1.Usage{3 * mb, 0, 0, 5})
		c.PastCap = map[nr1.Resource]string{nr1.HypervisorQueue: "a socket of main holds more distinct ai_hypervisor_queue files than the bpf scan counts for one"}
		return snap(t0.Add(time.Duration(s)*time.Second), c)
	})
	if k := kinds(got); k != "0:warn/ai_hypervisor_queue 5:throttle/ai_hypervisor_queue 15:kill/ai_hypervisor_queue" {
		t.Errorf("past the cap: actions %q, want the queues' ladder", k)
	}
	if w := got[0][0]; !strings.Contains(w.Message, "more distinct ai_hypervisor_queue files") || !strings.Contains(w.Message, "whatever it holds") {
		t.Errorf("the warning does not say why: %s", w.Message)
	}
	// With no allocation of the resource, a policy ignoring such CGs still does.
	ignoring := p
	ignoring.NoAllocation = "ignore"
	none := run(ignoring, 20, func(s int) *view.Sample {
		c := cg("a", nr1.Usage{3 * mb, 0, 0, 0})
		c.Allocation[nr1.HypervisorQueue] = 0
		c.PastCap = map[nr1.Resource]string{nr1.HypervisorQueue: "past the cap"}
		return snap(t0.Add(time.Duration(s)*time.Second), c)
	})
	if k := kinds(none); k != "" {
		t.Errorf("past the cap on a resource it was given none of, noAllocation ignore: actions %q", k)
	}
	within := run(p, 20, func(s int) *view.Sample {
		return snap(t0.Add(time.Duration(s)*time.Second), cg("a", nr1.Usage{3 * mb, 0, 0, 5}))
	})
	if k := kinds(within); k != "" {
		t.Errorf("within and no cap passed: actions %q", k)
	}
}
