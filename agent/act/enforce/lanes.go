// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"context"
	"sync"
	"time"
)

// lane is one CG's actions, taken one after the other in the order decided: a warn
// before the throttle, a throttle before the kill. Lanes run beside each other.
type lane struct {
	queue    []queued
	acting   time.Time // when the action under way started; zero between actions
	deadline time.Duration
}

type queued struct {
	a    Action
	done *sync.WaitGroup
}

// enqueue adds a to its CG's lane, starting the lane when it had nothing to do. m.mu is
// held.
func (m *Manager) enqueue(ctx context.Context, a Action, done *sync.WaitGroup) {
	l := m.lanes[a.UID]
	if l == nil {
		l = &lane{}
		m.lanes[a.UID] = l
		m.working.Add(1)
		go m.drain(ctx, a.UID, l)
	}
	l.queue = append(l.queue, queued{a, done})
}

// drain takes the lane's actions until it has none left, then ends it.
func (m *Manager) drain(ctx context.Context, uid string, l *lane) {
	defer m.working.Done()
	for {
		m.mu.Lock()
		if len(l.queue) == 0 {
			delete(m.lanes, uid)
			m.mu.Unlock()
			return
		}
		q := l.queue[0]
		l.queue = l.queue[1:]
		m.mu.Unlock()
		m.take(ctx, l, q.a)
		q.done.Done()
	}
}

// take carries out one action and records its outcome, saving the state.
func (m *Manager) take(ctx context.Context, l *lane, a Action) {
	// Earlier actions of this lane may have been slow: what the sample said may no
	// longer hold. An action whose sample is too old now is undone, for a fresh sample
	// to decide again; lifting a throttle and reporting an annotation always go.
	if age := m.clock.Now().Sub(a.Sampled); age > m.policy.MaxSampleAge.Duration && a.Kind != Unthrottle && !reportOnly(a.Kind) {
		m.mu.Lock()
		m.state.undo(a)
		m.mu.Unlock()
		m.log.Info("action left for a fresh sample: its sample is too old now", "action", a.Kind, "namespace", a.Namespace, "pod", a.Pod,
			"age", age.Round(time.Millisecond), "maxSampleAge", m.policy.MaxSampleAge.Duration)
		return
	}
	d := actionTimeout
	if a.Kind == Kill {
		d += m.policy.KillTimeout.Duration
	}
	actx, cancel := context.WithTimeout(ctx, d)
	m.mu.Lock()
	l.acting, l.deadline = m.clock.Now(), d
	m.mu.Unlock()
	err := m.act.Act(actx, a)
	cancel()
	m.mu.Lock()
	defer m.mu.Unlock()
	l.acting = time.Time{}
	failed := m.state.Outcome(a, err, m.clock.Now())
	m.counts[Count{Kind: a.Kind, DryRun: a.DryRun, Failed: failed}]++
	if m.checkpoint == nil {
		return
	}
	m.state.saved = m.clock.Now()
	if err := m.checkpoint.Save(m.state); err != nil {
		m.log.Error("enforcement state not saved: a restarted agent would start its ladders again", "err", err)
	}
}
