// SPDX-License-Identifier: Apache-2.0

package sampler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime"
	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/internal/latest"
	"github.com/neureality-sdk/nr1-agent/internal/loop"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// RuntimeView is the runtime watcher's latest view.
type RuntimeView interface {
	Load() (*runtime.Snapshot, <-chan struct{})
}

// Layers reads image and writable-layer sizes from the runtime.
type Layers interface {
	// WritableLayers are the writable layers the runtime lists in one call; a container
	// not among them is read alone.
	WritableLayers(ctx context.Context) (map[string]runtime.Layer, error)
	WritableLayer(ctx context.Context, containerID string) (runtime.Layer, error)
	ImageSize(ctx context.Context, ref string) (int64, error)
}

// PartitionSampler measures the docker partition per CG from CRI: the size of each of
// its images (ImageStatus) plus the writable layers of its containers (one
// ListContainerStats a round, ContainerStats for a container it leaves out).
// An image used by several CGs is charged to each of them in full: each would need it
// alone, and the partition holds it once only while they share it.
type PartitionSampler struct {
	layers   Layers
	view     RuntimeView
	interval time.Duration
	clock    clock.WithTicker
	log      *slog.Logger

	value *latest.Value[PartitionUsage]
	latest.View[PartitionUsage]
}

// NewPartitionSampler measures every interval (10 s by default: image sizes barely move
// and ContainerStats costs the runtime a walk of each writable layer).
func NewPartitionSampler(layers Layers, view RuntimeView, interval time.Duration, clk clock.WithTicker, log *slog.Logger) *PartitionSampler {
	value := latest.New(PartitionUsage{})
	return &PartitionSampler{layers: layers, view: view, interval: interval, clock: clk, log: log, value: value, View: value.View()}
}

// Run measures until ctx ends.
func (p *PartitionSampler) Run(ctx context.Context) error {
	loop.Every(ctx, p.clock, p.interval, func(ctx context.Context) {
		if err := p.Measure(ctx); err != nil {
			p.log.Warn("docker partition measurement failed", "err", err)
			p.value.Fail(err)
		}
	})
	return nil
}

// Measure measures now. A container whose writable layer or image cannot be read leaves
// its CG unknown; when the runtime itself cannot be reached, every CG it could not
// measure is unknown and the measurement fails: the stage says so, where a CG's own
// failure is that CG's alone.
func (p *PartitionSampler) Measure(ctx context.Context) error {
	rs, _ := p.view.Load()
	usage := PartitionUsage{Read: p.clock.Now(), ByCG: map[string]nr1.Base{}, ByCtr: map[string]nr1.Base{}, SizedAt: map[string]time.Time{}, Failed: map[string]string{}}
	images := map[string]int64{}
	// A pod's sandboxes are one CG: a sandbox the runtime keeps after the pod's
	// network was set up again holds exited containers, and must not hide (nor
	// double) what the live one holds. Each image counts once per pod.
	seen := map[string]map[string]bool{}
	var away error // the runtime not reached
	listed, err := p.layers.WritableLayers(ctx)
	if err != nil {
		// Each container is asked alone then: its answer, or its error, is its own.
		p.log.Debug("listing the writable layers failed", "err", err)
	}
	for _, pod := range rs.Pods {
		if seen[pod.UID] == nil {
			seen[pod.UID] = map[string]bool{}
		}
		for _, c := range pod.Containers {
			if c.State != view.Running {
				continue
			}
			if _, failed := usage.Failed[pod.UID]; failed {
				break
			}
			w, ok := listed[c.ID]
			var err error
			if !ok {
				w, err = p.layers.WritableLayer(ctx, c.ID)
			}
			if err != nil {
				// A failed reading is unknown, not zero bytes: the CG is not judged on it.
				usage.Failed[pod.UID] = fmt.Sprintf("writable layer of %s: %v", c.Name, err)
				if unreached(err) {
					away = err
				}
				break
			}
			usage.ByCtr[c.ID] = nr1.Base(w.Bytes)
			usage.ByCG[pod.UID] += nr1.Base(w.Bytes)
			if at, ok := usage.SizedAt[pod.UID]; !ok || w.At.Before(at) {
				usage.SizedAt[pod.UID] = w.At
			}
			if c.ImageRef == "" || seen[pod.UID][c.ImageRef] {
				continue
			}
			seen[pod.UID][c.ImageRef] = true
			size, ok := images[c.ImageRef]
			if !ok {
				if size, err = p.layers.ImageSize(ctx, c.ImageRef); err != nil {
					// One image the runtime cannot size (removed under its running
					// container, a reference it does not resolve) is that CG's unknown.
					usage.Failed[pod.UID] = fmt.Sprintf("image of %s: %v", c.Name, err)
					if unreached(err) {
						away = err
					}
					break
				}
				images[c.ImageRef] = size
			}
			usage.ByCG[pod.UID] += nr1.Base(size)
		}
		if _, ok := usage.ByCG[pod.UID]; !ok {
			usage.ByCG[pod.UID] = 0
		}
	}
	for uid := range usage.Failed {
		delete(usage.ByCG, uid)
		delete(usage.SizedAt, uid)
	}
	// A reading like the last (at rest, every reading) renews its time without waking
	// the sampler: only what changed may have gone past a CG's partition. The times the
	// runtime sized the layers move on every period of its own, and are kept for the
	// sampler's next sample without waking it.
	if last, _ := p.Load(); !last.Read.IsZero() && maps.Equal(last.ByCtr, usage.ByCtr) && maps.Equal(last.ByCG, usage.ByCG) && maps.Equal(last.Failed, usage.Failed) {
		p.value.Renew(usage.Read, usage)
	} else {
		p.value.Publish(usage.Read, usage)
	}
	if away != nil {
		return fmt.Errorf("the container runtime does not answer: %w", away)
	}
	return nil
}

// unreached says whether err is the runtime not reached at all (no connection, or
// gRPC's Unavailable), rather than its answer about one container or image, such as a
// layer too slow to walk or an image removed under its container.
func unreached(err error) bool {
	if errors.Is(err, runtime.ErrNoFigure) || errors.Is(err, context.Canceled) {
		return false
	}
	s, ok := status.FromError(err)
	return !ok || s.Code() == codes.Unavailable
}
