// SPDX-License-Identifier: Apache-2.0

package cadence

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/internal/loop"
)

// Need says why samples must come at the interval now, "" when they need not: a ladder
// under way, a warm-up, the kubelet not answering, a CG not known or not read in full.
type Need func(now time.Time) string

// Options say how the node is sampled.
type Options struct {
	// Interval is the time between samples while anything needs them.
	Interval time.Duration
	// Idle is the time between samples at rest; at or below Interval, never at rest.
	Idle time.Duration
	// Gap is the least time between two samples woken early: a storm of wakes costs at
	// most one sample per gap.
	Gap time.Duration
	// Changes are the kernel's reports of processes taking an NR1 file: each wakes a
	// sample. Closed when no more will come, and then the cadence never rests, since
	// what a CG takes would be seen only at rest's pace. Nil: no changes are followed,
	// and samples come every Interval only, unless WakesSuffice.
	Changes <-chan struct{}
	// Wakes each return a channel closed at their source's next value (a new container,
	// a new docker-partition reading, a ladder starting, the kubelet failing): each
	// wakes a step, while Changes are followed, or always with WakesSuffice.
	Wakes []func() <-chan struct{}
	// WakesSuffice says the Wakes tell all a step follows, without Changes: they wake a
	// step whether or not Changes are followed, and the cadence rests on them alone
	// while no Need gives a reason (the kubelet's reads, woken when the runtime starts a
	// pod or a read fails, and vouched for by each sample between).
	WakesSuffice bool
	// Needs are asked before every wait; the first to give a reason keeps the interval.
	Needs []Need
	Clock clock.WithTicker
}

// Cadence runs a step at the pace its options ask.
type Cadence struct {
	opts Options
	deaf atomic.Bool // Changes closed

	mu      sync.Mutex
	planned time.Duration // the wait after the last step, as last planned
	why     string        // why the last plan kept the interval; "" at rest
}

// New returns a cadence; nothing runs until Run.
func New(opts Options) *Cadence {
	return &Cadence{opts: opts, planned: opts.Interval, why: "no sample yet"}
}

// Next is the time to the next sample if nothing wakes one, and why not at rest.
func (c *Cadence) Next(now time.Time) (time.Duration, string) {
	switch {
	case c.opts.Idle <= c.opts.Interval || (c.opts.Changes == nil && !c.opts.WakesSuffice):
		return c.opts.Interval, "no rest configured"
	case c.deaf.Load():
		return c.opts.Interval, "the kernel's reports of NR1 files taken stopped"
	}
	for _, need := range c.opts.Needs {
		if why := need(now); why != "" {
			return c.opts.Interval, why
		}
	}
	return c.opts.Idle, ""
}

// Planned is the time from one sample to the next when nothing wakes one, as last
// planned, and why it is not the idle interval.
func (c *Cadence) Planned() (time.Duration, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.planned, c.why
}

func (c *Cadence) plan() time.Duration {
	d, why := c.Next(c.opts.Clock.Now())
	c.mu.Lock()
	c.planned, c.why = d, why
	c.mu.Unlock()
	return d
}

// Run calls step at once, then at the cadence, until ctx ends.
func (c *Cadence) Run(ctx context.Context, step func(context.Context)) {
	if c.opts.Changes == nil && !c.opts.WakesSuffice {
		loop.Every(ctx, c.opts.Clock, c.opts.Interval, step)
		return
	}
	loop.Sooner(ctx, c.opts.Clock, c.plan, c.opts.Gap, c.wakes(ctx), step)
}

// wakes merges the changes and every wake into one channel holding at most one wake.
func (c *Cadence) wakes(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	send := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	if c.opts.Changes != nil {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case _, ok := <-c.opts.Changes:
					if !ok {
						c.deaf.Store(true)
						send()
						return
					}
					send()
				}
			}
		}()
	}
	for _, next := range c.opts.Wakes {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-next():
					send()
				}
			}
		}()
	}
	return out
}
