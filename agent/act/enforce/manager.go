// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Actuator carries out an action.
type Actuator interface {
	Act(ctx context.Context, a Action) error
}

// Samples gives the latest sample and a channel closed at the next.
type Samples interface {
	Load() (*view.Sample, <-chan struct{})
}

// Checkpointer keeps the state across the agent's restarts.
type Checkpointer interface {
	Save(st *State) error
}

// ErrEvictionRefused, wrapped in an actuator's error, makes the manager record the
// refusal so that the policy's fallback can apply.
var ErrEvictionRefused = errors.New("eviction refused")

// actionTimeout bounds an action's calls (CRI, API server, bpffs) beyond a kill's own
// grace period, so that a hung peer cannot wedge enforcement.
const actionTimeout = 15 * time.Second

// Manager runs Decide on every new sample, hands the actions to the actuator and feeds
// their outcomes back into the state.
type Manager struct {
	samples    Samples
	policy     Policy
	act        Actuator
	checkpoint Checkpointer
	clock      clock.PassiveClock
	log        *slog.Logger

	mu      sync.Mutex
	state   *State
	counts  map[Count]int
	lanes   map[string]*lane // by CG UID, while it has actions to take
	working sync.WaitGroup   // the lanes' goroutines
	busy    bool
	busyNow chan struct{} // closed when the state turns busy
}

// Count keys the manager's action counters.
type Count struct {
	Kind   Kind
	DryRun bool
	Failed bool
}

// Options are what a manager enforces with.
type Options struct {
	Samples  Samples
	Policy   Policy
	Actuator Actuator
	// State is where enforcement starts: a new state, or one restored from Checkpoint.
	State *State
	// Checkpoint saves the state after every step that acted; nil saves nothing.
	Checkpoint Checkpointer
	Clock      clock.PassiveClock
	Log        *slog.Logger
}

// NewManager returns a manager; nothing is decided until Run or Step.
func NewManager(o Options) *Manager {
	return &Manager{samples: o.Samples, policy: o.Policy, act: o.Actuator, checkpoint: o.Checkpoint, clock: o.Clock, log: o.Log, state: o.State,
		counts: map[Count]int{}, lanes: map[string]*lane{}, busyNow: make(chan struct{})}
}

// Counts returns the actions handed to the actuator since start.
func (m *Manager) Counts() map[Count]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[Count]int, len(m.counts))
	for k, v := range m.counts {
		out[k] = v
	}
	return out
}

// Breaches returns how many times a CG went over, per resource.
func (m *Manager) Breaches() nr1.PerResource[int] {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.Breaches
}

// Ladders returns where each CG's enforcement stands.
func (m *Manager) Ladders() []Ladder {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.Ladders(m.policy)
}

// Mode is whether actions are carried out.
func (m *Manager) Mode() Mode { return m.policy.Mode }

// Healthy fails when an action has been under way well past its deadline: a lane is
// wedged.
func (m *Manager) Healthy() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	for _, l := range m.lanes {
		if l.acting.IsZero() {
			continue
		}
		if d := now.Sub(l.acting); d > l.deadline+actionTimeout {
			return fmt.Errorf("enforcement stalled: one action under way for %s", d.Round(time.Second))
		}
	}
	return nil
}

// Needs says why samples must come at the interval now: a ladder under way
// (State.Busy), the agent's warm-up, or a container of the latest sample in its
// warm-up; what is in a warm-up is judged when it ends, on time only if samples keep
// coming. The latest sample, not the last judged: the cadence asks as soon as a sample
// is published, before this manager has judged it. "" when none.
func (m *Manager) Needs(now time.Time) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.state.Busy():
		return "a ladder is under way"
	case now.Sub(m.state.Started) < m.policy.Warmup.Duration:
		return "the agent's warm-up"
	case m.samples == nil:
		return ""
	}
	if snap, _ := m.samples.Load(); snap != nil {
		for _, cg := range snap.CGs {
			if inWarmup(now, cg, m.policy) {
				return fmt.Sprintf("a container of %s/%s is in its warm-up", cg.Namespace, cg.Name)
			}
		}
	}
	return ""
}

// TurnedBusy returns a channel closed when a ladder next starts: a sampler resting
// between samples must sample again for the ladder to keep its time.
func (m *Manager) TurnedBusy() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.busyNow
}

// Run acts on every new sample until ctx ends, then waits for the actions under way.
// A sample is decided as soon as it comes, whatever is being done: the actions of a CG
// are taken in their order, each CG's beside the others' (lanes), so that a slow kill of
// one CG delays neither the detection of another nor its action.
func (m *Manager) Run(ctx context.Context) error {
	defer m.working.Wait()
	var last *view.Sample
	for {
		snap, changed := m.samples.Load()
		if snap != nil && snap != last {
			last = snap
			m.step(ctx, snap)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// Step decides on one sample and takes its actions, returning once every one of them
// has its outcome recorded.
func (m *Manager) Step(ctx context.Context, snap *view.Sample) {
	m.step(ctx, snap).Wait()
}

// step decides on one sample and hands each action to its CG's lane; the WaitGroup is
// done once they all have their outcome.
func (m *Manager) step(ctx context.Context, snap *view.Sample) *sync.WaitGroup {
	m.mu.Lock()
	defer m.mu.Unlock()
	actions := Decide(m.clock.Now(), snap, m.state, m.policy)
	if busy := m.state.Busy(); busy != m.busy {
		m.busy = busy
		if busy {
			close(m.busyNow)
			m.busyNow = make(chan struct{})
		}
	}
	done := &sync.WaitGroup{}
	for _, a := range actions {
		done.Add(1)
		m.enqueue(ctx, a, done)
	}
	return done
}
