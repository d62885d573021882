// SPDX-License-Identifier: Apache-2.0

package allocation

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/internal/latest"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Lister reads the allocation table.
type Lister interface {
	List(ctx context.Context) (Table, error)
}

// Asker asks the kubelet about one pod: a small question whose answer says the kubelet
// still answers, without reading the whole table.
type Asker interface {
	Lister
	Ask(ctx context.Context, pod PodKey) error
}

// State is the last allocation table read and when.
type State struct {
	Table Table
	// Read is when the List that read Table began; zero until the first successful List.
	// A pod created after it may be missing from Table, or be another pod of the same
	// name: its allocation is not in Table yet.
	Read time.Time
}

// Options say how a tracker reads the kubelet.
type Options struct {
	Lister Lister
	// Interval is the time between reads, and the deadline of one Get.
	Interval time.Duration
	// OnDemand, when set, reads the whole table only when it may lack something.
	OnDemand *OnDemand
	Clock    clock.WithTicker
	Log      *slog.Logger
}

// OnDemand makes the tracker read the whole table only when it may lack something: at
// start, when Pods change and a pod the runtime runs is missing from the table or newer
// than it, every interval while that lasts or reads fail, after a failure, and at least
// every Refresh. Otherwise each sample has the kubelet vouch for the table (Vouch) by
// asking it about one listed pod, which answers in a few hundred bytes where a List of a
// node whose capacity is allocated is megabytes (one entry per unit): the kubelet's
// last answer is fresh for every sample either way. A pod's allocation cannot change
// while it lives, so a table that has every running pod, read after each was created,
// is current.
type OnDemand struct {
	Asker   Asker
	Refresh time.Duration
	Pods    Pods
}

// Pods are the pods the runtime runs, as a tracker reading on demand waits for them.
type Pods interface {
	// Changed returns a channel closed when the pods next change.
	Changed() <-chan struct{}
	// Awaits says whether a pod the runtime runs is missing from s or newer than it.
	Awaits(s State) bool
}

// Tracker keeps the kubelet's allocation table. The pod-resources API has no watch: the
// table is read every interval, or, OnDemand, only when it may have changed. Its
// stage's last success (Health) is when the kubelet last answered: a reader judges that
// age, since an allocation the kubelet no longer vouches for is as unknown as none.
type Tracker struct {
	lister   Lister
	interval time.Duration
	onDemand *OnDemand // nil: the whole table every interval
	clock    clock.WithTicker
	log      *slog.Logger

	stepping sync.Mutex // one read at a time: the reads' cadence and the samples both step

	mu         sync.Mutex
	failingNow chan struct{} // closed when reads start failing

	value *latest.Value[State]
	latest.View[State]
}

// NewTracker returns a tracker; nothing is read until Run or Refresh.
func NewTracker(o Options) *Tracker {
	value := latest.New(State{})
	return &Tracker{lister: o.Lister, interval: o.Interval, onDemand: o.OnDemand, clock: o.Clock, log: o.Log, value: value, View: value.View(), failingNow: make(chan struct{})}
}

// StartsFailing returns a channel closed when reads next start failing: a cadence at
// rest must sample again, for the allocations to age into unknown where they are shown.
func (t *Tracker) StartsFailing() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failingNow
}

// Needs says why samples must come at the interval: while the kubelet does not answer,
// its allocations age into unknown, and samples show and judge them so.
func (t *Tracker) Needs(time.Time) string {
	if _, err := t.Health(); err != nil {
		return "the kubelet's pod-resources API does not answer"
	}
	return ""
}

// Unread says why the kubelet must be read at the interval although it answers: a pod
// the runtime runs is not in the table yet. Only on demand; "" otherwise.
func (t *Tracker) Unread(time.Time) string {
	if t.onDemand == nil {
		return ""
	}
	if state, _ := t.Load(); t.onDemand.Pods.Awaits(state) {
		return "a pod the runtime runs is not in the kubelet's table yet"
	}
	return ""
}

// Step reads the kubelet once: the whole table, or, on demand, only what it may lack.
// Its cadence is the caller's: every interval, and at once when Wakes say so.
func (t *Tracker) Step(ctx context.Context) {
	t.stepping.Lock()
	defer t.stepping.Unlock()
	if t.onDemand == nil {
		t.Refresh(ctx)
		return
	}
	t.step(ctx)
}

// Vouch has the kubelet vouch for the table just before a sample, when the tracker
// reads on demand and the kubelet answers: the sample then judges an answer milliseconds
// old, and at rest the kubelet is asked once a sample, never between. It waits at most
// wait, so a kubelet that stops answering delays no sample by its deadline: the read
// goes on, and fails on its own. While reads fail, the tracker's own cadence retries
// them, and a sample takes the allocations as they are, aging into unknown. An answer
// younger than fresh vouches for the sample as it is: the question is asked all the
// same, for the next sample, and this one waits for nothing, so that a sample a change
// starts soon after another is not delayed by a kubelet slow to answer (one busy with
// a flood of a neighbour's fds, whose every fd its cAdvisor lists).
func (t *Tracker) Vouch(ctx context.Context, wait, fresh time.Duration) {
	answered, failing := t.Health()
	if t.onDemand == nil || failing != nil {
		return
	}
	asked := t.clock.Now()
	if asked.Sub(answered) < fresh {
		wait = 0
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.stepping.Lock()
		defer t.stepping.Unlock()
		// A read that answered while this one waited its turn vouches as well; one that
		// failed leaves the retries to the tracker's cadence, a List's deadline to no sample.
		if answered, err := t.Health(); err != nil || !answered.Before(asked) {
			return
		}
		t.step(ctx)
	}()
	if wait <= 0 {
		return
	}
	timer := t.clock.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C():
	case <-ctx.Done():
	}
}

// Wakes are what should have the tracker step at once: the runtime's pods changing,
// when it reads on demand (a new pod's allocation is in no table read before it), and
// its reads starting to fail, which its cadence retries every interval.
func (t *Tracker) Wakes() []func() <-chan struct{} {
	if t.onDemand == nil {
		return nil
	}
	return []func() <-chan struct{}{t.onDemand.Pods.Changed, t.StartsFailing}
}

// step reads the table when it may lack something, and otherwise asks about one pod,
// reading the table after all if the kubelet answers that it does not have the pod.
func (t *Tracker) step(ctx context.Context) {
	state, _ := t.Load()
	// The pod asked about is the table's smallest, the same one while it is listed, so
	// that a "not found" answer means a change.
	pod := state.Table.anyPod()
	if _, failing := t.Health(); failing != nil || state.Read.IsZero() || pod == (PodKey{}) ||
		t.clock.Since(state.Read) >= t.onDemand.Refresh || t.onDemand.Pods.Awaits(state) {
		t.Refresh(ctx)
		return
	}
	// The kubelet answers a Get in milliseconds: one that takes an interval is a kubelet
	// that does not answer, and the allocations must start aging at once, not after a
	// List's longer deadline.
	askCtx, cancel := context.WithTimeout(ctx, t.interval)
	err := t.onDemand.Asker.Ask(askCtx, pod)
	cancel()
	if ctx.Err() != nil {
		return
	}
	switch status.Code(err) {
	case codes.OK:
		t.value.Succeeded(t.clock.Now())
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled:
		t.failed(err)
	default:
		// An answer, but not about the pod (gone, or another of its name): the table has
		// changed.
		t.log.Debug("pod-resources Get answered with an error; reading the table", "pod", pod, "err", err)
		t.Refresh(ctx)
	}
}

// Refresh reads the table now. A failure keeps the last table with its read time, so
// that it ages into unknown, and records the error.
func (t *Tracker) Refresh(ctx context.Context) {
	began := t.clock.Now()
	table, err := t.lister.List(ctx)
	if ctx.Err() != nil {
		return // the agent stops: no failure of the kubelet's
	}
	if err != nil {
		t.failed(err)
		return
	}
	_, failing := t.Health()
	if failing != nil {
		t.log.Info("pod-resources API available again")
	}
	// A table like the last (every refresh at rest) is renewed without waking its
	// readers: the sampler samples what a new table changes, not the same one again. The
	// first after an outage wakes them: the allocations are known again.
	if last, _ := t.Load(); failing == nil && !last.Read.IsZero() && last.Table.Equal(table) {
		t.value.Renew(t.clock.Now(), State{Table: table, Read: began})
		return
	}
	t.value.Publish(t.clock.Now(), State{Table: table, Read: began})
}

// failed records that the kubelet did not answer, telling StartsFailing's readers when
// it is the first failure since an answer.
func (t *Tracker) failed(err error) {
	_, failing := t.Health()
	t.value.Fail(err)
	if failing != nil {
		return
	}
	t.log.Warn("pod-resources API unavailable; allocations age into unknown", "err", err)
	t.mu.Lock()
	close(t.failingNow)
	t.failingNow = make(chan struct{})
	t.mu.Unlock()
}

// anyPod is the pod of the table holding the fewest units, the first in key order among
// those (the same one while it is listed, so that a "not found" answer means a change):
// the kubelet's answer about it is the smallest. Zero for an empty table.
func (t Table) anyPod() PodKey {
	var first PodKey
	var least nr1.Units
	for k, containers := range t {
		var units nr1.Units
		for _, c := range containers {
			for _, r := range nr1.All {
				units += c.Units[r]
			}
			units += nr1.Units(len(c.Claims))
		}
		if first == (PodKey{}) || units < least || (units == least && (k.Namespace < first.Namespace || (k.Namespace == first.Namespace && k.Name < first.Name))) {
			first, least = k, units
		}
	}
	return first
}
