// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/agent/kube"
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
		// the NR1 could start. Those in use are recovered (Offer.RecoverFrom).
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
	return dra.NewOffer(driver, api, cfg.Paths.Kubelet, damaged, clk, log), store, nil
}

// recoverer is an offer that rebuilds what it holds from the kubelet's allocation
// tables: the DRA driver's prepared claims.
type recoverer interface {
	RecoverFrom(ctx context.Context, tables dra.Tables) error
}
