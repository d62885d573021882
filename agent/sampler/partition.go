package sampler

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/neureality-sdk/nr1-agent/agent/runtime"
	"github.com/neureality-sdk/nr1-agent/internal/latest"
)

// RuntimeView is the runtime watcher's latest view.
type RuntimeView interface {
	Load() (*runtime.Snapshot, <-chan struct{})
}

// PartitionSampler measures the docker partition per CG from CRI: the size of each of
// its images (ImageStatus) plus the writable layers of its containers (ContainerStats).
// An image used by several CGs is charged to each of them in full: each would need it
// alone, and the partition holds it once only while they share it.
type PartitionSampler struct {
	endpoint string
	view     RuntimeView
	interval time.Duration
	log      *slog.Logger

	conn *runtime.Conn
	*latest.Value[PartitionUsage]
}

// NewPartitionSampler measures every interval (10 s by default: image sizes barely move
// and ContainerStats costs the runtime a walk of each writable layer).
func NewPartitionSampler(endpoint string, view RuntimeView, interval time.Duration, log *slog.Logger) *PartitionSampler {
	return &PartitionSampler{endpoint: endpoint, view: view, interval: interval, log: log, Value: latest.New(PartitionUsage{})}
}

// Run measures until ctx ends.
func (p *PartitionSampler) Run(ctx context.Context) error {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	defer func() {
		if p.conn != nil {
			_ = p.conn.Close()
		}
	}()
	for {
		if err := p.Measure(ctx); err != nil {
			p.log.Warn("docker partition measurement failed", "err", err)
			p.Fail(err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Measure measures now.
func (p *PartitionSampler) Measure(ctx context.Context) error {
	if p.conn == nil {
		c, err := runtime.DialFirst(ctx, p.endpoint)
		if err != nil {
			return err
		}
		p.conn = c
	}
	view, _ := p.view.Load()
	usage := PartitionUsage{Read: time.Now(), ByCG: map[string]int64{}, ByCtr: map[string]int64{}, Failed: map[string]string{}}
	images := map[string]int64{}
	for _, pod := range view.Pods {
		seen := map[string]bool{}
		var total int64
		for _, c := range pod.Containers {
			if c.State != runtime.Running {
				continue
			}
			st, err := p.conn.RS.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: c.ID})
			if err != nil {
				// A failed reading is unknown, not zero bytes: the CG is not judged on it.
				usage.Failed[pod.UID] = fmt.Sprintf("ContainerStats of %s: %v", c.Name, err)
				break
			}
			w := int64(st.GetStats().GetWritableLayer().GetUsedBytes().GetValue()) //nolint:gosec // bytes fit
			usage.ByCtr[c.ID] = w
			total += w
			if c.ImageRef == "" || seen[c.ImageRef] {
				continue
			}
			seen[c.ImageRef] = true
			size, ok := images[c.ImageRef]
			if !ok {
				img, err := p.conn.IS.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: c.ImageRef}})
				if err != nil {
					_ = p.conn.Close()
					p.conn = nil
					return fmt.Errorf("image status of %s: %w", c.ImageRef, err)
				}
				size = int64(img.GetImage().GetSize()) //nolint:gosec // bytes fit
				images[c.ImageRef] = size
			}
			total += size
		}
		if _, failed := usage.Failed[pod.UID]; !failed {
			usage.ByCG[pod.UID] = total
		}
	}
	p.Publish(usage.Read, usage)
	return nil
}
