// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/neureality-sdk/nr1-agent/internal/checkpoint"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// checkpointVersion changes whenever the saved state changes meaning; an agent refuses
// (and logs) a checkpoint of another version instead of misreading it.
const checkpointVersion = 2

// savedState is what a checkpoint holds: what was done to each CG and when, so that a
// restarted agent neither repeats nor resets a ladder.
type savedState struct {
	// Saved is when it was saved, on the wall clock: a restarted agent whose clock is
	// earlier knows the clock was set back meanwhile.
	Saved          time.Time           `json:"saved,omitzero"`
	CGs            map[string]*cgState `json:"cgs"`
	Recent         []time.Time         `json:"recent,omitempty"`
	BadAnnotations map[string]string   `json:"badAnnotations,omitempty"`
}

// FileCheckpoint keeps the state in one file, written whole and renamed into place so
// that a crash leaves the old checkpoint or the new one, never half of one.
type FileCheckpoint struct{ Path string }

// Save writes st.
func (f FileCheckpoint) Save(st *State) error {
	saved := savedState{Saved: st.saved, CGs: st.cgs, Recent: st.recent, BadAnnotations: st.badAnno}
	if err := checkpoint.Write(f.Path, checkpointVersion, saved, 0o600, 0o700); err != nil {
		return fmt.Errorf("enforcement checkpoint: %w", err)
	}
	return nil
}

// Restore reads the checkpoint into a state starting at started. No checkpoint is a new
// state; a damaged one (or another version's) is set aside as path.damaged and is an
// error with a new state, and the caller decides (the agent starts afresh and says so).
func (f FileCheckpoint) Restore(started time.Time) (*State, error) {
	st := NewState(started)
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("enforcement checkpoint: %w", err)
	}
	var saved savedState
	if err := checkpoint.Decode(b, checkpointVersion, &saved); err != nil {
		if aside, aerr := checkpoint.SetAside(f.Path); aerr == nil {
			return st, fmt.Errorf("enforcement checkpoint %s (set aside as %s): %w", f.Path, aside, err)
		}
		return st, fmt.Errorf("enforcement checkpoint %s: %w", f.Path, err)
	}
	for uid, c := range saved.CGs {
		if c != nil {
			st.cgs[uid] = c
		}
	}
	st.recent = saved.Recent
	for uid, v := range saved.BadAnnotations {
		st.badAnno[uid] = v
	}
	// The clock set back while the agent was down: every time it remembers is moved
	// back with it, as if it had been down for no time. Otherwise a ladder, a retry or a
	// killed CG's end would wait for the clock to catch up, the length of the step. Set
	// forward, the time down is not seen, as ever.
	if back := started.Sub(saved.Saved); !saved.Saved.IsZero() && back < 0 {
		st.shift(back)
	}
	return st, nil
}

// shift moves every time the state remembers by d.
func (s *State) shift(d time.Duration) {
	move := func(t *time.Time) {
		if !t.IsZero() {
			*t = t.Add(d)
		}
	}
	for _, c := range s.cgs {
		for _, r := range nr1.All {
			move(&c.Over[r])
			move(&c.Under[r])
			move(&c.Seen[r])
			move(&c.Blind[r])
		}
		move(&c.EndedAt)
		move(&c.Refused)
		move(&c.RetryAt)
	}
	for i := range s.recent {
		move(&s.recent[i])
	}
}

// SyncThrottles makes the state's throttles those actually attached: a pin is the
// truth, whatever the checkpoint remembers.
func (s *State) SyncThrottles(attached []string) {
	pinned := make(map[string]bool, len(attached))
	for _, uid := range attached {
		pinned[uid] = true
		s.AdoptThrottle(uid)
	}
	for uid, c := range s.cgs {
		if c.Throttled && !pinned[uid] {
			c.Throttled = false
		}
	}
}
