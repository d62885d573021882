// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"time"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Ladder is where one CG's enforcement stands, for the people running the node: how
// long it has been over, the steps taken and the next one if nothing changes.
type Ladder struct {
	UID, Namespace, Pod string
	Throttled           bool
	// Ended is when the CG was killed or evicted; it is left alone until one of its
	// containers starts again. Zero when it was not.
	Ended     time.Time
	Resources nr1.PerResource[Rung]
}

// Rung is one resource's ladder of a CG.
type Rung struct {
	// Over is when the CG went over; zero when it is not over.
	Over time.Time
	// Steps is how many of the ladder's steps were taken.
	Steps int
	// Next is the step due at NextAt if the CG stays over (a hard breach takes the
	// ladder's last step sooner); empty when there is none.
	Next   Kind
	NextAt time.Time
	// ResetAt is when the ladder starts again if the CG stays back under; zero unless it
	// went back under.
	ResetAt time.Time
}

// Ladders lists the CGs whose enforcement is under way (over, back under but not yet
// reset, throttled, or ended), named once a sample has named them.
func (s *State) Ladders(p Policy) []Ladder {
	var out []Ladder
	for uid, c := range s.cgs {
		l := Ladder{UID: uid, Namespace: c.Namespace, Pod: c.Pod, Throttled: c.Throttled}
		if c.Ended {
			l.Ended = c.EndedAt
		}
		active := c.Throttled || c.Ended
		for _, r := range nr1.All {
			if c.Over[r].IsZero() {
				continue
			}
			active = true
			g := Rung{Over: c.Over[r], Steps: c.Done[r]}
			if !c.Under[r].IsZero() {
				g.ResetAt = c.Under[r].Add(p.Hold.Duration)
			}
			g.Next, g.NextAt = c.next(r, p)
			l.Resources[r] = g
		}
		if active && l.Namespace != "" {
			out = append(out, l)
		}
	}
	return out
}

// next is the step of r due next if the CG stays over, and when.
func (c *cgState) next(r nr1.Resource, p Policy) (Kind, time.Time) {
	var k Kind
	var at time.Time
	switch {
	case c.Ended && !c.Refused.IsZero() && c.RefusedOn == r:
		// A refused eviction is followed by the fallback.
		k, at = Evict, c.Refused.Add(p.EvictFallback.Duration)
		if c.Hard[r] {
			k = Kill
		}
	case c.Ended:
		return "", time.Time{}
	default:
		ladder := p.Resources[r].Ladder
		if c.Done[r] >= len(ladder) {
			return "", time.Time{}
		}
		step := ladder[c.Done[r]]
		k, at = step.Action, c.Over[r].Add(step.After.Duration)
	}
	// A failed action is not tried again before its backoff has passed.
	if c.RetryAt.After(at) {
		at = c.RetryAt
	}
	return k, at
}
