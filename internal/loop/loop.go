// Package loop runs the agent's periodic stages: a step now, then at every interval of
// an injected clock, so that tests step a fake clock instead of sleeping.
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
