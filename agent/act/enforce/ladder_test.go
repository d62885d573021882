// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"errors"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// The ladder an operator reads follows the CG: over since it went over, the next step
// due at its delay, a reset announced once it is back under, nothing once it is reset.
func TestLaddersFollowTheCG(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup = Duration{}
	st := NewState(t0.Add(-time.Hour))
	over := nr1.Usage{4 * mb, 0, 0, 0}
	at := func(s int, u nr1.Usage) {
		now := t0.Add(time.Duration(s) * time.Second)
		for _, a := range Decide(now, snap(now, cg("a", u)), st, p) {
			st.Outcome(a, nil, now)
		}
	}
	if l := st.Ladders(p); len(l) != 0 {
		t.Fatalf("ladders before anything happened: %+v", l)
	}
	at(0, over) // warned
	l := one(t, st.Ladders(p))
	g := l.Resources[nr1.ComputeDMAMemory]
	if l.Namespace != "default" || l.Pod != "cg-a" || l.UID != "a" || l.Throttled ||
		!g.Over.Equal(t0) || g.Steps != 1 || g.Next != Throttle || !g.NextAt.Equal(t0.Add(5*time.Second)) || !g.ResetAt.IsZero() {
		t.Fatalf("after the warning: %+v %+v", l, g)
	}
	if other := l.Resources[nr1.HypervisorQueue]; other != (Rung{}) {
		t.Fatalf("a resource within its allocation has a ladder: %+v", other)
	}
	at(5, over) // throttled
	l = one(t, st.Ladders(p))
	g = l.Resources[nr1.ComputeDMAMemory]
	if !l.Throttled || g.Steps != 2 || g.Next != Kill || !g.NextAt.Equal(t0.Add(15*time.Second)) {
		t.Fatalf("after the throttle: %+v %+v", l, g)
	}
	at(6, nr1.Usage{}) // back under
	g = one(t, st.Ladders(p)).Resources[nr1.ComputeDMAMemory]
	if !g.ResetAt.Equal(t0.Add(16*time.Second)) || g.Next != Kill {
		t.Fatalf("back under: %+v", g)
	}
	at(16, nr1.Usage{}) // reset, throttle lifted
	if l := st.Ladders(p); len(l) != 0 {
		t.Fatalf("ladders after the reset: %+v", l)
	}
	at(20, over)
	at(25, over)
	at(35, over) // killed
	l = one(t, st.Ladders(p))
	g = l.Resources[nr1.ComputeDMAMemory]
	if !l.Ended.Equal(t0.Add(35*time.Second)) || l.Throttled || g.Steps != 3 || g.Next != "" {
		t.Fatalf("after the kill: %+v %+v", l, g)
	}
}

// A failed action's next try waits for its backoff, and the ladder says so.
func TestLadderNextWaitsForTheBackoff(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup = Duration{}
	st := NewState(t0.Add(-time.Hour))
	hog := cg("a", nr1.Usage{0, 0, 0, 8})
	for _, a := range Decide(t0, snap(t0, hog), st, p) {
		st.Outcome(a, errors.New("API server: deadline exceeded"), t0)
	}
	g := one(t, st.Ladders(p)).Resources[nr1.HypervisorQueue]
	if g.Next != Warn || !g.NextAt.Equal(t0.Add(firstRetry)) {
		t.Fatalf("after a failed warning: %+v", g)
	}
}

func one(t *testing.T, ls []Ladder) Ladder {
	t.Helper()
	if len(ls) != 1 {
		t.Fatalf("want one ladder, have %+v", ls)
	}
	return ls[0]
}
