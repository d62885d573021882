// SPDX-License-Identifier: Apache-2.0

// Package clocktest is a fake clock for tests that step time instead of sleeping. A step
// taken before the code under test starts to wait is lost to that wait, so the clock
// tells the test each wait as it starts: the test steps once the code waits, never
// before. It is for tests only.
package clocktest

import (
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// Kind is how a wait was started.
type Kind int

// The kinds of wait.
const (
	After  Kind = iota // After
	Timer              // NewTimer, or a timer's Reset
	Ticker             // NewTicker or Tick
)

func (k Kind) String() string {
	switch k {
	case After:
		return "After"
	case Timer:
		return "Timer"
	default:
		return "Ticker"
	}
}

// Wait is one wait started on the clock.
type Wait struct {
	Kind Kind
	D    time.Duration
}

// Clock is a fake clock that records the waits started on it.
type Clock struct {
	*testingclock.FakeClock
	jump func(Wait) bool

	mu      sync.Mutex
	waits   map[Kind][]time.Duration
	taken   map[Kind]int // the waits of each kind Next has returned
	changed chan struct{}
}

// New returns a clock at t that moves only when the test steps it.
func New(t time.Time) *Clock { return NewJumping(t, nil) }

// NewJumping returns a clock at t on which every wait jump approves ends as it starts:
// the clock steps to its end at once. It suits waits a test has no reason to time (a
// debounce, say), which would otherwise need a step the test cannot place.
func NewJumping(t time.Time, jump func(Wait) bool) *Clock {
	return &Clock{FakeClock: testingclock.NewFakeClock(t), jump: jump,
		waits: map[Kind][]time.Duration{}, taken: map[Kind]int{}, changed: make(chan struct{})}
}

// started records a wait whose waiter is already on the fake clock, so that any step
// after the record reaches it.
func (c *Clock) started(k Kind, d time.Duration) {
	c.mu.Lock()
	c.waits[k] = append(c.waits[k], d)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	if c.jump != nil && c.jump(Wait{k, d}) {
		c.Step(d)
	}
}

// After is the fake time.After, recorded.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	ch := c.FakeClock.After(d)
	c.started(After, d)
	return ch
}

// NewTimer is the fake time.NewTimer, recorded, and so are the timer's resets.
func (c *Clock) NewTimer(d time.Duration) clock.Timer {
	t := &timer{Timer: c.FakeClock.NewTimer(d), c: c}
	c.started(Timer, d)
	return t
}

// NewTicker is the fake time.NewTicker, recorded.
func (c *Clock) NewTicker(d time.Duration) clock.Ticker {
	t := c.FakeClock.NewTicker(d)
	c.started(Ticker, d)
	return t
}

// Tick is the fake time.Tick, recorded.
func (c *Clock) Tick(d time.Duration) <-chan time.Time {
	ch := c.FakeClock.Tick(d)
	c.started(Ticker, d)
	return ch
}

type timer struct {
	clock.Timer
	c *Clock
}

// Reset drops a tick not yet received, as a time.Timer's does since Go 1.23: the fake
// timer would keep it, and a step firing the timer again would then block on its full
// channel.
func (t *timer) Reset(d time.Duration) bool {
	select {
	case <-t.C():
	default:
	}
	active := t.Timer.Reset(d)
	t.c.started(Timer, d)
	return active
}

// Waits returns the lengths of the waits of kind k started so far, in order.
func (c *Clock) Waits(k Kind) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits[k]...)
}

// Next waits until a wait of kind k that no earlier Next returned has started, and
// returns its length. It fails the test when none starts within timeout, a bound on the
// code under test in real time.
func (c *Clock) Next(tb testing.TB, k Kind, timeout time.Duration) time.Duration {
	tb.Helper()
	deadline := time.After(timeout)
	for {
		c.mu.Lock()
		waits, n, changed := c.waits[k], c.taken[k], c.changed
		if n < len(waits) {
			c.taken[k]++
		}
		c.mu.Unlock()
		if n < len(waits) {
			return waits[n]
		}
		select {
		case <-changed:
		case <-deadline:
			tb.Fatalf("no new %s wait started within %v", k, timeout)
		}
	}
}
