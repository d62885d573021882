// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/neureality-sdk/nr1-agent/internal/checkpoint"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Share is one allocation of the NR1 in a claim: what it consumed, and the CDI device
// that gives a container the NR1's files and the share's budget.
type Share struct {
	Request string      `json:"request"`
	ShareID string      `json:"shareID,omitempty"`
	Amounts nr1.Amounts `json:"amounts"`
	// CDIDevice is the fully qualified CDI device name (neureality.ai/nr1=…).
	CDIDevice string `json:"cdiDevice"`
}

// Claim is a prepared ResourceClaim.
type Claim struct {
	UID       types.UID `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Shares    []Share   `json:"shares"`
}

// Amounts is what the claim consumed of the NR1, over its shares.
func (c Claim) Amounts() nr1.Amounts {
	var a nr1.Amounts
	for _, s := range c.Shares {
		a = nr1.Add(a, s.Amounts)
	}
	return a
}

// storeVersion is the checkpoint's version. Version 1, the claims unframed
// ({"claims": [...]}, no checksum), is still read.
const storeVersion = 2

// checkpointState is what the store's checkpoint holds.
type checkpointState struct {
	Claims []Claim `json:"claims"`
}

// Store keeps the prepared claims, checkpointed in a file of the plugin's data directory
// so that a restarted agent (or kubelet) finds every claim still prepared: the kubelet
// asks again, and Unprepare may come to another process than Prepare did.
type Store struct {
	path string

	mu     sync.Mutex
	claims map[types.UID]Claim
	byName map[claimName][]types.UID // read at every sample, for every CG's claims
	byCDI  map[string]types.UID      // a share's CDI device, its claim
	// released are the claims unprepared lately, by their shares' CDI devices: the
	// kubelet unprepares a pod's claims once its containers stopped, and the agent's view
	// of the runtime may still show them running, with the claims' marks.
	released map[string]releasedClaim
}

// releasedClaim is a claim unprepared, and when.
type releasedClaim struct {
	claim Claim
	at    time.Time
}

// Recall bounds what the store remembers of unprepared claims: for how long (a pod's
// containers are seen stopped long before), and how many at most.
const (
	recallFor  = 2 * time.Minute
	recallMost = 4096
)

type claimName struct{ namespace, name string }

// set replaces the claims and their index.
func (s *Store) set(claims map[types.UID]Claim) {
	s.claims = claims
	s.byName = make(map[claimName][]types.UID, len(claims))
	s.byCDI = make(map[string]types.UID, len(claims))
	for uid, c := range claims {
		k := claimName{c.Namespace, c.Name}
		s.byName[k] = append(s.byName[k], uid)
		for _, sh := range c.Shares {
			s.byCDI[sh.CDIDevice] = uid
		}
	}
}

// OpenStore reads the checkpoint at path; none is an empty store. One that cannot be
// trusted (damaged, of another version) is set aside (path.damaged) and the store
// starts empty: the error says so and wraps checkpoint.ErrDamaged or ErrVersion, and
// the claims in use are recovered from the kubelet and the API server (Recover). A file
// that cannot be read at all is an error without a store.
func OpenStore(path string) (*Store, error) {
	s := &Store{path: path}
	s.set(map[types.UID]Claim{})
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("DRA checkpoint %s: %w", path, err)
	}
	var cp checkpointState
	if err := checkpoint.Decode(b, storeVersion, &cp); err != nil {
		legacy, ok := readVersion1(b)
		if !ok {
			aside, aerr := checkpoint.SetAside(path)
			if aerr != nil {
				return s, fmt.Errorf("DRA checkpoint %s: %w; %w", path, err, aerr)
			}
			return s, fmt.Errorf("DRA checkpoint %s (set aside as %s): %w", path, aside, err)
		}
		cp = legacy
	}
	claims := make(map[types.UID]Claim, len(cp.Claims))
	for _, c := range cp.Claims {
		claims[c.UID] = c
	}
	s.set(claims)
	return s, nil
}

// readVersion1 reads a checkpoint of version 1: the claims alone, every field known.
func readVersion1(b []byte) (checkpointState, bool) {
	var cp struct {
		Claims *[]Claim `json:"claims"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cp); err != nil || cp.Claims == nil || dec.More() {
		return checkpointState{}, false
	}
	for _, c := range *cp.Claims {
		if c.UID == "" {
			return checkpointState{}, false
		}
	}
	return checkpointState{Claims: *cp.Claims}, true
}

// Get returns a prepared claim.
func (s *Store) Get(uid types.UID) (Claim, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.claims[uid]
	return c, ok
}

// ClaimAmounts is what the prepared claim namespace/name consumed of the NR1. Two
// prepared claims of that name (one deleted and another created under its name, the
// first not unprepared yet) are neither: which one a container uses is not known.
func (s *Store) ClaimAmounts(namespace, name string) (nr1.Amounts, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	uids := s.byName[claimName{namespace, name}]
	if len(uids) != 1 {
		return nr1.Amounts{}, false
	}
	return s.claims[uids[0]].Amounts(), true
}

// CDIDeviceClaim names the prepared claim whose share the kubelet gave a container as
// the CDI device name, and what the claim consumed of the NR1.
func (s *Store) CDIDeviceClaim(name string) (namespace, claim string, amounts nr1.Amounts, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	uid, ok := s.byCDI[name]
	if !ok {
		return "", "", nr1.Amounts{}, false
	}
	c := s.claims[uid]
	return c.Namespace, c.Name, c.Amounts(), true
}

// Holds says whether a claim of that name is prepared.
func (s *Store) Holds(namespace, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byName[claimName{namespace, name}]) > 0
}

// Claims lists the prepared claims, by namespace and name.
func (s *Store) Claims() []Claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Claim, 0, len(s.claims))
	for _, c := range s.claims {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Put records claims as prepared and writes the checkpoint; on failure nothing is
// recorded.
func (s *Store) Put(claims ...Claim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[types.UID]Claim, len(s.claims)+len(claims))
	for k, v := range s.claims {
		next[k] = v
	}
	for _, c := range claims {
		next[c.UID] = c
	}
	if err := s.write(next); err != nil {
		return err
	}
	s.set(next)
	return nil
}

// Remove forgets claims and writes the checkpoint.
func (s *Store) Remove(uids ...types.UID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[types.UID]Claim, len(s.claims))
	for k, v := range s.claims {
		next[k] = v
	}
	for _, uid := range uids {
		delete(next, uid)
	}
	if err := s.write(next); err != nil {
		return err
	}
	now := time.Now()
	s.forget(now)
	for _, uid := range uids {
		if c, ok := s.claims[uid]; ok && len(s.released) < recallMost {
			for _, sh := range c.Shares {
				s.released[sh.CDIDevice] = releasedClaim{claim: c, at: now}
			}
		}
	}
	s.set(next)
	return nil
}

// forget drops what was released longer ago than recallFor (s.mu held).
func (s *Store) forget(now time.Time) {
	if s.released == nil {
		s.released = map[string]releasedClaim{}
	}
	for dev, r := range s.released {
		if now.Sub(r.at) > recallFor {
			delete(s.released, dev)
		}
	}
}

// ReleasedCDIDeviceClaim names the claim, unprepared in the last two minutes, whose
// share is the CDI device name, and what it consumed of the NR1: the mark of a pod whose
// containers the agent may still see running after the kubelet unprepared its claims.
func (s *Store) ReleasedCDIDeviceClaim(name string) (namespace, claim string, amounts nr1.Amounts, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.released[name]
	if !ok || time.Since(r.at) > recallFor {
		return "", "", nr1.Amounts{}, false
	}
	return r.claim.Namespace, r.claim.Name, r.claim.Amounts(), true
}

// write replaces the checkpoint atomically: a crash leaves the old file or the new.
func (s *Store) write(claims map[types.UID]Claim) error {
	cp := checkpointState{Claims: make([]Claim, 0, len(claims))}
	for _, c := range claims {
		cp.Claims = append(cp.Claims, c)
	}
	sort.Slice(cp.Claims, func(i, j int) bool { return cp.Claims[i].UID < cp.Claims[j].UID })
	if err := checkpoint.Write(s.path, storeVersion, cp, 0o600, 0o750); err != nil {
		return fmt.Errorf("DRA checkpoint: %w", err)
	}
	return nil
}
