// SPDX-License-Identifier: Apache-2.0

package loop

import (
	"context"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/neureality-sdk/nr1-agent/internal/clocktest"
)

func TestEveryStepsAtOnceThenAtEachInterval(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	steps := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, clk, time.Second, func(context.Context) { steps <- clk.Now() })
	}()
	if at := <-steps; !at.Equal(time.Unix(0, 0)) {
		t.Fatalf("first step at %v, want at once", at)
	}
	for i := 1; i <= 3; i++ {
		clk.Step(time.Second)
		if at := <-steps; !at.Equal(time.Unix(int64(i), 0)) {
			t.Fatalf("step %d at %v", i, at)
		}
	}
	cancel()
	clk.Step(time.Second) // a tick racing the cancel may take one more step
	select {
	case <-steps:
	case <-done:
	}
	<-done
}

// A wake steps at once, unless the last step began within minGap: then at minGap's end.
// Steps at their time come at the interval from the last one at its time, whatever woke
// between; one due with a wake ready runs after the woken step, a gap later, and knows a
// wake waits (WakePending). A woken step's context says so (Woken); one that came at its
// time, or the first, not.
func TestSoonerStepsOnWakeNoSoonerThanMinGap(t *testing.T) {
	t0 := time.Unix(0, 0)
	clk := clocktest.New(t0)
	type step struct {
		at             time.Duration
		woken, pending bool
	}
	steps := make(chan step)
	wake := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Sooner(ctx, clk, func() time.Duration { return time.Second }, 100*time.Millisecond, wake, func(ctx context.Context) {
			steps <- step{clk.Since(t0), Woken(ctx), WakePending(ctx)}
		})
	}()
	expect := func(what string, want time.Duration, woken, pending bool) {
		t.Helper()
		select {
		case s := <-steps:
			if s != (step{want, woken, pending}) {
				t.Fatalf("%s: step at %v, woken %v, a wake pending %v; want at %v, woken %v, pending %v", what, s.at, s.woken, s.pending, want, woken, pending)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no step", what)
		}
	}
	expect("first", 0, false, false)
	if d := clk.Next(t, clocktest.Timer, 10*time.Second); d != time.Second {
		t.Fatalf("interval wait %v", d)
	}
	wake <- struct{}{}
	if d := clk.Next(t, clocktest.Timer, 10*time.Second); d != 100*time.Millisecond {
		t.Fatalf("a wake at once after a step waits %v, want the 100ms gap", d)
	}
	wake <- struct{}{} // during the gap: one with the first
	clk.Step(100 * time.Millisecond)
	expect("woken within the gap", 100*time.Millisecond, true, false)
	if d := clk.Next(t, clocktest.Timer, 10*time.Second); d != 900*time.Millisecond {
		t.Fatalf("wait after a woken step %v, want what is left of the interval from the first", d)
	}
	clk.Step(900 * time.Millisecond)
	expect("at its time, a woken step between", time.Second, false, false)
	clk.Next(t, clocktest.Timer, 10*time.Second)
	clk.Step(500 * time.Millisecond)
	wake <- struct{}{}
	expect("woken past the gap", 1500*time.Millisecond, true, false)
	// Due at 2 s with a wake ready: the woken step, then the one at its time a gap later,
	// with a wake that came in the gap waiting for the step after it.
	if d := clk.Next(t, clocktest.Timer, 10*time.Second); d != 500*time.Millisecond {
		t.Fatalf("wait %v, want to 2 s", d)
	}
	wake <- struct{}{}
	clk.Step(500 * time.Millisecond)
	expect("woken, the step at its time due too", 2*time.Second, true, false)
	clk.Next(t, clocktest.Timer, 10*time.Second)
	wake <- struct{}{}
	clk.Step(100 * time.Millisecond)
	expect("at its time after the woken step, a wake waiting", 2100*time.Millisecond, false, true)
	clk.Next(t, clocktest.Timer, 10*time.Second)
	clk.Step(100 * time.Millisecond)
	expect("the waiting wake", 2200*time.Millisecond, true, false)
	clk.Next(t, clocktest.Timer, 10*time.Second)
	cancel()
	<-done
	select {
	case s := <-steps:
		t.Fatalf("a step at %v after the wakes were spent", s.at)
	default:
	}
}
