// SPDX-License-Identifier: Apache-2.0

package device

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/internal/latest"
	"github.com/neureality-sdk/nr1-agent/internal/loop"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Prober reads the NR1's health.
type Prober interface {
	Probe() Health
}

// Monitor re-probes health at an interval and tells watchers when it changes.
type Monitor struct {
	prober   Prober
	interval time.Duration
	clock    clock.WithTicker
	log      *slog.Logger

	value *latest.Value[Health] // published on every change
	latest.View[Health]
}

// NewMonitor probes once at once, so Load is meaningful before Run starts; it probes
// again every interval of clk.
func NewMonitor(p Prober, interval time.Duration, clk clock.WithTicker, log *slog.Logger) *Monitor {
	value := latest.New(Health{})
	m := &Monitor{prober: p, interval: interval, clock: clk, log: log, value: value, View: value.View()}
	m.value.Publish(clk.Now(), p.Probe())
	return m
}

// Run probes every interval until ctx ends.
func (m *Monitor) Run(ctx context.Context) error {
	loop.Every(ctx, m.clock, m.interval, func(context.Context) { m.Update(m.prober.Probe()) })
	return nil
}

// Update records h and wakes the watchers if it differs from the current health. Only
// the monitor's loop calls it, so the comparison and the publication do not race.
func (m *Monitor) Update(h Health) {
	now := m.clock.Now()
	current, _ := m.Load()
	if h == current {
		m.value.Succeeded(now)
		return
	}
	for r := range h {
		if h[r] != current[r] {
			m.log.Info("NR1 health changed", "resource", nr1.Resource(r).Name(), "healthy", h[r].Healthy, "reason", h[r].Reason)
		}
	}
	m.value.Publish(now, h)
}
