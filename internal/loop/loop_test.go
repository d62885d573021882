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
// Without wakes, steps come at the interval from the last step, whatever woke it. A
// woken step's context says so (Woken); one that came at its time, or the first, not.
func TestSoonerStepsOnWakeNoSoonerThanMinGap(t *testing.T) {
	t0 := time.Unix(0, 0)
	clk := clocktest.New(t0)
	type step struct {
		at    time.Duration
		woken bool
	}
	steps := make(chan step)
	wake := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Sooner(ctx, clk, func() time.Duration { return time.Second }, 100*time.Millisecond, wake, func(ctx context.Context) { steps <- step{clk.Since(t0), Woken(ctx)} })
	}()
	expect := func(what string, want time.Duration, woken bool) {
		t.Helper()
		select {
		case s := <-steps:
			if s.at != want || s.woken != woken {
				t.Fatalf("%s: step at %v, woken %v; want at %v, woken %v", what, s.at, s.woken, want, woken)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no step", what)
		}
	}
	expect("first", 0, false)
	if d := clk.Next(t, clocktest.Timer, 10*time.Second); d != time.Second {
		t.Fatalf("interval wait %v", d)
	}
	wake <- struct{}{}
	if d := clk.Next(t, clocktest.Timer, 10*time.Second); d != 100*time.Millisecond {
		t.Fatalf("a wake at once after a step waits %v, want the 100ms gap", d)
	}
	wake <- struct{}{} // during the gap: one with the first
	clk.Step(100 * time.Millisecond)
	expect("woken within the gap", 100*time.Millisecond, true)
	if d := clk.Next(t, clocktest.Timer, 10*time.Second); d != time.Second {
		t.Fatalf("interval wait after a woken step %v", d)
	}
	clk.Step(time.Second)
	expect("interval after the woken step", 1100*time.Millisecond, false)
	clk.Next(t, clocktest.Timer, 10*time.Second)
	clk.Step(500 * time.Millisecond)
	wake <- struct{}{}
	expect("woken past the gap", 1600*time.Millisecond, true)
	clk.Next(t, clocktest.Timer, 10*time.Second)
	cancel()
	<-done
	select {
	case s := <-steps:
		t.Fatalf("a step at %v after the wakes were spent", s.at)
	default:
	}
}
