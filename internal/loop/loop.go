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

type wokenKey struct{}

// Woken says the step Sooner runs with ctx was woken early, by its wake, rather than
// come at its time: a step may then leave what can wait to the next.
func Woken(ctx context.Context) bool {
	w, _ := ctx.Value(wokenKey{}).(bool)
	return w
}

// Sooner runs step at once, then when next() (asked after each step) has passed since
// the last step began, or sooner when wake fires, but never twice within minGap: a wake
// within minGap of the last step waits for minGap's end, and the wakes that come
// meanwhile are one. It is Every for a stage that is told when it has something to do,
// may rest longer when it has nothing, and is bounded in what a storm of wakes costs.
func Sooner(ctx context.Context, clk clock.Clock, next func() time.Duration, minGap time.Duration, wake <-chan struct{}, step func(context.Context)) {
	woken := false
	for {
		began := clk.Now()
		if woken {
			step(context.WithValue(ctx, wokenKey{}, true))
		} else {
			step(ctx)
		}
		t := clk.NewTimer(max(next()-clk.Since(began), 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
			woken = false
			continue
		case <-wake:
			// Woken early only if the step was not due: a timer and a wake both ready are
			// picked between at random.
			select {
			case <-t.C():
				woken = false
			default:
				woken = true
			}
			t.Stop()
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
		// Wakes during the gap are for the step about to run.
		select {
		case <-wake:
		default:
		}
	}
}
