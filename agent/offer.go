// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/agent/kube"
	"github.com/neureality-sdk/nr1-agent/agent/observe/allocation"
	"github.com/neureality-sdk/nr1-agent/agent/observe/inventory"
	"github.com/neureality-sdk/nr1-agent/agent/offer/deviceplugin"
	"github.com/neureality-sdk/nr1-agent/agent/offer/dra"
	"github.com/neureality-sdk/nr1-agent/internal/checkpoint"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// offer is how the NR1 is offered to the kubelet: the four device plugins, or the DRA
// driver. Readiness and the registration metrics read it the same way.
type offer interface {
	Run(ctx context.Context) error
	Registered(r nr1.Resource) bool
	Registrations() int
	Health() (lastSuccess time.Time, err error)
}

// newOffer builds the configured mode's offer; in DRA mode also the driver's prepared
// claims, which the inventory reads allocations from.
func newOffer(cfg *config.Config, kubeAPI *kube.API, dev theNR1, clk clock.WithTicker, log *slog.Logger) (offer, inventory.ClaimSource, error) {
	if cfg.Mode != config.ModeDRA {
		// One device per unit: a capacity whose list the kubelet would drop is refused.
		for _, r := range nr1.All {
			if err := deviceplugin.CheckListSize(r, dev.capacity[r]); err != nil {
				return nil, nil, fmt.Errorf("nr1.resources.%s (capacity from %s): %w", r.Short(), dev.sources[r], err)
			}
		}
		plugins := make([]*deviceplugin.Plugin, 0, nr1.NumResources)
		for _, r := range nr1.All {
			plugins = append(plugins, deviceplugin.NewPlugin(r, dev.capacity[r], dev.files, dev.monitor))
		}
		return deviceplugin.NewManager(cfg.DevicePluginsDir(), plugins, cfg.DevicePlugin.Resync.Duration, clk, log), nil, nil
	}
	if kubeAPI == nil {
		return nil, nil, errors.New("mode dra needs the API server, and there is none")
	}
	api := kubeAPI.Resources()
	pluginDir := filepath.Join(cfg.Paths.Kubelet, "plugins", dra.DriverName)
	store, err := dra.OpenStore(filepath.Join(pluginDir, "claims.json"))
	damaged := errors.Is(err, checkpoint.ErrDamaged) || errors.Is(err, checkpoint.ErrVersion)
	if damaged {
		// One bad file must not stop the node: no claim could be prepared, no pod using
		// the NR1 could start. Those in use are recovered (recoverClaims).
		log.Error("DRA checkpoint unreadable: starting empty, recovering the claims in use from the kubelet and the API server", "err", err)
	} else if err != nil {
		return nil, nil, err
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for k, v := range dev.inv.Attributes() {
		attrs[resourceapi.QualifiedName(k)] = resourceapi.DeviceAttribute{StringValue: &v}
	}
	driver := dra.New(dra.Options{Node: dev.node, Capacity: dev.capacity, Attributes: attrs, CDI: dra.CDI{Dir: cfg.Paths.CDI, Files: dev.files},
		Store: store, Health: dev.monitor, Log: log})
	log.Info("DRA mode", "driver", dra.DriverName, "node", dev.node, "claims", len(store.Claims()), "cdi", cfg.Paths.CDI)
	return &draOffer{driver: driver, api: api, clk: clk, log: log, recover: damaged, run: func(ctx context.Context) error { return driver.Run(ctx, api, cfg.Paths.Kubelet) }}, store, nil
}

// recoverer is an offer that rebuilds what it holds from the kubelet's allocation
// tables: the DRA driver's prepared claims.
type recoverer interface {
	RecoverFrom(ctx context.Context, tables tables) error
}

// tables is the kubelet's allocation table as the tracker publishes it.
type tables interface {
	Load() (allocation.State, <-chan struct{})
}

// recoverRetry is how soon a claim that could not be recovered is tried again when no
// new table comes first.
const recoverRetry = 10 * time.Second

// draOffer is the DRA driver as an offer: registered for every resource at once.
type draOffer struct {
	driver *dra.Driver
	api    dra.ClaimReader
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

func (o *draOffer) Run(ctx context.Context) error { return o.run(ctx) }

func (o *draOffer) Registered(nr1.Resource) bool { return o.driver.Registered() }

// Health is the stage's: last seen registered with its ResourceSlice stored whole, or
// why not now.
func (o *draOffer) Health() (time.Time, error) {
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
func (o *draOffer) Registrations() int {
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
func (o *draOffer) RecoverFrom(ctx context.Context, t tables) error {
	if !o.recover {
		return nil
	}
	for {
		st, changed := t.Load()
		var retry <-chan time.Time
		if !st.Read.IsZero() {
			got, err := o.driver.Recover(ctx, o.api, claimsInUse(st.Table))
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
func claimsInUse(t allocation.Table) []dra.ClaimRef {
	seen := map[dra.ClaimRef]bool{}
	var refs []dra.ClaimRef
	for _, pod := range t {
		for _, l := range pod {
			for _, k := range l.Claims {
				ref := dra.ClaimRef{Namespace: k.Namespace, Name: k.Name}
				if !seen[ref] {
					seen[ref] = true
					refs = append(refs, ref)
				}
			}
		}
	}
	return refs
}
