// SPDX-License-Identifier: Apache-2.0

package prevent

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Gated is the resource the gate holds CGs to: what one open takes, one queue.
const Gated = nr1.HypervisorQueue

// Count is a pod's budget as the gate holds it.
type Count struct {
	Booked, Held                      int64
	Granted, Refused, Released, Moves uint64
}

// Gate is the kernel's budget gate, keyed by a pod's v2 cgroup id.
type Gate interface {
	// Book books the pod with uid by its cgroup's id, taking the budget BookUID gave.
	Book(pod uint64, uid string, booked int64) error
	// BookUID books a pod whose cgroup is not made yet: the gate binds it as it is.
	BookUID(uid string, booked int64) error
	Forget(pod uint64) error
	ForgetUID(uid string) error
	Pods() []uint64
	UIDs() []string
	// UIDOf names the UID whose booking the pod's cgroup is bound to.
	UIDOf(pod uint64) (string, bool)
	Count(pod uint64) (Count, bool)
	// Reclaim gives back what the count holds for descriptions gone since, which the
	// kernel does itself only at an open past a booking.
	Reclaim() error
	// Settle sets the count to measured if it has not moved since moves.
	Settle(pod uint64, moves uint64, measured int64) bool
	Unknown() (allowed, refused uint64, err error)
}

// Events reports on a pod.
type Events interface {
	Event(namespace, pod, uid, eventType, reason, message string)
}

// ReasonRefused is the Event reason of the gate's refusals.
const ReasonRefused = "NR1OpenRefused"

// Options shape a Keeper.
type Options struct {
	Gate   Gate
	Events Events // nil: refusals are only logged
	// EventGap is the least time between two refusal Events on one pod: the refusals
	// in between are told together in the next.
	EventGap time.Duration
	Clock    clock.PassiveClock
	Log      *slog.Logger
}

// Keeper books the gate from the samples and tells what it refused.
type Keeper struct {
	opts Options

	mu            sync.Mutex
	before        map[uint64]uint64    // a pod's moves when the sample began
	pods          map[uint64]*pod      // what the gate books, by the pod's cgroup id
	early         map[string]time.Time // pods booked by UID, and when a sample last saw them
	earlyCgroups  map[uint64]string    // the cgroups of those made before they were booked
	adopted       map[uint64]time.Time // an earlier agent's bookings no sample placed yet, since when
	falseRefusals uint64
	fixes         uint64
	reclaimed     bool // in the sample After is keeping
}

// pod is a booked pod as the keeper follows it.
type pod struct {
	namespace, name, uid string
	count                Count
	measured             int64 // at the last sample that measured it; -1 when unknown
	told                 uint64
	toldAt               time.Time
	settledRefused       uint64 // refusals up to the last settle
}

// New keeps opts.Gate.
func New(opts Options) *Keeper {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Keeper{opts: opts, pods: map[uint64]*pod{}, early: map[string]time.Time{}, earlyCgroups: map[uint64]string{}, adopted: map[uint64]time.Time{}}
}

// adoptedLife is how long a booking an earlier agent made may go unplaced by this
// agent's samples before it is forgotten: the first samples after a start may not place
// a live pod yet (a container whose cgroup the runtime has not told), and a pod
// forgotten meanwhile would open as one the gate does not know.
const adoptedLife = 30 * time.Second

// earlyBookingLife is how long a pod booked by its UID may go unseen by the samples
// before its booking is dropped: a pod deleted before it ran leaves one. (A pod the
// samples saw go is forgotten with its cgroup.)
const earlyBookingLife = 10 * time.Minute

// BookPod books the pod with uid before it runs, from what a stage learns of it then
// (DRA's prepare step): the gate then holds its first process to its booking. cgroup
// is the id of the pod's cgroup when it is made already, 0 otherwise: the gate binds
// it as it is made. The samples take the pod over once they see it.
func (k *Keeper) BookPod(uid string, cgroup uint64, queues int64) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, booked := k.opts.Gate.Count(cgroup); cgroup != 0 && booked {
		// Booked already (an earlier agent's samples): a booking by UID would take a
		// slot the cgroup never uses.
		return k.opts.Gate.Book(cgroup, uid, queues)
	}
	if err := k.opts.Gate.BookUID(uid, queues); err != nil {
		return err
	}
	k.early[uid] = k.opts.Clock.Now()
	if cgroup == 0 {
		return nil
	}
	// Not forgotten for want of a sample of it, while its booking by UID lives.
	k.earlyCgroups[cgroup] = uid
	return k.opts.Gate.Book(cgroup, uid, queues)
}

// Knows says whether the pod with uid is booked: by UID before it ran, or by the samples.
func (k *Keeper) Knows(uid string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.early[uid]; ok {
		return true
	}
	for _, p := range k.pods {
		if p.uid == uid {
			return true
		}
	}
	return false
}

// Before is called as a sample begins: a pod whose count has not moved from here to
// the end of the measurement was quiet while it was measured.
func (k *Keeper) Before() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.before = map[uint64]uint64{}
	for _, id := range k.opts.Gate.Pods() {
		if c, ok := k.opts.Gate.Count(id); ok {
			k.before[id] = c.Moves
		}
	}
}

// After books, settles and forgets from the sample s, and tells what was refused.
func (k *Keeper) After(s *view.Sample) {
	if s == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reclaimed = false
	seen, live := map[uint64]bool{}, map[string]bool{}
	for _, m := range s.CGs {
		if m.Ready {
			live[m.UID] = true
		}
		if !m.Ready || len(m.PodCgroupIDs) == 0 {
			continue
		}
		id := m.PodCgroupIDs[0]
		seen[id] = true
		if err := k.keep(id, m); err != nil {
			k.opts.Log.Error("budget gate", "namespace", m.Namespace, "pod", m.Name, "err", err)
		}
	}
	if !s.RuntimeConnected {
		return // its pods are the last ones seen: none is known to be gone
	}
	k.dropEarly(s)
	booked := k.opts.Gate.Pods()
	// An adopted booking a UID's took with it (dropEarly) is no longer the gate's.
	for id := range k.adopted {
		if !slices.Contains(booked, id) {
			delete(k.adopted, id)
		}
	}
	for _, id := range booked {
		// An earlier agent's booking of a cgroup bound to a UID this agent keeps (its pod
		// not Ready yet, a sandbox slow to start): kept as long as the UID's, as this
		// agent's own would be.
		if _, known := k.earlyCgroups[id]; !known && k.pods[id] == nil {
			if uid, ok := k.opts.Gate.UIDOf(id); ok {
				if _, early := k.early[uid]; early {
					k.earlyCgroups[id] = uid
				}
			}
		}
		if uid, ok := k.earlyCgroups[id]; ok {
			if _, booked := k.early[uid]; booked && !seen[id] {
				continue
			}
			delete(k.earlyCgroups, id)
		}
		// A live pod whose cgroup this sample did not find keeps its booking: forgotten,
		// its count would start again from a measurement, and what it holds now would go
		// uncounted when it is closed.
		if seen[id] || (k.pods[id] != nil && live[k.pods[id].uid]) {
			delete(k.adopted, id)
			continue
		}
		if k.pods[id] == nil {
			since, ok := k.adopted[id]
			if !ok {
				k.adopted[id] = k.opts.Clock.Now()
			}
			if !ok || k.opts.Clock.Since(since) < adoptedLife {
				continue
			}
		}
		if err := k.opts.Gate.Forget(id); err != nil {
			k.opts.Log.Error("budget gate", "err", err)
			continue
		}
		delete(k.pods, id)
		delete(k.adopted, id)
	}
}

// dropEarly forgets the pods booked by UID that the samples have not seen for the
// booking's life: a pod deleted before it ran leaves one. A booking an earlier agent
// made counts from this agent's first look at it.
func (k *Keeper) dropEarly(s *view.Sample) {
	seen := map[string]bool{}
	for _, m := range s.CGs {
		seen[m.UID] = true
	}
	now := k.opts.Clock.Now()
	for _, uid := range k.opts.Gate.UIDs() {
		at, ours := k.early[uid]
		switch {
		case seen[uid] || !ours:
			k.early[uid] = now
		case now.Sub(at) >= earlyBookingLife:
			if err := k.opts.Gate.ForgetUID(uid); err != nil {
				k.opts.Log.Error("budget gate", "err", err)
				continue
			}
			delete(k.early, uid)
		}
	}
}

// keep books the CG m, whose pod's cgroup is id, settles its count to what was measured
// and tells what was refused since the last time.
func (k *Keeper) keep(id uint64, m *view.Measured) error {
	c, booked := k.opts.Gate.Count(id)
	if m.AllocationKnown {
		want := int64(m.Allocation[Gated]) // a queue's unit is one handle
		if !booked || c.Booked != want {
			if err := k.opts.Gate.Book(id, m.UID, want); err != nil {
				return fmt.Errorf("booking %d queues of cgroup %d: %w", want, id, err)
			}
		}
		if !booked {
			// A new slot's count has not moved: opens let through uncounted before it
			// was booked are what this measurement saw.
			k.before[id] = 0
		}
		c, booked = k.opts.Gate.Count(id)
	}
	if !booked {
		return nil // not known yet: the gate follows its policy for unknown pods
	}
	p := k.pods[id]
	if p == nil {
		p = &pod{told: c.Refused, settledRefused: c.Refused}
		k.pods[id] = p
	}
	p.namespace, p.name, p.uid = m.Namespace, m.Name, m.UID
	p.measured = -1
	if m.UsageUncertain == "" {
		measured := int64(m.Usage[Gated])
		p.measured = measured
		if c.Held != measured && !k.reclaimed {
			// What went between Before and the measurement is given back first, moving
			// the counts it concerns, so that no settle lowers a count that a later
			// reclaim lowers again. It walks every charge of the node: only a sample
			// with a count to settle pays it.
			if err := k.opts.Gate.Reclaim(); err != nil {
				return fmt.Errorf("before settling cgroup %d: %w", id, err)
			}
			k.reclaimed = true
			c, _ = k.opts.Gate.Count(id)
		}
		if moves, ok := k.before[id]; ok && c.Held != measured && k.opts.Gate.Settle(id, moves, measured) {
			k.fixes++
			if c.Held > measured && measured < c.Booked {
				// The count was high: what it refused since the last settle, the pod
				// holding less than it booked, may have fit.
				k.falseRefusals += c.Refused - p.settledRefused
			}
			c.Held = measured
		}
		if moves, ok := k.before[id]; ok && moves == c.Moves {
			p.settledRefused = c.Refused
		}
	}
	p.count = c
	k.tell(p)
	return nil
}

// tell reports the refusals not told yet, at most one Event per gap.
func (k *Keeper) tell(p *pod) {
	n := p.count.Refused - p.told
	now := k.opts.Clock.Now()
	if n == 0 || (!p.toldAt.IsZero() && now.Sub(p.toldAt) < k.opts.EventGap) {
		return
	}
	msg := fmt.Sprintf("the kernel refused %d open(s) of %s: the pod holds %d of the %d it booked; %s",
		n, Gated.Name(), p.count.Held, p.count.Booked, p.cause())
	k.opts.Log.Info("budget gate refused", "namespace", p.namespace, "pod", p.name, "refused", n, "held", p.count.Held, "booked", p.count.Booked, "measured", p.measured)
	if k.opts.Events != nil {
		k.opts.Events.Event(p.namespace, p.name, p.uid, "Warning", ReasonRefused, msg)
	}
	p.told, p.toldAt = p.count.Refused, now
}

// cause says why the gate counted the pod at its booking, as the last measurement sees
// it: so that a refusal of a pod that measured within its booking says so.
func (p *pod) cause() string {
	switch {
	case p.measured < 0:
		return "its holdings were not measured in full at the last sample"
	case p.measured < min(p.count.Held, p.count.Booked):
		return fmt.Sprintf("measured holding %d: the count is ahead by what was closed since and not yet freed, "+
			"or opened where the gate cannot see the open end (io_uring, a traced process); it is set to the measurement when the pod is quiet",
			p.measured)
	}
	return fmt.Sprintf("measured holding %d", p.measured)
}

// Booked is a pod as the gate counts it, for the metrics.
type Booked struct {
	Namespace, Pod, UID string
	Count
	// Mismatch is the gate's count less what the last sample measured, 0 when it was
	// not measured.
	Mismatch int64
}

// Booked lists the pods the gate books, ordered by namespace and name.
func (k *Keeper) Booked() []Booked {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]Booked, 0, len(k.pods))
	for _, id := range slices.Sorted(maps.Keys(k.pods)) {
		p := k.pods[id]
		b := Booked{Namespace: p.namespace, Pod: p.name, UID: p.uid, Count: p.count}
		if p.measured >= 0 {
			b.Mismatch = p.count.Held - p.measured
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Booked) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod))
	})
	return out
}

// Totals are the node's counts: corrections of the gate's count to a measurement, the
// refusals a measurement found within the booking, and the opens by unknown pods.
func (k *Keeper) Totals() (fixes, falseRefusals, unknownAllowed, unknownRefused uint64) {
	k.mu.Lock()
	fixes, falseRefusals = k.fixes, k.falseRefusals
	k.mu.Unlock()
	unknownAllowed, unknownRefused, err := k.opts.Gate.Unknown()
	if err != nil {
		k.opts.Log.Error("budget gate", "err", err)
	}
	return fixes, falseRefusals, unknownAllowed, unknownRefused
}
