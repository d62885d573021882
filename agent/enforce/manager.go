package enforce

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/sampler"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Actuator carries out an action.
type Actuator interface {
	Act(ctx context.Context, a Action) error
}

// Samples gives the latest sample and a channel closed at the next.
type Samples interface {
	Load() (*sampler.Snapshot, <-chan struct{})
}

// ErrEvictionRefused, wrapped in an actuator's error, makes the manager record the
// refusal so that the policy's fallback can apply.
var ErrEvictionRefused = errors.New("eviction refused")

// Manager runs Decide on every new sample and hands the actions to the actuator.
type Manager struct {
	samples Samples
	policy  Policy
	act     Actuator
	now     func() time.Time
	log     *slog.Logger

	mu     sync.Mutex
	state  *State
	counts map[Count]int
}

// Count keys the manager's action counters.
type Count struct {
	Kind   Kind
	DryRun bool
	Failed bool
}

// NewManager starts enforcement now; throttled lists the CGs (by UID) a previous run of
// the agent left throttled, so that they are lifted when back under and never doubled.
func NewManager(samples Samples, policy Policy, act Actuator, now func() time.Time, throttled []string, log *slog.Logger) *Manager {
	st := NewState(now())
	for _, uid := range throttled {
		st.cgs[uid] = &cgState{throttled: true}
	}
	return &Manager{samples: samples, policy: policy, act: act, now: now, log: log, state: st, counts: map[Count]int{}}
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
func (m *Manager) Breaches() [nr1.NumResources]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.Breaches
}

// Run acts on every new sample until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	var last *sampler.Snapshot
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

// Step decides and acts on one sample.
func (m *Manager) Step(ctx context.Context, snap *sampler.Snapshot) {
	m.mu.Lock()
	now := m.now()
	actions := Decide(now, snap, m.state, m.policy)
	m.mu.Unlock()
	for _, a := range actions {
		err := m.act.Act(ctx, a)
		m.mu.Lock()
		m.counts[Count{Kind: a.Kind, DryRun: a.DryRun, Failed: err != nil}]++
		if errors.Is(err, ErrEvictionRefused) {
			m.state.EvictionRefused(a.UID, a.Resource, now)
		}
		m.mu.Unlock()
	}
}
