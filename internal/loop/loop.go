// SPDX-License-Identifier: Apache-2.0

package loop

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// Every runs step at once and then every interval of clk until ctx ends. The ticker
// exists before the first step runs, so a fake clock stepped after the first step's
// effect is seen always reaches the next one.
func Every(ctx context.Context, clk clock.WithTicker, interval time.Duration, step func(context.Context)) {
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

type (
	wokenKey   struct{}
	pendingKey struct{}
)

// Woken says the step Sooner runs with ctx was woken early, by its wake, rather than
// come at its time: a step may then leave what can wait to the next.
func Woken(ctx context.Context) bool {
	w, _ := ctx.Value(wokenKey{}).(bool)
	return w
}

// WakePending says whether a wake came for Sooner's next step while the step that came
// at its time runs with ctx: that step may leave what can wait, so that the next, which
// a change woke, is not kept waiting for it.
func WakePending(ctx context.Context) bool {
	pending, _ := ctx.Value(pendingKey{}).(func() bool)
	return pending != nil && pending()
}

// Sooner runs step at once, then when next() (asked after each step) has passed since
// the last step that came at its time began, and sooner when wake fires, but never twice
// within minGap: a wake within minGap of the last step waits for minGap's end, and the
// wakes that come meanwhile are one. A woken step does not put off the next step at its
// time, which may leave to it what a woken step leaves (Woken); a wake and a step due
// together run the woken step first. It is Every for a stage that is told when it has
// something to do, may rest longer when it has nothing, and is bounded in what a storm
// of wakes costs. wake must be buffered: its length tells a step at its time that a wake
// waits (WakePending).
func Sooner(ctx context.Context, clk clock.Clock, next func() time.Duration, minGap time.Duration, wake <-chan struct{}, step func(context.Context)) {
	woken := false
	timedCtx := context.WithValue(ctx, pendingKey{}, func() bool { return len(wake) > 0 })
	wokenCtx := context.WithValue(ctx, wokenKey{}, true)
	var timed time.Time // when the last step at its time began
	for {
		began := clk.Now()
		if woken {
			step(wokenCtx)
		} else {
			timed = began
			step(timedCtx)
		}
		if due := max(next()-clk.Since(timed), 0); woken && due == 0 {
			// The step at its time is due, and a woken one ran first: it runs next,
			// whatever woke meanwhile, so that a storm of wakes puts it off no further.
			if ctx.Err() != nil {
				return
			}
			woken = false
		} else {
			t := clk.NewTimer(due)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-wake:
				woken = true
				t.Stop()
			case <-t.C():
				// A wake ready as well runs first: the step at its time follows it.
				select {
				case <-wake:
					woken = true
				default:
					woken = false
				}
			}
		}
		if wait := minGap - clk.Since(began); wait > 0 {
			gap := clk.NewTimer(wait)
			select {
			case <-ctx.Done():
				gap.Stop()
				return
			case <-gap.C():
			}
		}
		// Wakes during the gap are for the woken step about to run.
		if woken {
			select {
			case <-wake:
			default:
			}
		}
	}
}
