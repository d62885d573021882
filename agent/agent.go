// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"log/slog"

	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/agent/act/enforce"
	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/agent/kube"
	"github.com/neureality-sdk/nr1-agent/agent/measure/cadence"
	"github.com/neureality-sdk/nr1-agent/agent/measure/sampler"
	"github.com/neureality-sdk/nr1-agent/agent/observe/allocation"
	"github.com/neureality-sdk/nr1-agent/agent/observe/cgroup"
	"github.com/neureality-sdk/nr1-agent/agent/observe/inventory"
	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime"
	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

// Agent is the agent assembled: every stage built from the configuration, ready to run.
type Agent struct {
	stages  []func(context.Context) error
	closers []func()
}

// New builds every stage, checking first all that can be checked before serving, so
// that a bad setup stops the agent at startup. api is the connection to the API server,
// nil without one (a standalone kubelet). Read top to bottom, it is the data flow:
// the NR1 offered to the kubelet; the runtime's containers and the kubelet's allocations
// joined into CGs; each CG measured at the cadence; each sample judged and acted on.
func New(cfg *config.Config, api *kube.API, version string, log *slog.Logger) (_ *Agent, err error) {
	a := &Agent{}
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	clk := clock.RealClock{}
	node := ourNode(cfg, api)
	if node != nil {
		cfg = selectMode(cfg, node, log)
	}
	dev, err := findNR1(cfg, clk, log)
	if err != nil {
		return nil, err
	}
	offer, claims, err := newOffer(cfg, api, dev, clk, log)
	if err != nil {
		return nil, err
	}
	cgroups, err := detectCgroups(cfg, log)
	if err != nil {
		return nil, err
	}
	cri := runtime.NewClient(cfg.Runtime.Endpoint)
	a.closeAtEnd(func() { _ = cri.Close() })
	paces := cfg.Sampling.Paces()
	watcher := runtime.NewWatcher(cri, runtime.Options{Resync: cfg.Runtime.Resync.Duration, Poll: paces.RuntimePoll}, log)
	podResources, err := allocation.Dial(cfg.PodResourcesSocket(), dev.capacity)
	if err != nil {
		return nil, err
	}
	a.closeAtEnd(func() { _ = podResources.Close() })
	tracker := allocation.NewTracker(allocation.Options{Lister: podResources, Interval: paces.AllocationRead,
		OnDemand: readOnDemand(cfg, podResources, watcher), Clock: clk, Log: log})
	namespaces, nsWatch := namespaceLabels(cfg, api, log)
	source, targets, bpfRefused, err := footprintSource(cfg, dev.files, cgroups.V2, log)
	if err != nil {
		return nil, err
	}
	a.closeAtEnd(func() { _ = source.Close() })
	followMappers(source, log)
	inv := inventory.NewBuilder(inventory.Options{Runtime: watcher, Allocations: tracker, Namespaces: namespaces, Claims: claims, CDIDir: cfg.Paths.CDI,
		Cgroups: cgroups, CgroupChanges: cgroupChanges(source, a, log), MaxAllocationAge: cfg.Enforcement.MaxAllocationAge.Duration, Log: log})
	changes := following{watchChanges(cfg, source, log)}
	partition := sampler.NewPartitionSampler(cri, watcher, cfg.Sampling.PartitionInterval.Duration, clk, log)
	smp := sampler.New(sampler.Options{Inventory: inv, Source: source, Targets: targets, Partition: partition,
		ScanTimeout: paces.ScanTimeout, Lineage: lineage(cgroups, a, log), Clock: clk, Log: log})
	var events *kube.Client // no API server: nothing told, nothing evicted
	if api != nil {
		events = api.Events(dev.node, log)
	}
	act, pins, closeActuator := actuator(cfg, events, dev, cri, cgroups, log)
	a.closeAtEnd(closeActuator)
	checkpoint := enforce.FileCheckpoint{Path: cfg.EnforcementCheckpoint()}
	enforcer := enforce.NewManager(enforce.Options{Samples: judged{smp}, Policy: cfg.Enforcement, Actuator: act,
		State: restoreEnforcement(checkpoint, cfg.Enforcement.Mode, pins, clk, log), Checkpoint: checkpoint, Clock: clk, Log: log})
	pace := cadence.New(cadence.Options{Interval: cfg.Sampling.Interval.Duration, Idle: cfg.Sampling.IdleInterval.Duration,
		Gap: cfg.Sampling.ChangeGap.Duration, Changes: changes.wake(), Clock: clk,
		// A new container, docker-partition reading or allocation table, a ladder
		// starting, the kubelet failing: each is sampled at once while the kernel's
		// changes are followed (without them, every interval only).
		Wakes: []func() <-chan struct{}{next(watcher), next(partition), next(tracker), enforcer.TurnedBusy, tracker.StartsFailing},
		Needs: []cadence.Need{smp.Unsettled, enforcer.Needs, tracker.Needs}})

	// The kubelet is read at its own cadence: at once (never twice within the gap) when
	// the runtime's pods change, every interval while a read fails or a pod is not in its
	// table, and otherwise only just before each sample, which has it vouch for the table.
	reads := cadence.New(cadence.Options{Interval: paces.AllocationRead, Idle: paces.AllocationRest, Gap: cfg.Sampling.ChangeGap.Duration,
		Wakes: tracker.Wakes(), WakesSuffice: true, Needs: []cadence.Need{tracker.Needs, tracker.Unread}, Clock: clk})
	keeper := prevention(cfg, dev, cgroups, act.Events, a, log)
	var inits initLimits
	if events != nil {
		inits = events
	}
	bookEarly(offer, keeper, cgroups, cri, podResources, inits, log)
	sample := func(ctx context.Context) {
		tracker.Vouch(ctx, paces.VouchWait, paces.VouchFresh)
		if keeper == nil {
			smp.Step(ctx)
			return
		}
		// The gate's counts are read before the measurement, so that a pod's count is
		// settled only when nothing moved it while the footprint was taken.
		keeper.Before()
		smp.Step(ctx)
		s, _ := judged{smp}.Load()
		keeper.After(s)
	}
	a.run(dev.monitor.Run, offer.Run, watcher.Run, partition.Run, enforcer.Run)
	a.run(func(ctx context.Context) error { reads.Run(ctx, tracker.Step); return nil })
	a.run(func(ctx context.Context) error { pace.Run(ctx, sample); return nil })
	if r, ok := offer.(recoverer); ok {
		a.run(func(ctx context.Context) error { return r.RecoverFrom(ctx, tracker) })
	}
	if nsWatch != nil {
		a.run(func(ctx context.Context) error { nsWatch.Run(ctx); return nil })
	}
	a.run(changes.run)
	if p := labelPublisher(cfg, node, &dev, keeper != nil, clk, log); p != nil {
		a.run(p.Run)
	}
	err = a.expose(cfg, version, exposed{dev: dev, offer: offer, watcher: watcher, tracker: tracker, namespaces: nsWatch,
		inventory: inv, partition: partition, sampler: smp, source: source.Name(), bpfRefused: bpfRefused, unseen: unseen(source, log), changes: changes,
		cadence: pace, enforcer: enforcer, actuator: act, prevention: cfg.Prevention.Enabled, keeper: keeper}, log)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Run runs every stage until ctx ends or one fails, then closes what New opened.
func (a *Agent) Run(ctx context.Context) error {
	defer a.close()
	g, ctx := errgroup.WithContext(ctx)
	for _, stage := range a.stages {
		g.Go(func() error { return stage(ctx) })
	}
	return g.Wait()
}

func (a *Agent) run(stages ...func(context.Context) error) { a.stages = append(a.stages, stages...) }

func (a *Agent) closeAtEnd(c func()) { a.closers = append(a.closers, c) }

// close closes what New opened, the last opened first.
func (a *Agent) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// theNR1 is the node's NR1 as found at startup.
type theNR1 struct {
	node     string
	inv      *device.Inventory
	capacity nr1.Amounts
	sources  nr1.PerResource[device.CapacitySource]
	// files are resolved once: the device plugin, the footprint targets and the
	// throttle share them, and health then checks they are still the same files.
	files   []device.ResolvedFile
	monitor *device.Monitor
}

// findNR1 reads the NR1's capacity and resolves its files.
func findNR1(cfg *config.Config, clk clock.WithTicker, log *slog.Logger) (theNR1, error) {
	d := theNR1{node: nodeName(cfg), inv: device.NewInventory(cfg.NR1, cfg.Paths.Sysfs, cfg.Paths.Dev)}
	var err error
	if d.capacity, d.sources, err = d.inv.Capacity(); err != nil {
		return d, err
	}
	for _, r := range nr1.All {
		log.Info("NR1 capacity", "resource", r.Name(), "units", d.capacity[r], "source", d.sources[r])
	}
	if d.files, err = d.inv.Resolve(); err != nil {
		return d, err
	}
	d.monitor = device.NewMonitor(d.inv, cfg.DevicePlugin.HealthInterval.Duration, clk, log)
	return d, nil
}

// detectCgroups finds the host's cgroup hierarchies.
func detectCgroups(cfg *config.Config, log *slog.Logger) (cgroup.Hierarchy, error) {
	cgroups, err := cgroup.Detect(cfg.Paths.Cgroupfs)
	if err != nil {
		return cgroups, fmt.Errorf("paths.cgroupfs: %w", err)
	}
	log.Info("cgroups", "mode", cgroups.Mode.String(), "v2", cgroups.V2)
	if cgroups.V2 == "" {
		// Processes are attributed to containers by their v2 cgroup: without one, every
		// CG's usage is uncertain and no ladder can start (a lower bound of nothing).
		log.Error("no cgroup v2 hierarchy: no process can be attributed to a container, nothing will be enforced", "cgroupfs", cfg.Paths.Cgroupfs)
	}
	return cgroups, nil
}

// lineage places the cgroups a pod nests past PATH_MAX below its own; nil without a v2
// tree, or when the mount cannot be opened (logged: such a pod's deepest processes are
// then no CG's).
func lineage(cgroups cgroup.Hierarchy, a *Agent, log *slog.Logger) sampler.Lineage {
	if cgroups.V2 == "" {
		return nil
	}
	l, err := cgroup.OpenLineage(cgroups.V2)
	if err != nil {
		log.Error("cgroups nested past PATH_MAX cannot be placed below their pod's", "err", err)
		return nil
	}
	a.closeAtEnd(func() { _ = l.Close() })
	return l
}

// readOnDemand is how the tracker reads the kubelet: on demand when the refresh is
// longer than the interval, the whole table every interval otherwise (nil).
func readOnDemand(cfg *config.Config, asker allocation.Asker, watcher *runtime.Watcher) *allocation.OnDemand {
	if cfg.Sampling.AllocationRefresh.Duration <= cfg.Sampling.Interval.Duration {
		return nil
	}
	return &allocation.OnDemand{Asker: asker, Refresh: cfg.Sampling.AllocationRefresh.Duration,
		Pods: inventory.RunningPods{Runtime: watcher}}
}

// restoreEnforcement is the enforcement state from its checkpoint, its throttles those
// attached now; a new state when the checkpoint cannot be read.
func restoreEnforcement(checkpoint enforce.FileCheckpoint, mode enforce.Mode, pins []string, clk clock.Clock, log *slog.Logger) *enforce.State {
	st, err := checkpoint.Restore(clk.Now())
	if err != nil {
		log.Error("enforcement checkpoint unreadable: ladders start afresh", "err", err)
	}
	if pins != nil {
		st.SyncThrottles(pins)
	}
	log.Info("enforcement", "mode", mode, "checkpoint", checkpoint.Path, "throttled", st.Throttled())
	return st
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

// next returns a stage's channel closed at its next value.
func next[T any](stage interface{ Load() (T, <-chan struct{}) }) func() <-chan struct{} {
	return func() <-chan struct{} {
		_, changed := stage.Load()
		return changed
	}
}
