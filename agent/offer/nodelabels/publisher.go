// SPDX-License-Identifier: Apache-2.0

package nodelabels

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// Node is the agent's node as the publisher reads and labels it.
type Node interface {
	Labels(ctx context.Context) (map[string]string, error)
	PatchLabels(ctx context.Context, labels map[string]*string) error
}

// Publisher keeps the node's labels what the agent found: it writes them at start, and
// looks again every Recheck, since anyone may edit a node's labels.
type Publisher struct {
	Node Node
	// Want are the labels to hold, every one under Prefix.
	Want    map[string]string
	Recheck time.Duration
	Clock   clock.Clock
	Log     *slog.Logger
}

// Run publishes until ctx ends. A failure is logged and tried again after a backoff:
// labels are for people and schedulers, and their absence stops nothing the agent does.
func (p *Publisher) Run(ctx context.Context) error {
	backoff := retry()
	for {
		next := p.Recheck
		if err := p.publish(ctx); err != nil {
			next = backoff.Step()
			p.Log.Warn("labelling the node failed; trying again", "err", err, "in", next)
		} else {
			backoff = retry()
		}
		t := p.Clock.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
}

// retry is the wait after each failure in a row: 1 s, doubling, to a minute.
func retry() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Steps: 7, Cap: time.Minute}
}

// publish writes the labels that differ and removes those under Prefix no longer
// wanted, leaving every other label alone.
func (p *Publisher) publish(ctx context.Context) error {
	have, err := p.Node.Labels(ctx)
	if err != nil {
		return err
	}
	patch := Changes(have, p.Want)
	if len(patch) == 0 {
		return nil
	}
	if err := p.Node.PatchLabels(ctx, patch); err != nil {
		return err
	}
	changed := slices.Sorted(maps.Keys(patch))
	p.Log.Info("node labelled", "labels", strings.Join(changed, ","))
	return nil
}

// Changes is the patch taking have to want under Prefix: a value for each label to set,
// nil for each to remove.
func Changes(have, want map[string]string) map[string]*string {
	patch := map[string]*string{}
	for k, v := range want {
		if cur, ok := have[k]; !ok || cur != v {
			patch[k] = &v
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok && strings.HasPrefix(k, Prefix) {
			patch[k] = nil
		}
	}
	return patch
}
