// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neureality-sdk/nr1-agent/agent/act/actuate"
	"github.com/neureality-sdk/nr1-agent/agent/act/enforce"
	"github.com/neureality-sdk/nr1-agent/agent/act/prevent"
	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/agent/kube"
	"github.com/neureality-sdk/nr1-agent/agent/measure/cadence"
	"github.com/neureality-sdk/nr1-agent/agent/measure/sampler"
	"github.com/neureality-sdk/nr1-agent/agent/observe/allocation"
	"github.com/neureality-sdk/nr1-agent/agent/observe/inventory"
	"github.com/neureality-sdk/nr1-agent/agent/observe/kubeletconf"
	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime"
	"github.com/neureality-sdk/nr1-agent/agent/offer/deviceplugin"
	"github.com/neureality-sdk/nr1-agent/agent/offer/statusfit"
	"github.com/neureality-sdk/nr1-agent/metrics"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

// exposed are the stages the agent's metrics, probes and debug pages read.
type exposed struct {
	dev        theNR1
	offer      offer
	watcher    *runtime.Watcher
	tracker    *allocation.Tracker
	namespaces *kube.Namespaces // nil without an API server
	inventory  *inventory.Builder
	partition  *sampler.PartitionSampler
	sampler    *sampler.Sampler
	source     string   // the footprint source's name
	bpfRefused string   // why BPF was wanted and not used
	unseen     []string // what the footprint source cannot see on this node
	changes    following
	cadence    *cadence.Cadence
	enforcer   *enforce.Manager
	actuator   *actuate.Actuator
	prevention bool            // turned on
	keeper     *prevent.Keeper // nil when the gate does not run
}

// expose adds the metrics server (with the probes) and the debug server to the stages;
// in device-plugin mode also the check of pod statuses the kubelet cannot write.
func (a *Agent) expose(cfg *config.Config, version string, o exposed, log *slog.Logger) error {
	state := &deviceState{capacity: o.dev.capacity, monitor: o.dev.monitor, manager: o.offer}
	stages := map[string]metrics.Stage{
		"device_health": o.dev.monitor, "device_plugins": o.offer, "runtime": o.watcher, "allocation": o.tracker, "partition": o.partition, "sampler": o.sampler,
	}
	if o.namespaces != nil {
		stages["namespaces"] = o.namespaces
	}
	reg := prometheus.NewRegistry()
	if err := registerAll(reg, metrics.NewBuildInfo(version), deviceplugin.NewCollector(state), sampler.NewCollector(o.sampler, o.source, o.bpfRefused, o.unseen),
		o.sampler.Duration(), o.sampler.Phases(), enforce.NewCollector(o.enforcer), o.watcher.ReconnectsCounter(), o.inventory.MismatchesCounter(),
		metrics.NewStageCollector(stages)); err != nil {
		return err
	}
	if err := registerAll(reg, cadence.NewCollectors(o.cadence, o.changes.counts())...); err != nil {
		return err
	}
	if err := registerAll(reg, metrics.NewProcessCollectors()...); err != nil {
		return err
	}
	if err := registerAll(reg, prevent.NewCollector(o.keeper, o.prevention)); err != nil {
		return err
	}
	if cfg.Mode == config.ModeDevicePlugin {
		fit := statusfit.New(func(ctx context.Context) (bool, string, error) {
			return kubeletconf.ResourceHealth(ctx, cfg.Paths.Procfs, cfg.PodResourcesSocket())
		}, o.actuator.Events, log)
		if err := registerAll(reg, fit.Collectors()...); err != nil {
			return err
		}
		a.run(func(ctx context.Context) error { fit.Run(ctx, judged{o.sampler}); return nil })
	}
	server := metrics.NewServer(cfg.MetricsAddr, reg, log, state.allRegistered, runtimeConnected(o.watcher), sampled(o.sampler))
	server.Live(o.enforcer.Healthy)
	a.run(server.Run)
	if cfg.DebugAddr != "" {
		debug := metrics.NewDebug(cfg.DebugAddr, log)
		debug.Handle("/debug/cgs", debugCGs(o.sampler))
		a.run(debug.Run)
	}
	return nil
}

func registerAll(reg *prometheus.Registry, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering the agent's metrics: %w", err)
		}
	}
	return nil
}

func sampled(s *sampler.Sampler) metrics.ReadinessCheck {
	return func() error {
		if snap, _ := s.Load(); snap == nil {
			return errors.New("no sample taken yet")
		}
		return nil
	}
}

func runtimeConnected(w *runtime.Watcher) metrics.ReadinessCheck {
	return func() error {
		if s, _ := w.Load(); !s.Connected {
			return errors.New("container runtime not connected")
		}
		return nil
	}
}

// deviceState is the device side's state as metrics and readiness read it.
type deviceState struct {
	capacity nr1.Amounts
	monitor  *device.Monitor
	manager  offer
}

func (s *deviceState) Capacity() nr1.Amounts { return s.capacity }

func (s *deviceState) Health() device.Health {
	h, _ := s.monitor.Load()
	return h
}

func (s *deviceState) Registered(r nr1.Resource) bool { return s.manager.Registered(r) }

func (s *deviceState) Registrations() int { return s.manager.Registrations() }

func (s *deviceState) allRegistered() error {
	var missing []string
	for _, r := range nr1.All {
		if !s.manager.Registered(r) {
			missing = append(missing, r.Name())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("NR1 not registered with the kubelet: %v", missing)
	}
	return nil
}
