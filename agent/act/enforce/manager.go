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

	mu       sync.Mutex
	state    *State
	counts   map[Count]int
	acting   time.Time // when the action under way started; zero between actions
	deadline time.Duration
	busy     bool
	busyNow  chan struct{} // closed when the state turns busy
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
		counts: map[Count]int{}, busyNow: make(chan struct{})}
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

// Healthy fails when an action has been under way well past its deadline: the loop is
// wedged, and only a restart of the agent (by the kubelet's liveness probe) frees it.
func (m *Manager) Healthy() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.acting.IsZero() {
		return nil
	}
	if d := m.clock.Now().Sub(m.acting); d > m.deadline+actionTimeout {
		return fmt.Errorf("enforcement stalled: one action under way for %s", d.Round(time.Second))
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

// Run acts on every new sample until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	var last *view.Sample
	for {
		snap, changed := m.samples.Load()
		if snap != nil && snap != last {
			last = snap
			m.Step(ctx, snap)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// Step decides and acts on one sample; every action's outcome is recorded before the
// next is taken.
func (m *Manager) Step(ctx context.Context, snap *view.Sample) {
	m.mu.Lock()
	actions := Decide(m.clock.Now(), snap, m.state, m.policy)
	if busy := m.state.Busy(); busy != m.busy {
		m.busy = busy
		if busy {
			close(m.busyNow)
			m.busyNow = make(chan struct{})
		}
	}
	m.mu.Unlock()
	for _, a := range actions {
		// Earlier actions of this step may have been slow: what the sample said may no
		// longer hold. A step whose sample is too old now is undone, for a fresh sample to
		// decide again; lifting a throttle and reporting an annotation always go.
		if age := m.clock.Now().Sub(a.Sampled); age > m.policy.MaxSampleAge.Duration && a.Kind != Unthrottle && !reportOnly(a.Kind) {
			m.mu.Lock()
			m.state.undo(a)
			m.mu.Unlock()
			m.log.Info("action left for a fresh sample: its sample is too old now", "action", a.Kind, "namespace", a.Namespace, "pod", a.Pod,
				"age", age.Round(time.Millisecond), "maxSampleAge", m.policy.MaxSampleAge.Duration)
			continue
		}
		err := m.do(ctx, a)
		m.mu.Lock()
		failed := m.state.Outcome(a, err, m.clock.Now())
		m.counts[Count{Kind: a.Kind, DryRun: a.DryRun, Failed: failed}]++
		m.mu.Unlock()
	}
	if len(actions) > 0 && m.checkpoint != nil {
		m.mu.Lock()
		m.state.saved = m.clock.Now()
		err := m.checkpoint.Save(m.state)
		m.mu.Unlock()
		if err != nil {
			m.log.Error("enforcement state not saved: a restarted agent would start its ladders again", "err", err)
		}
	}
}

func (m *Manager) do(ctx context.Context, a Action) error {
	d := actionTimeout
	if a.Kind == Kill {
		d += m.policy.KillTimeout.Duration
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	m.mu.Lock()
	m.acting, m.deadline = m.clock.Now(), d
	m.mu.Unlock()
	err := m.act.Act(ctx, a)
	m.mu.Lock()
	m.acting = time.Time{}
	m.mu.Unlock()
	return err
}
