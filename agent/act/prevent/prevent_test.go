// SPDX-License-Identifier: Apache-2.0

package prevent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// fakeGate keeps budgets as the kernel's gate does: an open moves a count, Settle sets
// it only when nothing moved it since.
type fakeGate struct {
	counts                  map[uint64]*Count
	uids                    map[string]*Count
	gone                    map[*Count]int64 // closed, not given back yet
	unknownAllowed, refused uint64
	reclaims                int
}

func newFakeGate() *fakeGate {
	return &fakeGate{counts: map[uint64]*Count{}, uids: map[string]*Count{}, gone: map[*Count]int64{}}
}

func (g *fakeGate) Book(pod uint64, uid string, booked int64) error {
	if c, ok := g.counts[pod]; ok {
		c.Booked = booked
		return nil
	}
	if c, ok := g.uids[uid]; ok {
		g.counts[pod] = c
		c.Booked = booked
		return nil
	}
	g.counts[pod] = &Count{Booked: booked}
	return nil
}

func (g *fakeGate) BookUID(uid string, booked int64) error {
	if c, ok := g.uids[uid]; ok {
		c.Booked = booked
		return nil
	}
	g.uids[uid] = &Count{Booked: booked}
	return nil
}

func (g *fakeGate) Forget(pod uint64) error {
	for uid, c := range g.uids {
		if c == g.counts[pod] {
			delete(g.uids, uid)
		}
	}
	delete(g.counts, pod)
	return nil
}

func (g *fakeGate) ForgetUID(uid string) error { delete(g.uids, uid); return nil }

func (g *fakeGate) UIDs() []string {
	var out []string
	for uid := range g.uids {
		out = append(out, uid)
	}
	return out
}

func (g *fakeGate) UIDOf(pod uint64) (string, bool) {
	for uid, c := range g.uids {
		if c == g.counts[pod] {
			return uid, true
		}
	}
	return "", false
}

func (g *fakeGate) Pods() []uint64 {
	var out []uint64
	for id := range g.counts {
		out = append(out, id)
	}
	return out
}

func (g *fakeGate) Count(pod uint64) (Count, bool) {
	c, ok := g.counts[pod]
	if !ok {
		return Count{}, false
	}
	return *c, true
}

func (g *fakeGate) Settle(pod uint64, moves uint64, measured int64) bool {
	c, ok := g.counts[pod]
	if !ok || c.Moves != moves {
		return false
	}
	c.Held = measured
	return true
}

func (g *fakeGate) Unknown() (uint64, uint64, error) { return g.unknownAllowed, g.refused, nil }

func (g *fakeGate) Reclaim() error {
	g.reclaims++
	for c, n := range g.gone {
		c.Held -= n
		c.Released += uint64(n)
		c.Moves++
	}
	clear(g.gone)
	return nil
}

// close is a process of the pod closing a queue: the kernel sees nothing until a reclaim.
func (g *fakeGate) close(pod uint64) { g.gone[g.counts[pod]]++ }

// open is a process of the pod opening a queue, as the device program answers it.
func (g *fakeGate) open(pod uint64) bool {
	c := g.counts[pod]
	if c.Held >= c.Booked {
		_ = g.Reclaim()
	}
	if c.Held >= c.Booked {
		c.Refused++
		return false
	}
	c.Held++
	c.Granted++
	c.Moves++
	return true
}

type events struct{ got []string }

func (e *events) Event(namespace, pod, _, eventType, reason, message string) {
	e.got = append(e.got, fmt.Sprintf("%s/%s %s %s: %s", namespace, pod, eventType, reason, message))
}

// cg is a ready CG whose pod's cgroup is id, booking booked queues and holding held.
func cg(id uint64, booked, held int64) *view.Measured {
	var alloc nr1.Amounts
	alloc[nr1.HypervisorQueue] = nr1.Units(booked)
	var usage nr1.Usage
	usage[nr1.HypervisorQueue] = nr1.Base(held)
	return &view.Measured{
		CG:    &view.CG{UID: fmt.Sprint("uid-", id), Namespace: "ns", Name: fmt.Sprint("cg-", id), Ready: true, AllocationKnown: true, Allocation: alloc, PodCgroupIDs: []uint64{id, id + 1000}},
		Usage: usage,
	}
}

// endedCG is cg whose pod ended: its sandbox no longer ready.
func endedCG(id uint64, booked, held int64) *view.Measured {
	m := cg(id, booked, held)
	m.Ready = false
	return m
}

// look is one sample of cgs as the keeper follows it.
func look(k *Keeper, cgs ...*view.Measured) {
	k.Before()
	k.After(sample(cgs...))
}

func sample(cgs ...*view.Measured) *view.Sample {
	return &view.Sample{Inputs: view.Inputs{RuntimeConnected: true}, CGs: cgs}
}

func newKeeper(g *fakeGate, ev *events, clk *clocktesting.FakeClock) *Keeper {
	return New(Options{Gate: g, Events: ev, EventGap: time.Minute, Clock: clk})
}

// A CG is booked by its pod's cgroup once its allocation is known, and forgotten when
// its pod ends or is gone; a CG whose allocation is not known is left to the gate's
// policy; a runtime out of reach forgets nobody.
func TestKeeperBooksWhatIsKnownAndForgetsWhatIsGone(t *testing.T) {
	g, clk := newFakeGate(), clocktesting.NewFakeClock(time.Unix(0, 0))
	k := newKeeper(g, &events{}, clk)
	unknown := cg(2, 4, 0)
	unknown.AllocationKnown = false
	k.Before()
	k.After(sample(cg(1, 7, 0), unknown))
	if c, ok := g.Count(1); !ok || c.Booked != 7 {
		t.Fatalf("pod 1: %+v %v, want 7 booked", c, ok)
	}
	if _, ok := g.Count(2); ok {
		t.Fatal("a CG whose allocation is not known was booked")
	}
	if _, ok := g.Count(1001); ok {
		t.Fatal("a cgroup below the pod's was booked as a pod")
	}
	disconnected := sample()
	disconnected.RuntimeConnected = false
	k.Before()
	k.After(disconnected)
	if _, ok := g.Count(1); !ok {
		t.Fatal("forgotten while the runtime was out of reach")
	}
	// Between its init containers and the others no container of the pod runs: a sample
	// that found no cgroup for it leaves its booking, count and all, as it was.
	between := cg(1, 7, 0)
	between.PodCgroupIDs = nil
	if !g.Settle(1, 0, 3) {
		t.Fatal("setting pod 1's count")
	}
	k.Before()
	k.After(sample(between))
	if c, ok := g.Count(1); !ok || c.Booked != 7 || c.Held != 3 {
		t.Fatalf("a live pod with no cgroup in a sample: %+v %v, want still booked 7, holding 3", c, ok)
	}
	look(k, endedCG(1, 7, 0))
	if _, ok := g.Count(1); ok {
		t.Fatal("an ended pod is still booked")
	}
	if len(k.Booked()) != 0 {
		t.Fatalf("keeper still lists %+v", k.Booked())
	}
}

// A quiet pod's count is set to what was measured; one that moved while it was
// measured, or whose usage is only a lower bound, keeps the kernel's count.
func TestKeeperSettlesOnlyWhatWasQuiet(t *testing.T) {
	g, clk := newFakeGate(), clocktesting.NewFakeClock(time.Unix(0, 0))
	k := newKeeper(g, &events{}, clk)
	k.Before()
	k.After(sample(cg(1, 7, 3))) // opened before it was booked: settled at once
	if c, _ := g.Count(1); c.Held != 3 {
		t.Fatalf("new pod: held %d, want the 3 measured", c.Held)
	}
	g.counts[1].Held = 5 // a description dropped where no tracepoint saw it
	k.Before()
	k.After(sample(cg(1, 7, 3)))
	if c, _ := g.Count(1); c.Held != 3 {
		t.Fatalf("quiet pod: held %d, want 3", c.Held)
	}
	k.Before()
	g.open(1) // while the footprint is taken
	k.After(sample(cg(1, 7, 3)))
	if c, _ := g.Count(1); c.Held != 4 {
		t.Fatalf("a pod that moved: held %d, want the kernel's 4", c.Held)
	}
	uncertain := cg(1, 7, 1)
	uncertain.UsageUncertain = "scan ran out of time"
	k.Before()
	k.After(sample(uncertain))
	if c, _ := g.Count(1); c.Held != 4 {
		t.Fatalf("usage a lower bound: held %d, want the kernel's 4", c.Held)
	}
	fixes, falseRefusals, _, _ := k.Totals()
	if fixes != 2 || falseRefusals != 0 {
		t.Fatalf("%d corrections and %d false refusals, want 2 and 0", fixes, falseRefusals)
	}
	if b := k.Booked(); len(b) != 1 || b[0].Mismatch != 0 || b[0].Held != 4 {
		t.Fatalf("booked %+v", b)
	}
}

// Refusals the gate made while its count was high, the pod in fact holding less than
// it booked, are counted false; those of a pod at its booking are not.
func TestKeeperCountsFalseRefusals(t *testing.T) {
	g, clk := newFakeGate(), clocktesting.NewFakeClock(time.Unix(0, 0))
	k := newKeeper(g, &events{}, clk)
	k.Before()
	k.After(sample(cg(1, 2, 0)))
	g.open(1)
	g.open(1)
	g.open(1) // refused at its booking: true
	k.Before()
	k.After(sample(cg(1, 2, 2)))
	g.counts[1].Held = 2 // one of the two dropped unseen: the count is high
	g.open(1)
	g.open(1) // both refused, one would have fit
	k.Before()
	k.After(sample(cg(1, 2, 1)))
	_, falseRefusals, _, _ := k.Totals()
	if falseRefusals != 2 {
		t.Fatalf("%d false refusals, want the 2 made on a high count", falseRefusals)
	}
	if c, _ := g.Count(1); c.Held != 1 || c.Refused != 3 {
		t.Fatalf("count %+v", c)
	}
}

// Each pod's refusals are told in one Event per gap, the count of those in between
// carried into the next.
func TestKeeperTellsRefusalsAtMostOncePerGap(t *testing.T) {
	g, clk := newFakeGate(), clocktesting.NewFakeClock(time.Unix(0, 0))
	ev := &events{}
	k := newKeeper(g, ev, clk)
	k.Before()
	k.After(sample(cg(1, 1, 0)))
	g.open(1)
	for range 3 {
		g.open(1)
	}
	k.Before()
	k.After(sample(cg(1, 1, 1)))
	g.open(1)
	clk.Step(30 * time.Second)
	k.Before()
	k.After(sample(cg(1, 1, 1)))
	if len(ev.got) != 1 || !strings.Contains(ev.got[0], "refused 3 open(s) of neureality.ai/ai_hypervisor_queue: the pod holds 1 of the 1 it booked; measured holding 1") ||
		!strings.Contains(ev.got[0], "Warning "+ReasonRefused) {
		t.Fatalf("events %q, want one telling 3", ev.got)
	}
	g.open(1)
	clk.Step(31 * time.Second)
	k.Before()
	k.After(sample(cg(1, 1, 1)))
	if len(ev.got) != 2 || !strings.Contains(ev.got[1], "refused 2 open(s)") {
		t.Fatalf("events %q, want a second telling the 2 since", ev.got)
	}
	k.Before()
	k.After(sample(cg(1, 1, 1)))
	if len(ev.got) != 2 {
		t.Fatalf("events %q: told again with nothing new", ev.got)
	}
}

// A refusal says its cause: the count at the booking, and what the last measurement
// found, with why the two differ when the count is ahead.
func TestKeeperTellsWhyItRefused(t *testing.T) {
	g, clk := newFakeGate(), clocktesting.NewFakeClock(time.Unix(0, 0))
	ev := &events{}
	k := newKeeper(g, ev, clk)
	k.Before()
	k.After(sample(cg(1, 2, 0)))
	// Opens while the pod is measured: the sample is not quiet, and the count is kept.
	k.Before()
	for range 3 {
		g.open(1)
	}
	uncertain := cg(1, 2, 1)
	k.After(sample(uncertain))
	if len(ev.got) != 1 || !strings.Contains(ev.got[0], "the pod holds 2 of the 2 it booked; measured holding 1: the count is ahead") {
		t.Fatalf("events %q, want one saying the count is ahead of the measurement", ev.got)
	}
	clk.Step(time.Hour)
	g.open(1)
	uncertain.UsageUncertain = "the scan ran out of time"
	k.Before()
	g.open(1)
	k.After(sample(uncertain))
	if len(ev.got) != 2 || !strings.Contains(ev.got[1], "not measured in full") {
		t.Fatalf("events %q, want a second saying the pod was not measured", ev.got)
	}
}

// A pod booked by its UID before it runs keeps that booking, and what it opened under
// it, once the samples see it; one never seen is dropped after its life, an earlier
// agent's too, counted from this agent's first look.
func TestKeeperTakesOverEarlyBookings(t *testing.T) {
	g, clk := newFakeGate(), clocktesting.NewFakeClock(time.Unix(0, 0))
	k := newKeeper(g, &events{}, clk)
	if err := g.BookUID("earlier-agent", 3); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"uid-1", "never-runs"} {
		if err := k.BookPod(uid, 0, 2); err != nil {
			t.Fatal(err)
		}
	}
	g.uids["uid-1"].Held, g.uids["uid-1"].Moves = 2, 2    // opened as its cgroup was made
	if err := k.BookPod("made-first", 5, 1); err != nil { // its cgroup made before
		t.Fatal(err)
	}
	k.Before()
	k.After(sample(cg(1, 2, 2)))
	if _, ok := g.Count(5); !ok {
		t.Fatal("a pod booked with its cgroup was forgotten before a sample saw it")
	}
	if c, _ := g.Count(1); c.Held != 2 || c.Booked != 2 {
		t.Fatalf("the pod's count %+v, want the early booking's 2 held", c)
	}
	clk.Step(earlyBookingLife / 2)
	k.Before()
	k.After(sample(cg(1, 2, 2)))
	for _, uid := range []string{"earlier-agent", "never-runs", "uid-1"} {
		if _, ok := g.uids[uid]; !ok {
			t.Fatalf("%s dropped before its life", uid)
		}
	}
	clk.Step(earlyBookingLife / 2)
	k.Before()
	k.After(sample(cg(1, 2, 2)))
	for _, uid := range []string{"earlier-agent", "never-runs"} {
		if _, ok := g.uids[uid]; ok {
			t.Fatalf("%s, never seen running, is still booked past its life", uid)
		}
	}
	if c, ok := g.Count(1); !ok || c.Held != 2 {
		t.Fatalf("the running pod: %+v %v", c, ok)
	}
}

// A booking an earlier agent made is kept while the first samples of this one do not
// place its pod (a live pod whose cgroup the runtime has not told yet), its count as it
// was, and forgotten once unplaced for adoptedLife; once a sample placed it, it is
// forgotten as soon as its pod ends.
func TestKeeperKeepsAnEarlierAgentsBookingsUntilItLooked(t *testing.T) {
	g, clk := newFakeGate(), clocktesting.NewFakeClock(time.Unix(0, 0))
	for _, id := range []uint64{1, 2} {
		if err := g.Book(id, fmt.Sprint("uid-", id), 7); err != nil {
			t.Fatal(err)
		}
		if !g.Settle(id, 0, 3) {
			t.Fatal("setting the earlier agent's count")
		}
	}
	k := newKeeper(g, &events{}, clk) // a restarted agent
	unplaced := cg(1, 7, 3)
	unplaced.PodCgroupIDs = nil
	k.Before()
	k.After(sample(unplaced))
	for _, id := range []uint64{1, 2} {
		if c, ok := g.Count(id); !ok || c.Held != 3 || c.Booked != 7 {
			t.Fatalf("pod %d at the first sample: %+v %v, want still booked 7, holding 3", id, c, ok)
		}
	}
	clk.Step(adoptedLife - time.Second)
	k.Before()
	k.After(sample(cg(2, 7, 3)))
	if _, ok := g.Count(1); !ok {
		t.Fatal("an earlier agent's booking forgotten before its life")
	}
	clk.Step(time.Second)
	k.Before()
	k.After(sample(cg(2, 7, 3)))
	if _, ok := g.Count(1); ok {
		t.Fatal("an earlier agent's booking no sample placed is kept past its life")
	}
	look(k, endedCG(2, 7, 3))
	if _, ok := g.Count(2); ok {
		t.Fatal("a placed pod that ended is still booked")
	}
	// One the gate dropped another way (with a UID's booking) is no longer waited for.
	if err := g.Book(3, "uid-3", 1); err != nil {
		t.Fatal(err)
	}
	look(k)
	if err := g.Forget(3); err != nil {
		t.Fatal(err)
	}
	look(k)
	if len(k.adopted) != 0 {
		t.Errorf("adopted bookings the gate no longer has: %v", k.adopted)
	}
}

// A restarted agent keeps an earlier agent's booking of a cgroup bound to a pod's UID
// (DRA: booked as its claim was prepared) while the pod is not Ready yet, as long as it
// keeps the UID's booking: past adoptedLife, the pod's first process would otherwise be
// unknown to the gate.
func TestKeeperKeepsAnEarlierAgentsUIDBoundBookingWhileThePodStarts(t *testing.T) {
	g, clk := newFakeGate(), clocktesting.NewFakeClock(time.Unix(0, 0))
	const uid = "uid-9"
	if err := g.BookUID(uid, 2); err != nil {
		t.Fatal(err)
	}
	if err := g.Book(9, uid, 2); err != nil { // the cgroup, bound as it was made
		t.Fatal(err)
	}
	k := newKeeper(g, &events{}, clk) // a restarted agent
	starting := cg(9, 2, 0)
	starting.UID, starting.Ready = uid, false
	for range 3 {
		k.Before()
		k.After(sample(starting))
		clk.Step(adoptedLife)
	}
	if c, ok := g.Count(9); !ok || c.Booked != 2 {
		t.Fatalf("the cgroup of a pod booked by UID, not Ready for %s: %+v %v, want still booked 2", 3*adoptedLife, c, ok)
	}
	// Unseen for the UID's booking's life, both go.
	clk.Step(earlyBookingLife)
	for range 2 {
		k.Before()
		k.After(sample())
		clk.Step(adoptedLife)
	}
	if _, ok := g.Count(9); ok {
		t.Error("the cgroup of a pod booked by UID and gone is still booked")
	}
	if len(g.uids) != 0 {
		t.Errorf("UID bookings left: %v", g.UIDs())
	}
}

// A pod is known once booked, by UID or by the samples; booking a pod whose cgroup the
// gate books already changes that booking and takes no slot by UID.
func TestKeeperKnowsWhatItBooked(t *testing.T) {
	g, clk := newFakeGate(), clocktesting.NewFakeClock(time.Unix(0, 0))
	k := newKeeper(g, &events{}, clk)
	if k.Knows("uid-1") || k.Knows("early") {
		t.Fatal("a keeper that booked nothing knows a pod")
	}
	if err := k.BookPod("early", 0, 2); err != nil {
		t.Fatal(err)
	}
	k.Before()
	k.After(sample(cg(1, 2, 0)))
	if !k.Knows("uid-1") || !k.Knows("early") || k.Knows("uid-2") {
		t.Errorf("knows uid-1 %v, early %v, uid-2 %v: want the booked two only", k.Knows("uid-1"), k.Knows("early"), k.Knows("uid-2"))
	}
	if err := k.BookPod("uid-1", 1, 3); err != nil {
		t.Fatal(err)
	}
	if c, _ := g.Count(1); c.Booked != 3 {
		t.Errorf("booked %d, want the new 3", c.Booked)
	}
	if _, ok := g.uids["uid-1"]; ok {
		t.Error("a pod booked by its cgroup took a slot by UID too")
	}
}

// A queue closed before the measurement is given back before the count is settled to
// it: settled first, the count would be lowered twice, and the pod let past its booking.
func TestKeeperReclaimsBeforeItSettles(t *testing.T) {
	g, ev := newFakeGate(), &events{}
	k := newKeeper(g, ev, clocktesting.NewFakeClock(time.Now()))
	k.Before()
	k.After(sample(cg(1, 2, 0)))
	g.open(1)
	g.open(1)
	k.Before()
	k.After(sample(cg(1, 2, 2)))
	k.Before()
	g.close(1) // holds 1 from here on
	k.After(sample(cg(1, 2, 1)))
	if !g.open(1) {
		t.Fatal("the pod holding 1 of 2 was refused")
	}
	if g.open(1) {
		t.Fatalf("the pod holding 2 of 2 was let through: %+v", *g.counts[1])
	}
}

// The node's charges are walked only for a sample with a count to settle: one whose
// every count is its measurement costs no walk.
func TestKeeperReclaimsOnlyToSettle(t *testing.T) {
	g, ev := newFakeGate(), &events{}
	k := newKeeper(g, ev, clocktesting.NewFakeClock(time.Now()))
	k.Before()
	k.After(sample(cg(1, 2, 0), cg(2, 2, 0)))
	g.open(1)
	k.Before()
	k.After(sample(cg(1, 2, 1), cg(2, 2, 0)))
	if g.reclaims != 0 {
		t.Fatalf("%d walks for samples whose counts were their measurements", g.reclaims)
	}
	g.open(2)
	k.Before()
	k.After(sample(cg(1, 2, 1), cg(2, 2, 0))) // a measurement that missed 2's open
	if g.reclaims != 1 {
		t.Fatalf("%d walks for one sample with a count to settle, want 1", g.reclaims)
	}
}
