package allocation

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/internal/latest"
	"github.com/neureality-sdk/nr1-agent/internal/loop"
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
}

// Tracker reads the table at an interval; the pod-resources API has no watch.
type Tracker struct {
	lister   Lister
	interval time.Duration
	clock    clock.WithTicker
	log      *slog.Logger

	*latest.Value[State]
}

// NewTracker returns a tracker reading lister every interval of clk.
func NewTracker(lister Lister, interval time.Duration, clk clock.WithTicker, log *slog.Logger) *Tracker {
	return &Tracker{lister: lister, interval: interval, clock: clk, log: log, Value: latest.New(State{})}
}

// Run reads until ctx ends.
func (t *Tracker) Run(ctx context.Context) error {
	loop.Every(ctx, t.clock, t.interval, t.Refresh)
	return nil
}

// Refresh reads the table now. A failure keeps the last table with its read time, so
// that it ages into unknown, and records the error.
func (t *Tracker) Refresh(ctx context.Context) {
	table, err := t.lister.List(ctx)
	read := t.clock.Now()
	_, failing := t.Health()
	if err != nil {
		if failing == nil {
			t.log.Warn("pod-resources API unavailable; allocations age into unknown", "err", err)
		}
		t.Fail(err)
		return
	}
	if failing != nil {
		t.log.Info("pod-resources API available again")
	}
	t.Publish(read, State{Table: table, Read: read})
}
