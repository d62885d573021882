package enforce

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/runtime"
	"github.com/neureality-sdk/nr1-agent/agent/sampler"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// AnnotationKey on a pod exempts it with the value "disabled".
const AnnotationKey = "nr1.neureality.ai/enforcement"

// BadAnnotation reports a pod whose enforcement annotation could not be read; the
// annotation is ignored.
const BadAnnotation Kind = "bad-annotation"

// Container names a container of a CG.
type Container struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Action is one thing to do to a CG.
type Action struct {
	Kind   Kind `json:"kind"`
	DryRun bool `json:"dryRun,omitempty"`
	// Hard is true when the hard ratio, not the ladder's delay, called for it.
	Hard      bool   `json:"hard,omitempty"`
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// PodCgroup is the pod's cgroup v2 directory, for throttling.
	PodCgroup string `json:"podCgroup,omitempty"`
	// Containers are the ones to kill: the one holding most of the resource, or all of
	// them by policy.
	Containers []Container  `json:"containers,omitempty"`
	Resource   nr1.Resource `json:"resource"`
	Usage      int64        `json:"usage"`      // base units
	Allocation int64        `json:"allocation"` // resource units
	Ratio      float64      `json:"ratio"`
	Message    string       `json:"message"`
}

// State is what enforcement remembers between samples. It matters only within one
// agent's life: after a restart the ladder starts again from warm-up, and throttles are
// found again in bpffs by the actuator.
type State struct {
	Started  time.Time
	Breaches [nr1.NumResources]int // times a CG went over, per resource
	cgs      map[string]*cgState
	recent   []time.Time
	badAnno  map[string]string
}

type cgState struct {
	over      [nr1.NumResources]time.Time // when the CG went over; zero when it is not
	under     [nr1.NumResources]time.Time // when it went back under, for hysteresis
	done      [nr1.NumResources]int       // ladder steps taken
	hard      [nr1.NumResources]bool
	throttled bool
	ended     bool // killed or evicted
	endedAt   time.Time
	refused   time.Time // when an eviction was refused
	refusedOn nr1.Resource
}

// NewState starts enforcement at started (the agent's start, for warm-up).
func NewState(started time.Time) *State {
	return &State{Started: started, cgs: map[string]*cgState{}, badAnno: map[string]string{}}
}

// EvictionRefused records that the eviction of uid was refused at now.
func (s *State) EvictionRefused(uid string, r nr1.Resource, now time.Time) {
	if c := s.cgs[uid]; c != nil {
		c.refused, c.refusedOn = now, r
	}
}

// Decide returns the actions due now. It acts only on what it can attribute with
// certainty: a fresh sample, a connected runtime, known allocations, and CGs whose
// containers are past warm-up.
func Decide(now time.Time, snap *sampler.Snapshot, st *State, p Policy) []Action {
	if snap == nil || now.Sub(snap.Taken) > p.MaxSampleAge.Duration || !snap.RuntimeConnected ||
		snap.AllocationRead.IsZero() || now.Sub(st.Started) < p.Warmup.Duration {
		return nil
	}
	var out []Action
	present := map[string]bool{}
	for _, cg := range snap.CGs {
		present[cg.UID] = true
		out = append(out, decideCG(now, cg, st, p)...)
	}
	for uid, c := range st.cgs {
		if present[uid] {
			continue
		}
		// A CG that is gone needs no throttle; its pin (left by this run or an earlier
		// one) is lifted so that nothing leaks.
		if c.throttled {
			out = append(out, Action{Kind: Unthrottle, UID: uid, Message: "CG gone: throttle removed"})
		}
		delete(st.cgs, uid)
		delete(st.badAnno, uid)
	}
	return rateLimit(now, out, st, p)
}

func decideCG(now time.Time, cg *sampler.CG, st *State, p Policy) []Action {
	if !cg.AllocationKnown || slices.Contains(p.ExemptNamespaces, cg.Namespace) {
		return nil
	}
	var out []Action
	switch v, ok := cg.Annotations[AnnotationKey]; {
	case !ok || v == "enabled":
	case v == "disabled":
		return nil
	default:
		if st.badAnno[cg.UID] != v {
			st.badAnno[cg.UID] = v
			out = append(out, Action{Kind: BadAnnotation, UID: cg.UID, Namespace: cg.Namespace, Pod: cg.Name,
				Message: fmt.Sprintf("annotation %s=%q: want \"disabled\" or \"enabled\"; ignored", AnnotationKey, v)})
		}
	}
	if inWarmup(now, cg, p) {
		return out
	}
	c := st.cgs[cg.UID]
	if c == nil || (c.ended && restartedSince(cg, c.endedAt)) {
		c = &cgState{throttled: c != nil && c.throttled}
		st.cgs[cg.UID] = c
	}
	anyOver := false
	for _, r := range nr1.All {
		// Every pod's image sits in the docker partition; only CGs (pods allocated NR1
		// resources) are held to a partition budget. A pod holding NR1 device files
		// without any allocation is over, whatever it is.
		if r == nr1.DockerPartition && cg.Allocation.IsZero() {
			continue
		}
		ratio := cg.Ratio[r]
		if math.IsInf(ratio, 1) && p.NoAllocation == "ignore" {
			ratio = 0
		}
		if ratio > 1 {
			anyOver = true
			if c.over[r].IsZero() {
				st.Breaches[r]++
			}
			out = append(out, c.over1(now, r, ratio, cg, p)...)
			continue
		}
		c.under1(now, r, ratio, p)
	}
	if c.throttled && !anyOver && c.allClear() {
		c.throttled = false
		out = append(out, action(Unthrottle, nr1.ComputeDMAMemory, cg, p, false, "back under its allocation: throttle lifted"))
	}
	return out
}

// restartedSince reports a container started after t: a killed container the kubelet
// restarted is a new chance, with a new ladder.
func restartedSince(cg *sampler.CG, t time.Time) bool {
	for _, c := range cg.Containers {
		if c.State == runtime.Running && c.StartedAt.After(t) {
			return true
		}
	}
	return false
}

func inWarmup(now time.Time, cg *sampler.CG, p Policy) bool {
	for _, c := range cg.Containers {
		if c.State == runtime.Running && now.Sub(c.StartedAt) < p.ContainerWarmup.Duration {
			return true
		}
	}
	return false
}

// over1 advances the ladder of r for a CG over its allocation.
func (c *cgState) over1(now time.Time, r nr1.Resource, ratio float64, cg *sampler.CG, p Policy) []Action {
	c.under[r] = time.Time{}
	if c.over[r].IsZero() {
		c.over[r] = now
	}
	if c.ended {
		return c.fallback(now, r, cg, p)
	}
	rp := p.Resources.Of(r)
	elapsed := now.Sub(c.over[r])
	hard := rp.HardRatio > 0 && ratio >= rp.HardRatio
	var out []Action
	for c.done[r] < len(rp.Ladder) {
		step := rp.Ladder[c.done[r]]
		last := c.done[r] == len(rp.Ladder)-1
		due := step.After.Duration <= elapsed
		if !due && !hard {
			break
		}
		if !due && !last {
			c.done[r]++ // a hard breach skips to the last step
			continue
		}
		c.done[r]++
		c.hard[r] = hard
		a := action(step.Action, r, cg, p, hard, "")
		a.Message = fmt.Sprintf("%s holds %s of %s, allocated %d %s (ratio %.2f), over for %s: %s",
			cg.Name, human(r, cg.Usage[r]), r.Name(), cg.Allocation[r], r.Unit(), ratio, elapsed.Round(time.Second), step.Action)
		switch step.Action {
		case Throttle:
			if c.throttled {
				continue
			}
			c.throttled = true
		case Kill, Evict:
			c.ended, c.endedAt = true, now
		}
		out = append(out, a)
		if c.ended {
			break
		}
	}
	return out
}

// fallback kills a CG whose eviction on a hard breach was refused, once the policy's
// bound has passed; a refused eviction that was not hard is tried again after it.
func (c *cgState) fallback(now time.Time, r nr1.Resource, cg *sampler.CG, p Policy) []Action {
	if c.refused.IsZero() || r != c.refusedOn || now.Sub(c.refused) < p.EvictFallback.Duration {
		return nil
	}
	c.refused = time.Time{}
	if c.hard[r] {
		return []Action{action(Kill, r, cg, p, true, "eviction refused on a hard breach: killing")}
	}
	return []Action{action(Evict, r, cg, p, false, "eviction refused: trying again")}
}

// under1 resets the ladder of r once the CG has stayed under by the margin for Hold.
func (c *cgState) under1(now time.Time, r nr1.Resource, ratio float64, p Policy) {
	if c.over[r].IsZero() {
		return
	}
	if ratio > 1-p.Margin {
		c.under[r] = time.Time{}
		return
	}
	if c.under[r].IsZero() {
		c.under[r] = now
	}
	if now.Sub(c.under[r]) >= p.Hold.Duration {
		c.over[r], c.under[r], c.done[r], c.hard[r] = time.Time{}, time.Time{}, 0, false
	}
}

func (c *cgState) allClear() bool {
	for _, t := range c.over {
		if !t.IsZero() {
			return false
		}
	}
	return true
}

func action(k Kind, r nr1.Resource, cg *sampler.CG, p Policy, hard bool, msg string) Action {
	a := Action{Kind: k, DryRun: p.Mode == DryRun, Hard: hard, UID: cg.UID, Namespace: cg.Namespace, Pod: cg.Name,
		Resource: r, Usage: cg.Usage[r], Allocation: cg.Allocation[r], Ratio: cg.Ratio[r], Message: msg}
	var best *Container
	var most int64 = -1
	for _, c := range cg.Containers {
		if c.State != runtime.Running {
			continue
		}
		if a.PodCgroup == "" && c.Cgroup.V2 != "" {
			a.PodCgroup = parentDir(c.Cgroup.V2)
		}
		ref := Container{ID: c.ID, Name: c.Name}
		if p.KillScope == "cg" {
			a.Containers = append(a.Containers, ref)
			continue
		}
		if u := cg.PerContainer[c.Name][r]; u > most {
			most, best = u, &ref
		}
	}
	if best != nil && (k == Kill || k == Evict) {
		a.Containers = []Container{*best}
	}
	if k != Kill {
		a.Containers = nil
	}
	return a
}

// rateLimit defers actions past the node's budget to later samples by undoing their
// step; lifting a throttle and reporting an annotation always pass.
func rateLimit(now time.Time, actions []Action, st *State, p Policy) []Action {
	window := now.Add(-time.Minute)
	st.recent = slices.DeleteFunc(st.recent, func(t time.Time) bool { return t.Before(window) })
	out := actions[:0]
	for _, a := range actions {
		if a.Kind == Unthrottle || a.Kind == BadAnnotation {
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

func (s *State) undo(a Action) {
	c := s.cgs[a.UID]
	if c == nil {
		return
	}
	c.done[a.Resource]--
	switch a.Kind {
	case Throttle:
		c.throttled = false
	case Kill, Evict:
		c.ended = false
	}
}

func human(r nr1.Resource, base int64) string {
	if r.UnitBytes() > 1 {
		return fmt.Sprintf("%.1f MB", float64(base)/float64(r.UnitBytes()))
	}
	return fmt.Sprintf("%d", base)
}

func parentDir(p string) string {
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return p
}
