// SPDX-License-Identifier: Apache-2.0

package cadence

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/internal/clocktest"
)

// The cadence rests only while no need gives a reason, and says which kept it.
func TestRestsOnlyWhileNothingNeedsTheInterval(t *testing.T) {
	clk := clocktest.New(time.Unix(0, 0))
	var ladder, kubelet string
	c := New(Options{Interval: time.Second, Idle: 5 * time.Second, Gap: 50 * time.Millisecond, Clock: clk, Changes: make(chan struct{}),
		Needs: []Need{func(time.Time) string { return ladder }, func(time.Time) string { return kubelet }}})
	if d, why := c.Planned(); d != time.Second || why == "" {
		t.Errorf("before any plan: %v (%q), want the interval", d, why)
	}
	for _, tc := range []struct {
		ladder, kubelet string
		want            time.Duration
	}{
		{"", "", 5 * time.Second},
		{"a ladder under way", "", time.Second},
		{"", "pod-resources failing", time.Second},
		{"a ladder under way", "pod-resources failing", time.Second},
	} {
		ladder, kubelet = tc.ladder, tc.kubelet
		c.plan()
		d, why := c.Planned()
		wantWhy := tc.ladder
		if wantWhy == "" {
			wantWhy = tc.kubelet
		}
		if d != tc.want || why != wantWhy {
			t.Errorf("needs %q %q: %v (%q), want %v (%q)", tc.ladder, tc.kubelet, d, why, tc.want, wantWhy)
		}
	}
}

// Without the kernel's changes, or with an idle interval no longer than the interval,
// nothing rests.
func TestNoRestWithoutChanges(t *testing.T) {
	clk := clocktest.New(time.Unix(0, 0))
	for _, o := range []Options{
		{Interval: time.Second, Idle: 5 * time.Second, Clock: clk},
		{Interval: time.Second, Idle: time.Second, Clock: clk, Changes: make(chan struct{})},
	} {
		if d, _ := New(o).Next(clk.Now()); d != time.Second {
			t.Errorf("%+v: next in %v, want the interval", o, d)
		}
	}
}

// With WakesSuffice (the kubelet's reads), the cadence rests on its wakes alone, without
// the kernel's changes, while no need gives a reason.
func TestWakesSufficeRestsWithoutChanges(t *testing.T) {
	clk := clocktest.New(time.Unix(0, 0))
	var failing string
	c := New(Options{Interval: time.Second, Idle: 5 * time.Minute, Clock: clk, WakesSuffice: true,
		Needs: []Need{func(time.Time) string { return failing }}})
	if d, why := c.Next(clk.Now()); d != 5*time.Minute || why != "" {
		t.Errorf("nothing needing the interval: next in %v (%q), want the idle interval", d, why)
	}
	failing = "pod-resources failing"
	if d, why := c.Next(clk.Now()); d != time.Second || why != failing {
		t.Errorf("reads failing: next in %v (%q), want the interval", d, why)
	}
}

// Run samples at once, at rest every idle interval, at once (after the gap) when woken
// (which puts off no sample at its time), and never rests again once the kernel's
// changes stop.
func TestRunSamplesAtRestOnWakesAndNoLongerRestsOnceChangesStop(t *testing.T) {
	t0 := time.Unix(0, 0)
	clk := clocktest.New(t0)
	changes := make(chan struct{})
	var mu sync.Mutex
	woken := make(chan struct{})
	asked := make(chan struct{}, 1) // the cadence waits on the source's channel
	next := func() <-chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		select {
		case asked <- struct{}{}:
		default:
		}
		return woken
	}
	publish := func() { mu.Lock(); defer mu.Unlock(); close(woken); woken = make(chan struct{}) }
	c := New(Options{Interval: time.Second, Idle: 5 * time.Second, Gap: 100 * time.Millisecond, Clock: clk, Changes: changes,
		Wakes: []func() <-chan struct{}{next}})
	steps := make(chan time.Duration)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, func(context.Context) { steps <- clk.Since(t0) })
	}()
	defer func() { cancel(); <-done }()
	expect := func(what string, want time.Duration) {
		t.Helper()
		select {
		case at := <-steps:
			if at != want {
				t.Fatalf("%s: step at %v, want %v", what, at, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no step", what)
		}
	}
	expect("first", 0)
	if d := clk.Next(t, clocktest.Timer, 10*time.Second); d != 5*time.Second {
		t.Fatalf("at rest, waits %v, want the idle interval", d)
	}
	clk.Step(time.Second)
	<-asked
	publish() // a source's next value, a second after the last sample: past the gap
	expect("woken", time.Second)
	if d := clk.Next(t, clocktest.Timer, 10*time.Second); d != 4*time.Second {
		t.Fatalf("at rest after a wake, waits %v, want what is left of the idle interval", d)
	}
	changes <- struct{}{} // at once after a sample: the gap is waited first
	if d := clk.Next(t, clocktest.Timer, 10*time.Second); d != 100*time.Millisecond {
		t.Fatalf("a change at once after a sample waits %v, want the gap", d)
	}
	clk.Step(100 * time.Millisecond)
	expect("changed", 1100*time.Millisecond)
	clk.Next(t, clocktest.Timer, 10*time.Second)
	close(changes)
	if d := clk.Next(t, clocktest.Timer, 10*time.Second); d != 100*time.Millisecond {
		t.Fatalf("changes stopping at once after a sample wait %v, want the gap", d)
	}
	clk.Step(100 * time.Millisecond)
	expect("changes stopped", 1200*time.Millisecond)
	// No longer at rest, the sample at its time is past due: it comes after the gap.
	clk.Next(t, clocktest.Timer, 10*time.Second)
	clk.Step(100 * time.Millisecond)
	expect("at the interval", 1300*time.Millisecond)
	if d := clk.Next(t, clocktest.Timer, 10*time.Second); d != time.Second {
		t.Fatalf("after the changes stopped, waits %v, want the interval", d)
	}
	if _, why := c.Planned(); why == "" {
		t.Error("no reason given for not resting")
	}
}

// With WakesSuffice (the kubelet's reads), a wake steps at once, after the gap, with no
// kernel's changes followed; without it, and without changes, wakes wait for the
// interval.
func TestWakesSufficeWakesWithoutChanges(t *testing.T) {
	for _, always := range []bool{true, false} {
		t0 := time.Unix(0, 0)
		clk := clocktest.New(t0)
		woken := make(chan struct{})
		c := New(Options{Interval: time.Second, Gap: 100 * time.Millisecond, Clock: clk, WakesSuffice: always,
			Wakes: []func() <-chan struct{}{func() <-chan struct{} { return woken }}})
		steps := make(chan time.Duration, 4)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Run(ctx, func(context.Context) { steps <- clk.Since(t0) })
		}()
		<-steps // a step at once
		// loop.Every waits on a ticker, loop.Sooner on a timer.
		kind := clocktest.Ticker
		if always {
			kind = clocktest.Timer
		}
		clk.Next(t, kind, 10*time.Second)
		clk.Step(500 * time.Millisecond)
		close(woken) // past the gap: a step now, when wakes count
		want := time.Second
		if always {
			want = 500 * time.Millisecond
		} else {
			clk.Step(500 * time.Millisecond)
		}
		select {
		case at := <-steps:
			if at != want {
				t.Errorf("WakesSuffice %v: a step at %v, want %v", always, at, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("WakesSuffice %v: no step", always)
		}
		cancel()
		<-done
	}
}
