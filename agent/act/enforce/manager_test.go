// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// actuator records actions and fails those its fail function says.
type actuator struct {
	mu      sync.Mutex
	taken   []string
	fail    func(Action) error
	block   chan struct{} // when set, Act waits on it (or its deadline)
	started chan struct{} // when set, closed as Act first starts waiting
	once    sync.Once
}

func (f *actuator) Act(ctx context.Context, a Action) error {
	if f.block != nil {
		f.once.Do(func() { close(f.started) })
		select {
		case <-f.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var err error
	if f.fail != nil {
		err = f.fail(a)
	}
	mark := ""
	if err != nil {
		mark = "!"
	}
	f.taken = append(f.taken, fmt.Sprintf("%s%s/%s", mark, a.Kind, a.Pod))
	return err
}

func (f *actuator) Taken() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.taken, " ")
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// steps runs the manager on one sample per second of the fake clock.
func steps(m *Manager, clk *fakeClock, n int, usage nr1.Usage) {
	for range n {
		m.Step(context.Background(), snap(clk.Now(), cg("a", usage)))
		clk.Step(time.Second)
	}
}

func TestManagerAdvancesOnOutcomes(t *testing.T) {
	clk := &fakeClock{now: t0}
	act := &actuator{fail: func(a Action) error {
		if a.Kind == Throttle {
			return errors.New("bpffs: permission denied")
		}
		return nil
	}}
	m := NewManager(Options{Policy: noWarmup(), Actuator: act, State: NewState(t0.Add(-time.Hour)), Clock: clk, Log: quiet()})
	steps(m, clk, 12, nr1.Usage{4 * mb, 0, 0, 0})
	// The throttle fails at 5 s and is retried at 6 s, 8 s and 12 s (backoff 1, 2, 4 s);
	// the kill is not held back by it at 15 s.
	if got, want := act.Taken(), "warn/cg-a !throttle/cg-a !throttle/cg-a !throttle/cg-a"; got != want {
		t.Errorf("taken %q, want %q", got, want)
	}
	counts := m.Counts()
	if counts[Count{Kind: Throttle, Failed: true}] != 3 || counts[Count{Kind: Warn}] != 1 {
		t.Errorf("counts %v", counts)
	}
	act.fail = nil
	steps(m, clk, 6, nr1.Usage{4 * mb, 0, 0, 0})
	if got := act.Taken(); !strings.HasSuffix(got, "!throttle/cg-a throttle/cg-a kill/cg-a") {
		t.Errorf("after recovery %q", got)
	}
}

func TestManagerReportsAStalledAction(t *testing.T) {
	p0 := noWarmup()
	clk := &fakeClock{now: t0}
	act := &actuator{block: make(chan struct{}), started: make(chan struct{})}
	m := NewManager(Options{Policy: noWarmup(), Actuator: act, State: NewState(t0.Add(-time.Hour)), Clock: clk, Log: quiet()})
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Step(context.Background(), snap(t0, cg("a", nr1.Usage{0, 0, 0, 20})))
	}()
	<-act.started
	// The action ignores its deadline (the fake clock drives the manager's view of it,
	// the context's timer is real): past deadline and margin, the manager is unhealthy.
	clk.Step(actionTimeout)
	if err := m.Healthy(); err != nil {
		t.Fatalf("unhealthy within the action's deadline: %v", err)
	}
	clk.Step(actionTimeout + p0.KillTimeout.Duration + time.Second)
	if err := m.Healthy(); err == nil || !strings.Contains(err.Error(), "stalled") {
		t.Fatalf("a wedged action: %v", err)
	}
	close(act.block)
	<-done
	if err := m.Healthy(); err != nil {
		t.Errorf("healthy again after the action returned: %v", err)
	}
}

// Actions run on what the sample said: once earlier actions of the same step have taken
// longer than a sample stays fresh, the rest waits for a fresh sample to decide again.
func TestSlowActionsLeaveTheRestToAFreshSample(t *testing.T) {
	clk := &fakeClock{now: t0}
	p := noWarmup()
	act := &actuator{fail: func(a Action) error {
		if a.Kind == Warn {
			clk.Step(p.MaxSampleAge.Duration + time.Second) // an API server slow to take the Event
		}
		return nil
	}}
	m := NewManager(Options{Policy: p, Actuator: act, State: NewState(t0.Add(-time.Hour)), Clock: clk, Log: quiet()})
	hog := nr1.Usage{0, 0, 0, 20} // past the hard ratio: warn and kill in one step
	m.Step(context.Background(), snap(clk.Now(), cg("a", hog)))
	if got := act.Taken(); got != "warn/cg-a" {
		t.Fatalf("from one sample, slow to act on: %q, want the warning alone", got)
	}
	// The CG went back within its queues meanwhile: a fresh sample kills nothing.
	m.Step(context.Background(), snap(clk.Now(), cg("a", nr1.Usage{0, 0, 0, 7})))
	if got := act.Taken(); got != "warn/cg-a" {
		t.Errorf("after a fresh sample within: %q", got)
	}
	// Over again, still past the hard ratio: the kill the ladder had due.
	m.Step(context.Background(), snap(clk.Now(), cg("a", hog)))
	if got := act.Taken(); got != "warn/cg-a kill/cg-a" {
		t.Errorf("over again: %q, want the kill", got)
	}
}

// A damaged checkpoint, or another version's, is set aside and the agent starts
// afresh; no checkpoint is a new state.
func TestDamagedCheckpointStartsAfresh(t *testing.T) {
	path := filepath.Join(t.TempDir(), "enforcement.json")
	if err := os.WriteFile(path, fmt.Appendf(nil, `{"version":%d,"checksum":"00","state":{}}`, checkpointVersion), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (FileCheckpoint{Path: path}).Restore(t0); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("damaged checkpoint: %v", err)
	}
	if _, err := os.Stat(path + ".damaged"); err != nil {
		t.Errorf("the damaged checkpoint was not set aside: %v", err)
	}
	// Version 1 kept per-resource values as positional arrays: read as version 2 they
	// would land on the wrong resources, so they are refused.
	if err := os.WriteFile(path, []byte(`{"version":1,"checksum":"00","state":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (FileCheckpoint{Path: path}).Restore(t0); err == nil || !strings.Contains(err.Error(), "version 1, this agent reads 2") {
		t.Errorf("checkpoint of another version: %v", err)
	}
	if st, err := (FileCheckpoint{Path: filepath.Join(t.TempDir(), "none.json")}).Restore(t0); err != nil || len(st.cgs) != 0 {
		t.Errorf("no checkpoint: %v %v", st, err)
	}
}

// A pin is the truth about a throttle: a checkpoint that remembers one without a pin
// is corrected, and a pin without a checkpoint entry is adopted.
func TestSyncThrottles(t *testing.T) {
	st := NewState(t0)
	st.AdoptThrottle("remembered")
	st.SyncThrottles([]string{"pinned"})
	if got := fmt.Sprint(st.Throttled()); got != "[pinned]" {
		t.Errorf("throttled %s", got)
	}
}

// A cadence at rest is told when a ladder starts, and only then.
func TestManagerTellsWhenALadderStarts(t *testing.T) {
	clk := &fakeClock{now: t0}
	m := NewManager(Options{Policy: noWarmup(), Actuator: &actuator{}, State: NewState(t0.Add(-time.Hour)), Clock: clk, Log: quiet()})
	turned := m.TurnedBusy()
	steps(m, clk, 2, nr1.Usage{2 * mb, 0, 0, 0})
	select {
	case <-turned:
		t.Fatal("told of a ladder with every CG within its allocation")
	default:
	}
	steps(m, clk, 1, nr1.Usage{4 * mb, 0, 0, 0})
	select {
	case <-turned:
	default:
		t.Fatal("not told when a CG went over")
	}
	if why := m.Needs(clk.Now()); why != "a ladder is under way" {
		t.Errorf("a CG over: %q, want a ladder under way", why)
	}
	again := m.TurnedBusy()
	steps(m, clk, 2, nr1.Usage{4 * mb, 0, 0, 0})
	select {
	case <-again:
		t.Error("told again while the same ladder runs")
	default:
	}
}

type latestSample struct{ s *view.Sample }

func (l latestSample) Load() (*view.Sample, <-chan struct{}) { return l.s, nil }

// The agent's warm-up and a container's keep the cadence from resting: what is held is
// judged when they end, and must be sampled then. A container's warm-up is read from
// the latest sample, which the cadence asks about before the manager has judged it.
func TestManagerNeedsSamplesDuringWarmups(t *testing.T) {
	p := DefaultPolicy()
	clk := &fakeClock{now: t0}
	fresh := cg("a", nr1.Usage{})
	fresh.Containers[0].StartedAt = t0.Add(-time.Second)
	m := NewManager(Options{Samples: latestSample{snap(t0, cg("b", nr1.Usage{}))}, Policy: p, Actuator: &actuator{},
		State: NewState(t0.Add(-5 * time.Second)), Clock: clk, Log: quiet()})
	if why := m.Needs(clk.Now()); why != "the agent's warm-up" {
		t.Errorf("in the agent's warm-up: %q", why)
	}
	clk.Step(6 * time.Second)
	if why := m.Needs(clk.Now()); why != "" {
		t.Errorf("after the agent's warm-up, no container in its own: %q", why)
	}
	m = NewManager(Options{Samples: latestSample{snap(t0, fresh)}, Policy: p, Actuator: &actuator{},
		State: NewState(t0.Add(-time.Hour)), Clock: &fakeClock{now: t0}, Log: quiet()})
	if why := m.Needs(t0); !strings.Contains(why, "a container of") || !strings.Contains(why, "in its warm-up") {
		t.Errorf("a container in its warm-up, not judged yet: %q", why)
	}
	if why := m.Needs(t0.Add(p.ContainerWarmup.Duration)); why != "" {
		t.Errorf("after the container's warm-up: %q", why)
	}
}

// The checkpoint survives a restart, the agent down for a minute: the CG over for 5 s
// before (warned, throttled), seen over again after a 2 s warm-up, is killed once seen
// over 15 s, at 79 s; the time down and the warm-up are not seen. The node's clock set
// forward or back meanwhile changes nothing of that: not killed at once (forward), nor
// a day later (back).
func TestCheckpointSurvivesARestart(t *testing.T) {
	for _, step := range []time.Duration{0, 24 * time.Hour, -24 * time.Hour} {
		t.Run(fmt.Sprint(step), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "enforcement.json")
			clk := &fakeClock{now: t0}
			act := &actuator{}
			m := NewManager(Options{Policy: noWarmup(), Actuator: act, State: NewState(t0.Add(-time.Hour)), Checkpoint: FileCheckpoint{Path: path}, Clock: clk, Log: quiet()})
			steps(m, clk, 7, nr1.Usage{4 * mb, 0, 0, 0})
			if got := act.Taken(); got != "warn/cg-a throttle/cg-a" {
				t.Fatalf("before the restart %q", got)
			}
			clk.Step(time.Minute + step)
			st, err := FileCheckpoint{Path: path}.Restore(clk.Now())
			if err != nil {
				t.Fatal(err)
			}
			st.SyncThrottles([]string{"a"})
			act2 := &actuator{}
			p := DefaultPolicy()
			p.Warmup = Duration{Duration: 2 * time.Second}
			m2 := NewManager(Options{Policy: p, Actuator: act2, State: st, Checkpoint: FileCheckpoint{Path: path}, Clock: clk, Log: quiet()})
			steps(m2, clk, 12, nr1.Usage{4 * mb, 0, 0, 0})
			if got := act2.Taken(); got != "" {
				t.Errorf("12 s after the restart: %q, want nothing yet", got)
			}
			steps(m2, clk, 1, nr1.Usage{4 * mb, 0, 0, 0})
			if got := act2.Taken(); got != "kill/cg-a" {
				t.Errorf("13 s after the restart: %q, want the kill the ladder had left", got)
			}
		})
	}
}

// published hands samples to a running manager one at a time.
type published struct {
	mu   sync.Mutex
	s    *view.Sample
	next chan struct{}
}

func (p *published) Load() (*view.Sample, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.s, p.next
}

func (p *published) publish(s *view.Sample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.s = s
	close(p.next)
	p.next = make(chan struct{})
}

// laneActuator blocks the kill of cg-a until released, recording each action as it ends.
type laneActuator struct {
	actuator
	release chan struct{}
}

func (l *laneActuator) Act(ctx context.Context, a Action) error {
	if a.Kind == Kill && a.Pod == "cg-a" {
		select {
		case <-l.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return l.actuator.Act(ctx, a)
}

// A kill slow to finish (a container slow to stop) delays neither the decision on a CG
// that goes over meanwhile nor its actions: each CG's actions keep their order, and the
// CGs' run beside each other.
func TestASlowActionDelaysNoOtherCG(t *testing.T) {
	clk := &fakeClock{now: t0}
	act := &laneActuator{release: make(chan struct{})}
	samples := &published{next: make(chan struct{})}
	m := NewManager(Options{Samples: samples, Policy: noWarmup(), Actuator: act, State: NewState(t0.Add(-time.Hour)), Clock: clk, Log: quiet()})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error)
	go func() { ran <- m.Run(ctx) }()
	hog, within := nr1.Usage{0, 0, 0, 20}, nr1.Usage{0, 0, 0, 7}
	samples.publish(snap(clk.Now(), cg("a", hog), cg("b", within)))
	waitTaken(t, act, "warn/cg-a")
	clk.Step(time.Second)
	samples.publish(snap(clk.Now(), cg("a", hog), cg("b", hog)))
	// cg-a's kill is under way; cg-b is warned and killed beside it.
	waitTaken(t, act, "warn/cg-a warn/cg-b kill/cg-b")
	close(act.release)
	waitTaken(t, act, "warn/cg-a warn/cg-b kill/cg-b kill/cg-a")
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if c := m.Counts(); c[Count{Kind: Kill}] != 2 || c[Count{Kind: Warn}] != 2 {
		t.Errorf("counts %v, want 2 warnings and 2 kills", c)
	}
}

// waitTaken waits until the actuator has taken want, in that order.
func waitTaken(t *testing.T, a *laneActuator, want string) {
	t.Helper()
	for range 500 {
		if a.Taken() == want {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("taken %q, want %q", a.Taken(), want)
}
