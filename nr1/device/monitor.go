package device

import (
	"context"
	"log/slog"
	"sync"
	"time"

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
	log      *slog.Logger

	mu      sync.Mutex
	current Health
	changed chan struct{} // closed and replaced on every change
}

// NewMonitor probes once at once, so Load is meaningful before Run starts.
func NewMonitor(p Prober, interval time.Duration, log *slog.Logger) *Monitor {
	return &Monitor{prober: p, interval: interval, log: log, current: p.Probe(), changed: make(chan struct{})}
}

// Load returns the current health and a channel closed at the next change.
func (m *Monitor) Load() (Health, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.current, m.changed
}

// Run probes every interval until ctx ends.
func (m *Monitor) Run(ctx context.Context) error {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			m.Update(m.prober.Probe())
		}
	}
}

// Update records h and wakes the watchers if it differs from the current health.
func (m *Monitor) Update(h Health) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h == m.current {
		return
	}
	for r := range h {
		if h[r] != m.current[r] {
			m.log.Info("NR1 health changed", "resource", nr1.Resource(r).Name(), "healthy", h[r].Healthy, "reason", h[r].Reason)
		}
	}
	m.current = h
	close(m.changed)
	m.changed = make(chan struct{})
}
