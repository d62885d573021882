// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/internal/untrusted"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// AnnotationKey on a pod exempts it with the value "disabled", in a namespace that
// allows its pods to exempt themselves.
const AnnotationKey = "nr1.neureality.ai/enforcement"

// Labels on a Namespace, set by whoever may label namespaces (the administrator):
// ExemptLabel=disabled exempts every pod of the namespace; AllowPodExemptionLabel=true
// lets its pods exempt themselves with AnnotationKey.
const (
	ExemptLabel            = "nr1.neureality.ai/enforcement"
	AllowPodExemptionLabel = "nr1.neureality.ai/allow-pod-exemption"
)

// BadAnnotation reports a pod whose enforcement annotation is ignored: it could not be
// read, or it asks for an exemption the pod's namespace does not allow.
const BadAnnotation Kind = "bad-annotation"

// IgnoredMark reports a pod with a DRA share's mark the agent did not write (of no claim
// its driver prepared, or of another namespace's): ignored, never making its allocation
// unknown.
const IgnoredMark Kind = "ignored-mark"

// reportOnly tells the kinds that only say something: never rate-limited, deferred or
// part of a ladder.
func reportOnly(k Kind) bool { return k == BadAnnotation || k == IgnoredMark }

// Decide returns the actions due now. It acts only on what it can attribute with
// certainty: a fresh sample, a connected runtime, fresh allocations known for the CG,
// and CGs whose containers are past warm-up. What it cannot judge it leaves as it is:
// without a fresh sample, a connected runtime or fresh allocations, or in the agent's
// warm-up, it decides nothing (every ladder's clock pauses); otherwise a throttle whose
// reason is gone is lifted.
func Decide(now time.Time, snap *view.Sample, st *State, p Policy) []Action {
	if snap == nil || now.Sub(snap.Taken) > p.MaxSampleAge.Duration || !snap.RuntimeConnected ||
		snap.AllocationRead.IsZero() || now.Sub(snap.AllocationRead) > p.MaxAllocationAge.Duration ||
		now.Sub(st.Started) < p.Warmup.Duration {
		for _, c := range st.cgs {
			c.blindAll(now)
		}
		return nil
	}
	var out []Action
	present := map[string]bool{}
	for _, cg := range snap.CGs {
		present[cg.UID] = true
		out = append(out, ignoredMarks(cg, st)...)
		out = append(out, decideCG(now, snap, cg, st, p)...)
	}
	for uid, c := range st.cgs {
		if present[uid] {
			continue
		}
		// A CG that is gone needs no throttle; its pin (left by this run or an earlier
		// one) is lifted so that nothing leaks. The state goes once nothing is attached.
		if c.Throttled {
			if !now.Before(c.RetryAt) {
				c.Throttled = false
				out = append(out, Action{Kind: Unthrottle, UID: uid, PodCgroup: c.PodCgroup, Message: "CG gone: throttle removed"})
			}
			continue
		}
		delete(st.cgs, uid)
		delete(st.badAnno, uid)
		delete(st.badMark, uid)
	}
	out = rateLimit(now, out, st, p)
	for i := range out {
		out[i].Sampled, out[i].Decided = snap.Taken, now
	}
	return out
}

func decideCG(now time.Time, snap *view.Sample, cg *view.Measured, st *State, p Policy) []Action {
	c := st.cgs[cg.UID]
	exempt, decided, out := exemption(cg, st, p)
	if exempt || p.Mode == DryRun {
		// Neither an exempt CG nor a node in dry-run keeps a throttle.
		if c != nil && c.Throttled && !now.Before(c.RetryAt) {
			c.Throttled = false
			why := "exempt from enforcement"
			if !exempt {
				why = "enforcement is in dry-run"
			}
			out = append(out, lift(cg, c, why+": throttle lifted"))
		}
	}
	// A CG whose allocation or exemption is unknown is left exactly as it is: no step,
	// no reset, its ladder's clock stopped.
	if exempt || !decided || !cg.AllocationKnown {
		if c != nil {
			c.blindAll(now)
		}
		return out
	}
	if c == nil || (c.Ended && restartedSince(cg, c.EndedAt)) {
		c = &cgState{Throttled: c != nil && c.Throttled, PodCgroup: podCgroupOf(c)}
		st.cgs[cg.UID] = c
	}
	c.Namespace, c.Pod = cg.Namespace, cg.Name
	cg, warm := pastWarmup(now, cg, p)
	anyOver := false
	for _, r := range nr1.All {
		v, known := judged(now, snap, cg, r, p)
		if warm && v.ratio <= 1 {
			// Without its young containers the usage is a lower bound: under is not
			// certain.
			known = false
		}
		if !known {
			// Unknown is neither over nor under: the ladder neither moves nor resets.
			anyOver = anyOver || !c.Over[r].IsZero()
			c.blind(now, r)
			continue
		}
		c.resume(now, r, st.Started)
		if v.ratio > 1 {
			anyOver = true
			if c.Over[r].IsZero() {
				st.Breaches[r]++
			}
			out = append(out, c.over1(now, r, v, cg, p)...)
			continue
		}
		c.under1(now, r, v.ratio, p)
	}
	out = append(out, c.own1(now, cg, p)...)
	if c.Throttled && !anyOver && c.allClear() && c.OwnSince.IsZero() && !now.Before(c.RetryAt) {
		c.Throttled = false
		out = append(out, lift(cg, c, "back under its allocation: throttle lifted"))
	}
	return out
}

// exemption reports whether the CG is exempt and whether that could be decided, and
// reports once an annotation that is ignored: one it cannot read, or one asking for an
// exemption its namespace does not allow. Exemption is the administrator's: by the
// configuration's lists or the namespace's labels. While those labels are unknown, only
// the lists can decide.
func exemption(cg *view.Measured, st *State, p Policy) (exempt, decided bool, out []Action) {
	exempt, decided, why := exemptionOf(cg, p)
	if why != "" {
		out = ignored(cg, st, cg.Annotations[AnnotationKey], why)
	}
	return exempt, decided, out
}

// exemptionOf is exemption without reporting: why the pod's annotation is ignored, if
// it is.
func exemptionOf(cg *view.Measured, p Policy) (exempt, decided bool, ignoredWhy string) {
	if slices.Contains(p.ExemptNamespaces, cg.Namespace) {
		return true, true, ""
	}
	labelsKnown := cg.NamespaceUnknown == ""
	if labelsKnown && cg.NamespaceLabels[ExemptLabel] == "disabled" {
		return true, true, ""
	}
	switch v, ok := cg.Annotations[AnnotationKey]; {
	case !ok || v == "enabled":
		return false, labelsKnown, ""
	case v != "disabled":
		return false, labelsKnown, `want "disabled" or "enabled"`
	case slices.Contains(p.PodExemptionNamespaces, cg.Namespace) || labelsKnown && cg.NamespaceLabels[AllowPodExemptionLabel] == "true":
		return true, true, ""
	case !labelsKnown:
		return false, false, ""
	default:
		return false, true, fmt.Sprintf("namespace %s does not allow its pods to exempt themselves (label %s=true)", cg.Namespace, AllowPodExemptionLabel)
	}
}

// ignored reports an ignored annotation, once per value: the pod's owner needs to hear
// it once, not at every sample.
func ignored(cg *view.Measured, st *State, v, why string) []Action {
	if st.badAnno[cg.UID] == v {
		return nil
	}
	st.badAnno[cg.UID] = v
	return []Action{{Kind: BadAnnotation, UID: cg.UID, Namespace: cg.Namespace, Pod: cg.Name,
		Message: fmt.Sprintf("annotation %s=%s: %s; ignored", AnnotationKey, untrusted.Quote(v), why)}}
}

// ignoredMarks reports a CG's ignored marks, once for each set of them.
func ignoredMarks(cg *view.Measured, st *State) []Action {
	if len(cg.IgnoredMarks) == 0 {
		return nil
	}
	v := strings.Join(cg.IgnoredMarks, "; ")
	if st.badMark[cg.UID] == v {
		return nil
	}
	st.badMark[cg.UID] = v
	return []Action{{Kind: IgnoredMark, UID: cg.UID, Namespace: cg.Namespace, Pod: cg.Name,
		Message: "DRA share marks the agent did not write, ignored: " + v}}
}

// verdict is how a CG stands on one resource: the ratio judged, and the usage and
// allocation it divides, the CG's own or, when further over, its claim group's.
type verdict struct {
	ratio  float64
	usage  nr1.Base
	alloc  nr1.Units
	shared *view.Shared // the group judged; nil for the CG's own figures
	// pastCap says why the CG is over whatever its figures: it holds more than a scan
	// counts.
	pastCap string
}

// judged returns how the CG stands on r and whether it may be acted on. A CG sharing
// DRA claims with other pods is over when it is, or when they all together are: each may
// use a shared claim whole, not each of them at once.
func judged(now time.Time, snap *view.Sample, cg *view.Measured, r nr1.Resource, p Policy) (verdict, bool) {
	own := verdict{ratio: float64(cg.Ratio[r]), usage: cg.Usage[r], alloc: cg.Allocation[r]}
	ownKnown := true
	if r == nr1.DockerPartition {
		// Every pod's image sits in the docker partition; only CGs (pods allocated NR1
		// resources) are held to a partition budget. A measurement that failed or is
		// old is unknown, never zero.
		if cg.Allocation == (nr1.Amounts{}) || cg.PartitionUnknown != "" || snap.PartitionRead.IsZero() ||
			now.Sub(snap.PartitionRead) > p.MaxPartitionAge.Duration {
			return verdict{}, false
		}
	}
	own.ratio = noAllocation(own.ratio, p)
	if why := cg.PastCap[r]; why != "" && (cg.Allocation[r] > 0 || p.NoAllocation != "ignore") {
		// More than the agent can count is more than any allocation: over, by at least
		// what it was counted to hold.
		own.ratio, own.pastCap = max(own.ratio, math.Nextafter(1, 2)), why
		return own, true
	}
	// Usage the scan could not read in full is a lower bound: over is certain, under
	// is not.
	if r != nr1.DockerPartition && cg.UsageUncertain != "" && own.ratio <= 1 {
		ownKnown = false
	}
	s := cg.Shared
	if s == nil || r == nr1.DockerPartition {
		return own, ownKnown
	}
	group := verdict{ratio: noAllocation(float64(s.Ratio[r]), p), usage: s.Usage[r], alloc: s.Allocation[r], shared: s}
	groupKnown := s.Uncertain == "" || group.ratio > 1
	if group.ratio > 1 && !(ownKnown && own.ratio > 1) && !othersPay(s, r, p) {
		return own, ownKnown
	}
	switch {
	case groupKnown && group.ratio > 1 && (!ownKnown || group.ratio > own.ratio):
		return group, true
	case ownKnown && own.ratio > 1:
		return own, true
	case !groupKnown:
		// Under alone, and the group's under is not certain.
		return verdict{}, false
	}
	return own, ownKnown
}

// othersPay says whether the pods of a group over together on r are acted on for it.
// Not while one of them is over on its own (past a cap too): that one is acted on, and the group is
// judged again once it is back within. Nor while one is exempt, or its exemption not
// decided: what an exempt pod holds is not the others' to pay for.
func othersPay(s *view.Shared, r nr1.Resource, p Policy) bool {
	for _, m := range s.Members {
		if exempt, decided, _ := exemptionOf(m, p); exempt || !decided || noAllocation(float64(m.Ratio[r]), p) > 1 || m.PastCap[r] != "" {
			return false
		}
	}
	return true
}

// noAllocation is a ratio over a zero allocation as the policy wants it judged.
func noAllocation(ratio float64, p Policy) float64 {
	if math.IsInf(ratio, 1) && p.NoAllocation == "ignore" {
		return 0
	}
	return ratio
}

func podCgroupOf(c *cgState) string {
	if c == nil {
		return ""
	}
	return c.PodCgroup
}

// restartedSince reports a container started after t: a killed container the kubelet
// restarted is a new chance, with a new ladder.
func restartedSince(cg *view.Measured, t time.Time) bool {
	for _, c := range cg.Containers {
		if c.State == view.Running && c.StartedAt.After(t) {
			return true
		}
	}
	return false
}

// pastWarmup is cg as judged while containers of it are in their warm-up: on what its
// other containers and the pod hold, a lower bound acted on only when even that is
// over. A container's start is its CG's own doing, which never shields the CG: a
// sidecar restarting more often than the warm-up does not keep a hog beside it unjudged.
// What the pod shares with others is judged once the warm-up is over.
func pastWarmup(now time.Time, cg *view.Measured, p Policy) (*view.Measured, bool) {
	if !inWarmup(now, cg, p) {
		return cg, false
	}
	mature := *cg
	mature.Shared = nil
	for _, c := range cg.Containers {
		if age := now.Sub(c.StartedAt); c.State == view.Running && age >= 0 && age < p.ContainerWarmup.Duration {
			young := cg.PerContainer[c.Name]
			for r := range mature.Usage {
				mature.Usage[r] = max(0, mature.Usage[r]-young[r])
			}
		}
	}
	mature.Ratio = view.Ratios(mature.Usage, mature.Allocation)
	return &mature, true
}

// inWarmup reports a running container of the CG that started less than the warm-up
// ago. One that started after now, by the runtime's date, did so before the node's clock
// was set back: it is past its warm-up, or a step of a day would keep its CG unjudged
// for a day.
func inWarmup(now time.Time, cg *view.Measured, p Policy) bool {
	for _, c := range cg.Containers {
		if age := now.Sub(c.StartedAt); c.State == view.Running && age >= 0 && age < p.ContainerWarmup.Duration {
			return true
		}
	}
	return false
}

// blind records that the ladder of r, under way, is not judged now: its clock stops
// at the first such moment.
func (c *cgState) blind(now time.Time, r nr1.Resource) {
	if c.Blind[r].IsZero() && (!c.Over[r].IsZero() || !c.Under[r].IsZero()) {
		c.Blind[r] = now
	}
}

func (c *cgState) blindAll(now time.Time) {
	for _, r := range nr1.All {
		c.blind(now, r)
	}
}

// resume records that r is judged now, after moving its ladder's clock forward by the
// time the agent did not see it: since it went blind, or, for a resource last judged
// by an earlier run of the agent (started is this run's start), since then.
func (c *cgState) resume(now time.Time, r nr1.Resource, started time.Time) {
	from := c.Blind[r]
	// Seen by an earlier run only: blind since then, the time it was down included,
	// even if this run's warm-up marked it blind again later.
	if seen := c.Seen[r]; !seen.IsZero() && seen.Before(started) && (from.IsZero() || seen.Before(from)) {
		from = seen
	}
	if gap := now.Sub(from); !from.IsZero() && gap > 0 {
		if !c.Over[r].IsZero() {
			c.Over[r] = c.Over[r].Add(gap)
		}
		if !c.Under[r].IsZero() {
			c.Under[r] = c.Under[r].Add(gap)
		}
	}
	c.Blind[r], c.Seen[r] = time.Time{}, now
}

// over1 advances the ladder of r for a CG over its allocation.
func (c *cgState) over1(now time.Time, r nr1.Resource, v verdict, cg *view.Measured, p Policy) []Action {
	c.Under[r] = time.Time{}
	if c.Over[r].IsZero() {
		c.Over[r] = now
	}
	if now.Before(c.RetryAt) {
		return nil // an action failed: wait for the backoff
	}
	if c.Ended {
		return c.fallback(now, r, cg, p)
	}
	rp := p.Resources[r]
	elapsed := now.Sub(c.Over[r])
	hard := rp.HardRatio > 0 && v.ratio >= rp.HardRatio
	var out []Action
	for c.Done[r] < len(rp.Ladder) {
		step := rp.Ladder[c.Done[r]]
		last := c.Done[r] == len(rp.Ladder)-1
		due := step.After.Duration <= elapsed
		if !due && !hard {
			break
		}
		if !due && !last {
			c.Done[r]++ // a hard breach skips to the last step
			continue
		}
		c.Done[r]++
		c.Hard[r] = hard
		a := action(step.Action, r, cg, p, hard, "")
		a.Usage, a.Allocation, a.Ratio = v.usage, v.alloc, view.Fraction(v.ratio)
		a.Message = fmt.Sprintf("%s holds %s of %s, allocated %d %s (ratio %.2f), over for %s: %s",
			cg.Name, human(r, v.usage), r.Name(), v.alloc, r.Unit(), v.ratio, elapsed.Round(time.Second), step.Action)
		switch {
		case v.pastCap != "":
			a.Message = fmt.Sprintf("%s is over its allocation of %d %s of %s whatever it holds: %s; over for %s: %s",
				cg.Name, v.alloc, r.Unit(), r.Name(), v.pastCap, elapsed.Round(time.Second), step.Action)
		case v.shared != nil:
			a.Message = fmt.Sprintf("%s and the pods sharing %s with it (%s) hold %s of %s together, allocated %d %s together (ratio %.2f), over for %s: %s",
				cg.Name, strings.Join(v.shared.Claims, ", "), strings.Join(v.shared.Pods, ", "), human(r, v.usage), r.Name(), v.alloc, r.Unit(),
				v.ratio, elapsed.Round(time.Second), step.Action)
		}
		if !c.take(now, &a, p) {
			continue
		}
		out = append(out, a)
		if c.Ended {
			break
		}
	}
	return out
}

// take records a step's action in the CG's state and says whether it is to be taken: a
// throttle of a CG throttled already is not. A kill or eviction ends the CG's ladders
// until it starts again, and lifts its throttle after it: a restarted container must
// not be born throttled. In dry-run nothing is attached, and the end is only noted.
func (c *cgState) take(now time.Time, a *Action, p Policy) bool {
	if p.Mode == DryRun {
		if a.Kind == Kill || a.Kind == Evict {
			c.Ended, c.EndedAt = true, now
		}
		return true
	}
	switch a.Kind {
	case Throttle:
		if c.Throttled {
			return false
		}
		c.Throttled = true
	case Kill, Evict:
		c.Ended, c.EndedAt = true, now
		a.LiftThrottle, c.Throttled = c.Throttled, false
	}
	return true
}

// own1 advances the selfUncertain ladder of a CG whose usage is uncertain by its own
// doing, whatever its booking: what it holds where no scan can count it protects
// nothing. Certain again, the ladder is reset, and a throttle it took is lifted like any
// other once nothing else holds it.
func (c *cgState) own1(now time.Time, cg *view.Measured, p Policy) []Action {
	if cg.UsageUncertain == "" || !cg.UncertainOwn {
		c.OwnSince, c.OwnCause, c.OwnDone = time.Time{}, "", 0
		return nil
	}
	if c.OwnSince.IsZero() {
		c.OwnSince = now
	}
	c.OwnCause = cg.UncertainCause
	if now.Before(c.RetryAt) || c.Ended {
		return nil
	}
	elapsed := now.Sub(c.OwnSince)
	var out []Action
	for c.OwnDone < len(p.SelfUncertain.Ladder) {
		step := p.SelfUncertain.Ladder[c.OwnDone]
		if step.After.Duration > elapsed {
			break
		}
		c.OwnDone++
		a := action(step.Action, nr1.HypervisorQueue, cg, p, false, "")
		a.Cause = cg.UncertainCause
		if step.Action == Kill || step.Action == Evict {
			a.Containers = running(cg)
		}
		a.Message = fmt.Sprintf("%s holds NR1 files where no scan can count them, by its own doing (%s: %s), for %s: its usage is unknown and protects nothing: %s",
			cg.Name, cg.UncertainCause, cg.UsageUncertain, elapsed.Round(time.Second), step.Action)
		if !c.take(now, &a, p) {
			continue
		}
		out = append(out, a)
		if c.Ended {
			break
		}
	}
	return out
}

// running are the CG's running containers.
func running(cg *view.Measured) []ContainerRef {
	var out []ContainerRef
	for _, c := range cg.Containers {
		if c.State == view.Running {
			out = append(out, ContainerRef{ID: c.ID, Name: c.Name, Cgroup: c.Cgroup.V2})
		}
	}
	return out
}

// fallback kills a CG whose eviction on a hard breach was refused, once the policy's
// bound has passed; a refused eviction that was not hard is tried again after it.
func (c *cgState) fallback(now time.Time, r nr1.Resource, cg *view.Measured, p Policy) []Action {
	if c.Refused.IsZero() || r != c.RefusedOn || now.Sub(c.Refused) < p.EvictFallback.Duration {
		return nil
	}
	c.Refused = time.Time{}
	if c.Hard[r] {
		return []Action{action(Kill, r, cg, p, true, "eviction refused on a hard breach: killing")}
	}
	return []Action{action(Evict, r, cg, p, false, "eviction refused: trying again")}
}

// under1 resets the ladder of r once the CG has stayed under by the margin for Hold.
func (c *cgState) under1(now time.Time, r nr1.Resource, ratio float64, p Policy) {
	if c.Over[r].IsZero() {
		return
	}
	if ratio > 1-p.Margin {
		c.Under[r] = time.Time{}
		return
	}
	if c.Under[r].IsZero() {
		c.Under[r] = now
	}
	if now.Sub(c.Under[r]) >= p.Hold.Duration {
		c.Over[r], c.Under[r], c.Done[r], c.Hard[r] = time.Time{}, time.Time{}, 0, false
	}
}

func (c *cgState) allClear() bool {
	for _, t := range c.Over {
		if !t.IsZero() {
			return false
		}
	}
	return true
}

// rateLimit defers actions past the node's budget to later samples by undoing their
// step; lifting a throttle and reporting an annotation always pass.
func rateLimit(now time.Time, actions []Action, st *State, p Policy) []Action {
	window := now.Add(-time.Minute)
	st.recent = slices.DeleteFunc(st.recent, func(t time.Time) bool { return t.Before(window) })
	out := actions[:0]
	for _, a := range actions {
		if a.Kind == Unthrottle || reportOnly(a.Kind) {
			out = append(out, a)
			continue
		}
		if len(st.recent) >= p.MaxActionsPerMinute {
			st.undo(a)
			continue
		}
		st.recent = append(st.recent, now)
		out = append(out, a)
	}
	return out
}
