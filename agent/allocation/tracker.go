package allocation

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Lister reads the allocation table.
type Lister interface {
	List(ctx context.Context) (Table, error)
}

// State is the last allocation table read and when.
type State struct {
	Table Table
	// Read is when Table was read; zero until the first successful List. A reader judges
	// its age: an old table is as unknown as none.
	Read time.Time
	// Err is the last List's error, nil when it succeeded.
	Err error
}

// Tracker reads the table at an interval; the pod-resources API has no watch.
type Tracker struct {
	lister   Lister
	interval time.Duration
	now      func() time.Time
	log      *slog.Logger

	mu    sync.Mutex
	state State
}

// NewTracker returns a tracker reading lister every interval; now is the clock.
func NewTracker(lister Lister, interval time.Duration, now func() time.Time, log *slog.Logger) *Tracker {
	return &Tracker{lister: lister, interval: interval, now: now, log: log}
}

// Load returns the latest state.
func (t *Tracker) Load() State {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state
}

// Run reads until ctx ends.
func (t *Tracker) Run(ctx context.Context) error {
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		t.Refresh(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Refresh reads the table now. A failure keeps the last table with its read time, so
// that it ages into unknown, and records the error.
func (t *Tracker) Refresh(ctx context.Context) {
	table, err := t.lister.List(ctx)
	read := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		if t.state.Err == nil {
			t.log.Warn("pod-resources API unavailable; allocations age into unknown", "err", err)
		}
		t.state.Err = err
		return
	}
	if t.state.Err != nil {
		t.log.Info("pod-resources API available again")
	}
	t.state = State{Table: table, Read: read}
}
