package allocation

import (
	"context"
	"log/slog"
	"sync"
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

	mu         sync.Mutex
	failingNow chan struct{} // closed when reads start failing

	*latest.Value[State]
}

// NewTracker returns a tracker reading lister every interval of clk.
func NewTracker(lister Lister, interval time.Duration, clk clock.WithTicker, log *slog.Logger) *Tracker {
	return &Tracker{lister: lister, interval: interval, clock: clk, log: log, Value: latest.New(State{}), failingNow: make(chan struct{})}
}

// StartsFailing returns a channel closed when reads next start failing: a sampler at
// rest must sample again, for the allocations to age into unknown where they are shown.
func (t *Tracker) StartsFailing() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failingNow
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
		t.Fail(err)
		if failing == nil {
			t.log.Warn("pod-resources API unavailable; allocations age into unknown", "err", err)
			t.mu.Lock()
			close(t.failingNow)
			t.failingNow = make(chan struct{})
			t.mu.Unlock()
		}
		return
	}
	if failing != nil {
		t.log.Info("pod-resources API available again")
	}
	t.Publish(read, State{Table: table, Read: read})
}
