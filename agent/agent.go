// Package agent wires the agent's parts together and runs them until the context ends.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/agent/allocation"
	"github.com/neureality-sdk/nr1-agent/agent/cgroup"
	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/agent/deviceplugin"
	"github.com/neureality-sdk/nr1-agent/agent/enforce"
	"github.com/neureality-sdk/nr1-agent/agent/inventory"
	"github.com/neureality-sdk/nr1-agent/agent/kubeletconf"
	"github.com/neureality-sdk/nr1-agent/agent/runtime"
	"github.com/neureality-sdk/nr1-agent/agent/sampler"
	"github.com/neureality-sdk/nr1-agent/agent/statusfit"
	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/metrics"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

// Run starts the agent and blocks until ctx ends or a part fails. Everything that can be
// checked before serving is checked first, so a bad setup stops the agent at startup.
func Run(ctx context.Context, cfg *config.Config, version string, log *slog.Logger) error {
	nr1Device := device.NewInventory(cfg.NR1, cfg.Paths.Sysfs, cfg.Paths.Dev)
	capacity, sources, err := nr1Device.Capacity()
	if err != nil {
		return err
	}
	for _, r := range nr1.All {
		log.Info("NR1 capacity", "resource", r.Name(), "units", capacity[r], "source", sources[r])
	}

	// Resolved once: the device plugin, the footprint targets and the throttle share
	// them, and health then checks they are still the same files.
	files, err := nr1Device.Resolve()
	if err != nil {
		return err
	}

	clk := clock.RealClock{}
	monitor := device.NewMonitor(nr1Device, cfg.DevicePlugin.HealthInterval.Duration, clk, log)
	node := cfg.NodeName
	if node == "" {
		node, _ = os.Hostname()
	}
	manager, claims, err := newOffer(cfg, node, capacity, sources, nr1Device, files, monitor, clk, log)
	if err != nil {
		return err
	}

	cgroups, err := cgroup.Detect(cfg.Paths.Cgroupfs)
	if err != nil {
		return fmt.Errorf("paths.cgroupfs: %w", err)
	}
	log.Info("cgroups", "mode", cgroups.Mode.String(), "v2", cgroups.V2)
	if cgroups.V2 == "" {
		// Processes are attributed to containers by their v2 cgroup: without one, every
		// CG's usage is uncertain and no ladder can start (a lower bound of nothing).
		log.Error("no cgroup v2 hierarchy: no process can be attributed to a container, nothing will be enforced", "cgroupfs", cfg.Paths.Cgroupfs)
	}
	cri := runtime.NewClient(cfg.Runtime.Endpoint)
	defer cri.Close()
	watcher := runtime.NewWatcher(cri, runtime.Options{Resync: cfg.Runtime.Resync.Duration, Poll: cfg.Sampling.Interval.Duration}, log)
	podResources, err := allocation.Dial(cfg.PodResourcesSocket(), capacity)
	if err != nil {
		return err
	}
	defer podResources.Close()
	tracker := allocation.NewTracker(podResources, cfg.Sampling.Interval.Duration, clk, log)
	namespaces, nsWatch := namespaceLabels(cfg, log)
	inv := inventory.NewBuilder(watcher, tracker, namespaces, cgroups, cfg.Enforcement.MaxAllocationAge.Duration, log)
	if claims != nil {
		inv.UseClaims(claims)
	}
	onDemand := cfg.Sampling.AllocationRefresh.Duration > cfg.Sampling.Interval.Duration
	if onDemand {
		tracker.ReadOnDemand(podResources, cfg.Sampling.AllocationRefresh.Duration, cfg.Sampling.ChangeGap.Duration,
			func() <-chan struct{} { _, ch := watcher.Load(); return ch }, inv.Awaits)
	}
	source, targets, bpfRefused, err := footprintSource(cfg, files, cgroups.V2, log)
	if err != nil {
		return err
	}
	defer source.Close()
	partition := sampler.NewPartitionSampler(cri, watcher, cfg.Sampling.PartitionInterval.Duration, clk, log)
	smp := sampler.New(inv, source, targets, partition, cfg.Sampling.Interval.Duration, clk, log)
	changes := watchChanges(cfg, source, log)
	act, pins, closeActuator := actuator(cfg, node, files, cri, cgroups, log)
	var fit *statusfit.Checker
	if cfg.Mode == config.ModeDevicePlugin {
		fit = statusfit.New(func() (bool, string) { return kubeletconf.ResourceHealth(cfg.Paths.Procfs) }, act.Events, log)
	}
	defer closeActuator()
	checkpoint := enforce.FileCheckpoint{Path: cfg.EnforcementCheckpoint()}
	enforcement, err := checkpoint.Restore(clk.Now())
	if err != nil {
		log.Error("enforcement checkpoint unreadable: ladders start afresh", "err", err)
	}
	if pins != nil {
		enforcement.SyncThrottles(pins)
	}
	enforcer := enforce.NewManager(judged{smp}, cfg.Enforcement, act, enforcement, checkpoint, clk, log)
	if changes != nil {
		wakes := []func() <-chan struct{}{func() <-chan struct{} { _, ch := watcher.Load(); return ch }, enforcer.TurnedBusy, tracker.StartsFailing}
		if onDemand {
			// A table read on demand is what makes a new pod's allocation known.
			wakes = append(wakes, func() <-chan struct{} { _, ch := tracker.Load(); return ch })
		}
		smp.SampleOnWake(changes.Wake(), cfg.Sampling.ChangeGap.Duration, wakes...)
		// While the kubelet does not answer, its allocations age into unknown: the samples
		// go on, so that they are shown and judged so.
		smp.Rest(cfg.Sampling.IdleInterval.Duration, func() bool { return enforcer.Busy() || tracker.Failing() })
	}
	log.Info("enforcement", "mode", cfg.Enforcement.Mode, "checkpoint", checkpoint.Path, "throttled", enforcement.Throttled())

	state := &deviceState{capacity: capacity, monitor: monitor, manager: manager}
	reg := prometheus.NewRegistry()
	sampleDuration := sampler.NewSampleDuration()
	smp.OnSample(func(s *sampler.Snapshot) {
		sampleDuration.Observe(s.Took.Seconds())
		if fit != nil {
			cgs := make([]*view.CG, len(s.CGs))
			for i := range s.CGs {
				cgs[i] = s.CGs[i].CG
			}
			fit.Check(cgs)
		}
	})
	stages := map[string]metrics.Stage{
		"device_health": monitor, "device_plugins": manager, "runtime": watcher, "allocation": tracker, "partition": partition, "sampler": smp,
	}
	if nsWatch != nil {
		stages["namespaces"] = nsWatch
	}
	reg.MustRegister(metrics.NewBuildInfo(version), deviceplugin.NewCollector(state), sampler.NewCollector(smp, source.Name(), bpfRefused), sampleDuration,
		enforce.NewCollector(enforcer), watcher.ReconnectsCounter(), inv.MismatchesCounter(),
		metrics.NewStageCollector(stages))
	if changes != nil {
		reg.MustRegister(sampler.NewChangeCollectors(changes, smp)...)
	}
	if fit != nil {
		reg.MustRegister(fit.Collectors()...)
	}
	server := metrics.NewServer(cfg.MetricsAddr, reg, log, state.allRegistered, runtimeConnected(watcher), sampled(smp))
	server.Live(enforcer.Healthy)
	var debug *metrics.Debug
	if cfg.DebugAddr != "" {
		debug = metrics.NewDebug(cfg.DebugAddr, log)
		debug.Handle("/debug/cgs", debugCGs(smp))
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return monitor.Run(ctx) })
	g.Go(func() error { return manager.Run(ctx) })
	g.Go(func() error { return watcher.Run(ctx) })
	g.Go(func() error { return tracker.Run(ctx) })
	if r, ok := manager.(recoverer); ok {
		g.Go(func() error { return r.RecoverFrom(ctx, tracker) })
	}
	g.Go(func() error { return partition.Run(ctx) })
	g.Go(func() error { return smp.Run(ctx) })
	if changes != nil {
		g.Go(func() error { changes.Run(ctx); return nil })
	}
	g.Go(func() error { return enforcer.Run(ctx) })
	if nsWatch != nil {
		g.Go(func() error { nsWatch.Run(ctx); return nil })
	}
	g.Go(func() error { return server.Run(ctx) })
	if debug != nil {
		g.Go(func() error { return debug.Run(ctx) })
	}
	return g.Wait()
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

// judged is the sampler's latest sample as the policy reads it: without the records
// behind each CG's usage, which are shown and never judged.
type judged struct{ samples sampler.Samples }

func (j judged) Load() (*view.Sample, <-chan struct{}) {
	s, changed := j.samples.Load()
	if s == nil {
		return nil, changed
	}
	return s.Sample, changed
}
