// SPDX-License-Identifier: Apache-2.0

package clocktest

import (
	"slices"
	"testing"
	"time"
)

func TestAStepAfterNextEndsTheWait(t *testing.T) {
	c := New(time.Unix(0, 0))
	fired := make(chan time.Time)
	go func() { fired <- <-c.After(3 * time.Second) }()
	d := c.Next(t, After, 5*time.Second)
	if d != 3*time.Second {
		t.Fatalf("wait of %v, want 3s", d)
	}
	c.Step(d)
	if at := <-fired; !at.Equal(time.Unix(3, 0)) {
		t.Errorf("fired at %v", at)
	}
	tk := c.NewTicker(time.Second)
	defer tk.Stop()
	if d := c.Next(t, Ticker, time.Second); d != time.Second {
		t.Errorf("ticker of %v", d)
	}
	if got := c.Waits(After); !slices.Equal(got, []time.Duration{3 * time.Second}) {
		t.Errorf("After waits %v", got)
	}
}

func TestJumpingEndsTheWaitsItApproves(t *testing.T) {
	c := NewJumping(time.Unix(0, 0), func(w Wait) bool { return w.Kind == Timer })
	tm := c.NewTimer(50 * time.Millisecond)
	select {
	case <-tm.C():
	default:
		t.Fatal("an approved timer did not end as it started")
	}
	// A reset of a timer whose tick was never received: the tick is dropped, the new
	// one arrives, and nothing blocks.
	tm.Reset(50 * time.Millisecond)
	tm.Reset(50 * time.Millisecond)
	select {
	case <-tm.C():
	default:
		t.Fatal("a reset timer did not end as it started")
	}
	if !c.Now().Equal(time.Unix(0, 150*int64(time.Millisecond))) {
		t.Errorf("clock at %v after three jumps of 50ms", c.Now())
	}
	tk := c.NewTicker(time.Millisecond)
	defer tk.Stop()
	select {
	case <-tk.C():
		t.Fatal("a ticker the jump does not approve ticked")
	default:
	}
	if got := c.Waits(Timer); len(got) != 3 {
		t.Errorf("timer waits %v, want the start and two resets", got)
	}
}
