// SPDX-License-Identifier: Apache-2.0

package allocation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

type flakyLister struct{ err error }

func (f *flakyLister) List(context.Context) (Table, error) { return Table{}, f.err }

// A cadence at rest is told when reads start failing, once per outage.
func TestTrackerTellsWhenReadsStartFailing(t *testing.T) {
	l := &flakyLister{}
	tr := NewTracker(Options{Lister: l, Interval: time.Second, Clock: testingclock.NewFakeClock(time.Unix(0, 0)), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
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

// kubelet answers Lists with table and Gets with err, counting both.
type kubelet struct {
	mu          sync.Mutex
	table       Table
	listErr     error
	askErr      error
	lists, asks int
	askedAbout  []PodKey
	// hold, when set, keeps each Get waiting until it is closed or the Get's deadline.
	hold chan struct{}
}

func (k *kubelet) List(context.Context) (Table, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lists++
	return k.table, k.listErr
}

func (k *kubelet) Ask(ctx context.Context, pod PodKey) error {
	k.mu.Lock()
	k.asks++
	k.askedAbout = append(k.askedAbout, pod)
	hold, err := k.hold, k.askErr
	k.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	return err
}

func (k *kubelet) counts() (lists, asks int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lists, k.asks
}

func (k *kubelet) set(f func(*kubelet)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f(k)
}

// Between reads of the whole table the kubelet is asked about its smallest pod; the
// table is read again when a pod awaits it, when the answer fails, after a failure and
// at the refresh. The stage's success follows every answer without waking readers.
func TestTrackerReadsTheTableOnDemand(t *testing.T) {
	big, small := PodKey{"ml", "resnet50"}, PodKey{"web", "nginx"}
	k := &kubelet{table: Table{big: {"health-handler": {Units: nr1.Amounts{3, 0, 2392, 7}}}, small: {"nginx": {}}}}
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	var awaiting atomic.Bool
	tr := NewTracker(Options{Lister: k, Interval: time.Second, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnDemand: &OnDemand{Asker: k, Refresh: 30 * time.Second, Pods: pods(awaiting.Load)}})
	ctx := context.Background()

	expect := func(what string, lists, asks int) {
		t.Helper()
		if l, a := k.counts(); l != lists || a != asks {
			t.Fatalf("%s: %d lists and %d asks, want %d and %d", what, l, a, lists, asks)
		}
	}
	tr.step(ctx)
	expect("first step", 1, 0)
	state, changed := tr.Load()
	if !state.Read.Equal(time.Unix(1000, 0)) || len(state.Table) != 2 {
		t.Fatalf("state after the first list: %+v", state)
	}
	for i := range 5 {
		clk.Step(time.Second)
		tr.step(ctx)
		expect("calm", 1, i+1)
	}
	if ok, err := tr.Health(); !ok.Equal(clk.Now()) || err != nil {
		t.Errorf("the kubelet's answer at %s is not the stage's success: %s, %v", clk.Now(), ok, err)
	}
	select {
	case <-changed:
		t.Error("an answer about one pod woke the table's readers")
	default:
	}
	if got := k.askedAbout[0]; got != small {
		t.Errorf("asked about %v, want the pod holding the fewest units %v", got, small)
	}

	awaiting.Store(true)
	clk.Step(time.Second)
	tr.step(ctx)
	expect("a pod awaits the table", 2, 5)
	awaiting.Store(false)

	k.set(func(k *kubelet) { k.askErr = errors.New("pod web/nginx not found") })
	clk.Step(time.Second)
	tr.step(ctx)
	expect("the pod asked about is gone", 3, 6)
	k.set(func(k *kubelet) { k.askErr = nil })

	// A kubelet that does not answer within the interval is away: the allocations start
	// aging at once, without waiting on a List.
	failing := tr.StartsFailing()
	k.set(func(k *kubelet) {
		k.askErr = fmt.Errorf("pod-resources Get web/nginx: %w", status.Error(codes.DeadlineExceeded, "context deadline exceeded"))
		k.listErr = errors.New("unavailable")
	})
	clk.Step(time.Second)
	tr.step(ctx)
	expect("the kubelet away", 3, 7)
	if tr.Needs(time.Time{}) == "" {
		t.Fatal("not failing after the kubelet did not answer")
	}
	select {
	case <-failing:
	default:
		t.Error("StartsFailing not told")
	}
	k.set(func(k *kubelet) { k.askErr = nil })
	clk.Step(time.Second)
	tr.step(ctx)
	expect("after a failure the table is read, not asked about", 4, 7)
	k.set(func(k *kubelet) { k.listErr = nil })
	clk.Step(time.Second)
	tr.step(ctx)
	expect("back", 5, 7)
	if why := tr.Needs(time.Time{}); why != "" {
		t.Fatal("failing after a list succeeded")
	}

	_, changed = tr.Load()
	clk.Step(29 * time.Second)
	tr.step(ctx)
	expect("before the refresh", 5, 8)
	clk.Step(time.Second)
	tr.step(ctx)
	expect("at the refresh", 6, 8)
	select {
	case <-changed:
		t.Error("a refresh that read the same table woke its readers")
	default:
	}
	if state, _ := tr.Load(); !state.Read.Equal(clk.Now()) {
		t.Errorf("the refresh's table read at %s, want %s", state.Read, clk.Now())
	}
	k.set(func(k *kubelet) { k.table = Table{small: {"nginx": {}}} })
	clk.Step(30 * time.Second)
	tr.step(ctx)
	select {
	case <-changed:
	default:
		t.Error("a refresh that read a new table woke no one")
	}
}

// An empty table has no pod to ask about: it is read whole.
func TestTrackerListsAnEmptyTable(t *testing.T) {
	k := &kubelet{table: Table{}}
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	tr := NewTracker(Options{Lister: k, Interval: time.Second, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnDemand: &OnDemand{Asker: k, Refresh: time.Minute, Pods: pods(func() bool { return false })}})
	for range 3 {
		tr.step(context.Background())
		clk.Step(time.Second)
	}
	if l, a := k.counts(); l != 3 || a != 0 {
		t.Errorf("%d lists and %d asks of an empty table, want 3 and 0", l, a)
	}
}

// pods are a runtime whose pods never change, awaited while awaiting says so.
type pods func() bool

func (pods) Changed() <-chan struct{} { return nil }
func (p pods) Awaits(State) bool      { return p() }

// Before each sample the kubelet vouches for the table: one question, whose answer is
// the stage's success. A kubelet slow to answer delays the sample by the wait only, its
// question going on; a kubelet that does not answer is left to the tracker's own
// cadence, and a tracker reading the whole table every interval is never asked.
func TestVouchAsksBeforeASampleAndWaitsAtMostItsWait(t *testing.T) {
	small := PodKey{"web", "nginx"}
	k := &kubelet{table: Table{small: {"nginx": {}}}}
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	tr := NewTracker(Options{Lister: k, Interval: time.Second, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnDemand: &OnDemand{Asker: k, Refresh: time.Minute, Pods: pods(func() bool { return false })}})
	ctx := context.Background()
	expect := func(what string, lists, asks int) {
		t.Helper()
		if l, a := k.counts(); l != lists || a != asks {
			t.Fatalf("%s: %d lists and %d asks, want %d and %d", what, l, a, lists, asks)
		}
	}
	tr.Vouch(ctx, 50*time.Millisecond, 0)
	expect("the first vouch reads the table", 1, 0)
	clk.Step(10 * time.Second)
	tr.Vouch(ctx, 50*time.Millisecond, 0)
	expect("a vouch at rest", 1, 1)
	if answered, err := tr.Health(); !answered.Equal(clk.Now()) || err != nil {
		t.Fatalf("the answer before the sample is not the stage's success: %s, %v", answered, err)
	}

	// Slow: the sample goes on after the wait; the answer lands when it comes.
	hold := make(chan struct{})
	k.set(func(k *kubelet) { k.hold = hold })
	clk.Step(10 * time.Second)
	asked := clk.Now()
	vouched := make(chan struct{})
	go func() { defer close(vouched); tr.Vouch(ctx, 50*time.Millisecond, 0) }()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(50 * time.Millisecond)
	select {
	case <-vouched:
	case <-time.After(10 * time.Second):
		t.Fatal("a vouch waited past its wait for a slow kubelet")
	}
	if answered, _ := tr.Health(); !answered.Before(asked) {
		t.Fatal("a question not answered yet counted as an answer")
	}
	// A step of the tracker's own cadence waits its turn behind the question.
	stepped := make(chan struct{})
	go func() { defer close(stepped); tr.Step(ctx) }()
	time.Sleep(20 * time.Millisecond)
	expect("a step while a question is under way", 1, 2)
	close(hold)
	<-stepped
	expect("a step behind a slow vouch", 1, 3)
	if answered, err := tr.Health(); answered.Before(asked) || err != nil {
		t.Fatalf("the slow answer is not the stage's success: %s, %v", answered, err)
	}

	// Away: the question fails on its deadline, and no later vouch asks.
	k.set(func(k *kubelet) { k.hold, k.askErr = nil, status.Error(codes.Unavailable, "connection refused") })
	clk.Step(10 * time.Second)
	tr.Vouch(ctx, 50*time.Millisecond, 0)
	expect("a vouch of a kubelet away", 1, 4)
	if tr.Needs(clk.Now()) == "" {
		t.Fatal("not failing after the kubelet did not answer")
	}
	clk.Step(10 * time.Second)
	tr.Vouch(ctx, 50*time.Millisecond, 0)
	expect("a vouch while reads fail", 1, 4)

	whole := &kubelet{table: Table{small: {"nginx": {}}}}
	every := NewTracker(Options{Lister: whole, Interval: time.Second, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	every.Vouch(ctx, 50*time.Millisecond, 0)
	if l, a := whole.counts(); l != 0 || a != 0 {
		t.Errorf("a tracker reading every interval vouched: %d lists and %d asks", l, a)
	}
}

// An answer younger than fresh vouches for a sample as it is: the sample waits for
// nothing, even for a kubelet slow to answer, and the kubelet is asked all the same, its
// answer vouching for the next sample; an older one has the sample wait as before.
func TestVouchWaitsForNothingWhileTheLastAnswerIsFresh(t *testing.T) {
	k := &kubelet{table: Table{{"web", "nginx"}: {"nginx": {}}}}
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	tr := NewTracker(Options{Lister: k, Interval: time.Second, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnDemand: &OnDemand{Asker: k, Refresh: time.Minute, Pods: pods(func() bool { return false })}})
	ctx := context.Background()
	tr.Vouch(ctx, 50*time.Millisecond, time.Second) // reads the table
	hold := make(chan struct{})
	k.set(func(k *kubelet) { k.hold = hold })
	clk.Step(300 * time.Millisecond)
	asked := clk.Now()
	vouched := make(chan struct{})
	go func() { defer close(vouched); tr.Vouch(ctx, 50*time.Millisecond, time.Second) }()
	select {
	case <-vouched:
	case <-time.After(10 * time.Second):
		t.Fatal("a vouch 300 ms after an answer waited for a slow kubelet")
	}
	close(hold)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if answered, err := tr.Health(); !answered.Before(asked) && err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the question a fresh vouch asked never answered")
		}
	}
	if l, a := k.counts(); l != 1 || a != 1 {
		t.Errorf("%d lists and %d asks, want the first vouch's list and the fresh one's question", l, a)
	}
	// Past fresh: the sample waits for the answer, up to its wait.
	hold = make(chan struct{})
	k.set(func(k *kubelet) { k.hold = hold })
	clk.Step(2 * time.Second)
	vouched = make(chan struct{})
	go func() { defer close(vouched); tr.Vouch(ctx, 50*time.Millisecond, time.Second) }()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-vouched:
		t.Fatal("a vouch 2 s after the last answer did not wait for the kubelet")
	case <-time.After(50 * time.Millisecond):
	}
	close(hold)
	<-vouched
}

// A pod the runtime runs and the table lacks keeps the reads at the interval; nothing
// else does while the kubelet answers.
func TestUnreadWhileAPodAwaitsTheTable(t *testing.T) {
	var awaiting atomic.Bool
	k := &kubelet{table: Table{}}
	tr := NewTracker(Options{Lister: k, Interval: time.Second, Clock: testingclock.NewFakeClock(time.Unix(0, 0)), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnDemand: &OnDemand{Asker: k, Refresh: time.Minute, Pods: pods(awaiting.Load)}})
	if why := tr.Unread(time.Time{}); why != "" {
		t.Errorf("unread with no pod awaiting: %q", why)
	}
	awaiting.Store(true)
	if why := tr.Unread(time.Time{}); why == "" {
		t.Error("no reason while a pod awaits the table")
	}
}
