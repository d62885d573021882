package allocation

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

type flakyLister struct{ err error }

func (f *flakyLister) List(context.Context) (Table, error) { return Table{}, f.err }

// A sampler at rest is told when reads start failing, once per outage.
func TestTrackerTellsWhenReadsStartFailing(t *testing.T) {
	l := &flakyLister{}
	tr := NewTracker(l, time.Second, testingclock.NewFakeClock(time.Unix(0, 0)), slog.New(slog.NewTextHandler(io.Discard, nil)))
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	first := tr.StartsFailing()
	tr.Refresh(context.Background())
	if closed(first) {
		t.Fatal("told of a failure after a read that succeeded")
	}
	l.err = errors.New("pod-resources List: deadline exceeded")
	tr.Refresh(context.Background())
	if !closed(first) {
		t.Fatal("not told when reads started failing")
	}
	again := tr.StartsFailing()
	tr.Refresh(context.Background())
	if closed(again) {
		t.Error("told again during the same outage")
	}
	l.err = nil
	tr.Refresh(context.Background())
	l.err = errors.New("pod-resources List: unavailable")
	tr.Refresh(context.Background())
	if !closed(again) {
		t.Error("not told of the next outage")
	}
}
