// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/agent/observe/allocation"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Tables is the kubelet's allocation table as the tracker publishes it.
type Tables interface {
	Load() (allocation.State, <-chan struct{})
}

// recoverRetry is how soon a claim that could not be recovered is tried again when no
// new table comes first.
const recoverRetry = 10 * time.Second

// Offer is the driver as the agent offers the NR1 through it: registered for every
// resource at once, its prepared claims recovered after a damaged checkpoint.
type Offer struct {
	driver *Driver
	claims ClaimReader
	clk    clock.Clock
	log    *slog.Logger
	run    func(ctx context.Context) error
	// recover is set when the driver started from a damaged checkpoint: the claims in
	// use are to be prepared again (RecoverFrom).
	recover bool

	mu            sync.Mutex
	wasRegistered bool
	registrations int
	lastSeen      time.Time
}

// NewOffer offers the NR1 through d, served under kubeletDir; recover says the driver
// started from a damaged checkpoint, and the claims in use are to be prepared again.
func NewOffer(d *Driver, api API, kubeletDir string, recover bool, clk clock.Clock, log *slog.Logger) *Offer {
	return &Offer{driver: d, claims: api, clk: clk, log: log, recover: recover,
		run: func(ctx context.Context) error { return d.Run(ctx, api, kubeletDir) }}
}

// OnPrepared has book told what a pod's claims consumed as they are prepared (see
// Driver.OnPrepared).
func (o *Offer) OnPrepared(book func(pod types.UID, a nr1.Amounts)) { o.driver.OnPrepared(book) }

// Run serves the kubelet and publishes the node's ResourceSlice until ctx ends.
func (o *Offer) Run(ctx context.Context) error { return o.run(ctx) }

func (o *Offer) Registered(nr1.Resource) bool { return o.driver.Registered() }

// Health is the stage's: last seen registered with its ResourceSlice stored whole, or
// why not now.
func (o *Offer) Health() (time.Time, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.driver.Registered() {
		return o.lastSeen, errors.New("DRA plugin not registered with the kubelet")
	}
	if err := o.driver.SliceHealth(); err != nil {
		return o.lastSeen, err
	}
	o.lastSeen = time.Now()
	return o.lastSeen, nil
}

// Registrations counts the registrations seen (a kubelet restart registers the plugin
// again), as they are read.
func (o *Offer) Registrations() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.driver.Registered()
	if now && !o.wasRegistered {
		o.registrations++
	}
	o.wasRegistered = now
	return o.registrations
}

// RecoverFrom, after a damaged checkpoint, recovers the claims of the NR1's driver the
// kubelet lists in use and the driver does not hold: until then their CGs' allocations
// are unknown. One that fails is tried again with the next table, or after
// recoverRetry. It ends once a table's claims are all held: in normal running the
// kubelet prepares every claim itself, and a table read before a pod's claims were
// unprepared must not prepare them again.
func (o *Offer) RecoverFrom(ctx context.Context, t Tables) error {
	if !o.recover {
		return nil
	}
	for {
		st, changed := t.Load()
		var retry <-chan time.Time
		if !st.Read.IsZero() {
			got, err := o.driver.Recover(ctx, o.claims, claimsInUse(st.Table))
			if len(got) > 0 {
				o.log.Info("DRA claims recovered", "claims", len(got))
			}
			if err == nil {
				o.log.Info("DRA claims in use all prepared again after the damaged checkpoint")
				return nil
			}
			o.log.Warn("DRA claims in use not recovered yet: their CGs' allocations are unknown", "err", err)
			retry = o.clk.After(recoverRetry)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-retry:
		}
	}
}

// claimsInUse lists the claims of the NR1's driver the table names, once each.
func claimsInUse(t allocation.Table) []ClaimRef {
	seen := map[ClaimRef]bool{}
	var refs []ClaimRef
	for _, pod := range t {
		for _, l := range pod {
			for _, k := range l.Claims {
				ref := ClaimRef{Namespace: k.Namespace, Name: k.Name}
				if !seen[ref] {
					seen[ref] = true
					refs = append(refs, ref)
				}
			}
		}
	}
	return refs
}
