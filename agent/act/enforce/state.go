// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"errors"
	"time"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// State is what enforcement remembers between samples: per CG, its ladders, its
// throttle and the outcome of its last actions. It is checkpointed, so a restarted agent
// neither repeats a step nor starts a ladder again.
type State struct {
	Started  time.Time
	Breaches nr1.PerResource[int] // times a CG went over, per resource
	cgs      map[string]*cgState
	recent   []time.Time
	badAnno  map[string]string
	badMark  map[string]string // CG UID → the ignored marks last reported
	saved    time.Time         // when it was last checkpointed
}

// cgState is one CG's enforcement. A step is counted in Done when it is proposed and
// undone when its action fails, so the ladder advances on outcomes.
type cgState struct {
	// Namespace and Pod name the CG for the people reading its ladder.
	Namespace string                     `json:"namespace,omitempty"`
	Pod       string                     `json:"pod,omitempty"`
	Over      nr1.PerResource[time.Time] `json:"over"`  // when the CG went over; zero when it is not
	Under     nr1.PerResource[time.Time] `json:"under"` // when it went back under, for hysteresis
	// The ladder's clock runs only while the agent sees the CG: Over and Under move
	// forward by the time it could not judge it (the CG's allocation, exemption or usage
	// unknown, the samples stale, the runtime away, the agent down or warming up), so
	// that a CG that went back under unseen is not taken for one over all along, and one
	// that makes itself unknown does not restart its ladder either. Seen is when each
	// resource was last judged, Blind since when a ladder under way was not.
	Seen  nr1.PerResource[time.Time] `json:"seen,omitzero"`
	Blind nr1.PerResource[time.Time] `json:"blind,omitzero"`
	Done  nr1.PerResource[int]       `json:"done"` // ladder steps taken
	Hard  nr1.PerResource[bool]      `json:"hard"`
	// Throttled is true while the CG's throttle is attached; PodCgroup is where, so
	// that it can be lifted (and thawed) after the CG is gone.
	Throttled bool   `json:"throttled,omitempty"`
	PodCgroup string `json:"podCgroup,omitempty"`
	// Ended is set when the CG was killed or evicted; it is left alone until one of its
	// containers starts again.
	Ended     bool         `json:"ended,omitempty"`
	EndedAt   time.Time    `json:"endedAt,omitzero"`
	Refused   time.Time    `json:"refused,omitzero"` // when an eviction was refused
	RefusedOn nr1.Resource `json:"refusedOn,omitempty"`
	// OwnSince is when the CG's usage became uncertain by its own doing (zero while it is
	// not), OwnCause why, and OwnDone the steps of the selfUncertain ladder taken.
	OwnSince time.Time `json:"ownSince,omitzero"`
	OwnCause string    `json:"ownCause,omitempty"`
	OwnDone  int       `json:"ownDone,omitempty"`
	// Failures counts consecutive failed actions; nothing more is tried before RetryAt.
	Failures int       `json:"failures,omitempty"`
	RetryAt  time.Time `json:"retryAt,omitzero"`
}

// Backoff after a failed action: doubled with each failure, from first up to most.
// Not a wait.Backoff: the checkpoint keeps a CG's failure count and next try, and the
// delay follows from the count alone, where wait.Backoff is a stepper held in memory.
const (
	firstRetry = time.Second
	mostRetry  = time.Minute
)

// NewState starts enforcement at started (the agent's start, for warm-up).
func NewState(started time.Time) *State {
	return &State{Started: started, cgs: map[string]*cgState{}, badAnno: map[string]string{}, badMark: map[string]string{}}
}

// Throttled lists the CGs (by UID) whose throttle is attached, as far as the state knows.
func (s *State) Throttled() []string {
	var out []string
	for uid, c := range s.cgs {
		if c.Throttled {
			out = append(out, uid)
		}
	}
	return out
}

// Busy is true while a ladder is under way: a CG over (or back under and not yet past
// the hysteresis), throttled, or waiting to retry a failed action; not one killed or
// evicted, which is left alone until it starts again. Its steps are due at their times,
// so the CGs must be sampled at the interval meanwhile.
func (s *State) Busy() bool {
	for _, c := range s.cgs {
		if c.Throttled || !c.RetryAt.IsZero() {
			return true
		}
		if c.Ended {
			continue
		}
		if !c.OwnSince.IsZero() {
			return true
		}
		for _, r := range nr1.All {
			if !c.Over[r].IsZero() || !c.Under[r].IsZero() {
				return true
			}
		}
	}
	return false
}

// AdoptThrottle records a throttle found attached (a pin left by an earlier run), so it
// is lifted when its reason is gone and never attached twice.
func (s *State) AdoptThrottle(uid string) {
	c := s.cgs[uid]
	if c == nil {
		c = &cgState{}
		s.cgs[uid] = c
	}
	c.Throttled = true
}

// ErrThrottleKept, wrapped in an actuator's error, says that a kill or eviction was
// done but the CG's throttle could not be lifted after it: the action stands, and the
// throttle is lifted later like any other.
var ErrThrottleKept = errors.New("throttle not lifted")

// Outcome records how an action went and reports whether it failed. A success keeps its
// step; a failure undoes it, so that the step is proposed again once the backoff has
// passed.
func (s *State) Outcome(a Action, err error, now time.Time) (failed bool) {
	c := s.cgs[a.UID]
	if c == nil || a.DryRun || reportOnly(a.Kind) {
		return err != nil
	}
	switch {
	case errors.Is(err, ErrThrottleKept):
		c.Failures, c.RetryAt = 0, time.Time{}
		c.Throttled = true
		return false
	case err == nil:
		c.Failures, c.RetryAt = 0, time.Time{}
		if a.Kind == Throttle {
			c.PodCgroup = a.PodCgroup
		}
	case errors.Is(err, ErrEvictionRefused):
		// Refused is an answer, not a failure: the policy's fallback takes it from here.
		c.Refused, c.RefusedOn = now, a.Resource
	default:
		s.undo(a)
		c.Failures++
		c.RetryAt = now.Add(min(firstRetry<<min(c.Failures-1, 16), mostRetry))
	}
	return err != nil
}

// undo takes back a proposed step.
func (s *State) undo(a Action) {
	c := s.cgs[a.UID]
	if c == nil {
		return
	}
	switch a.Kind {
	case Unthrottle:
		c.Throttled = true
		return
	case Throttle:
		c.Throttled = false
	case Kill, Evict:
		c.Ended = false
		if a.LiftThrottle {
			c.Throttled = true
		}
	}
	if a.Cause != "" {
		if c.OwnDone > 0 {
			c.OwnDone--
		}
		return
	}
	if c.Done[a.Resource] > 0 {
		c.Done[a.Resource]--
	}
}
