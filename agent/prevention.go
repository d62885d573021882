// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/neureality-sdk/nr1-agent/agent/act/prevent"
	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/agent/observe/allocation"
	"github.com/neureality-sdk/nr1-agent/agent/observe/cgroup"
	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime"
	"github.com/neureality-sdk/nr1-agent/bpf"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// refusalEventGap is the least time between two Events telling one pod's refusals.
const refusalEventGap = time.Minute

// prevention loads the budget gate when the configuration turns it on, and returns the
// keeper that books it from the samples. It is nil when prevention is off or the gate
// cannot load on this node (then why is logged, and the ladders alone act). The gate
// stays loaded when the agent stops: its pins keep it refusing until an agent takes it
// over or `nr1-agent cleanup` removes it.
func prevention(cfg *config.Config, dev theNR1, cgroups cgroup.Hierarchy, events prevent.Events, a *Agent, log *slog.Logger) *prevent.Keeper {
	if !cfg.Prevention.Enabled {
		// A gate an earlier agent left would go on refusing on counts nobody settles.
		if err := bpf.RemoveGate(cfg.GatePins()); err != nil {
			log.Error("prevention off, and the budget gate left by an earlier agent could not be removed", "err", err)
		}
		return nil
	}
	g, err := loadGate(cfg, dev, cgroups)
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		// An earlier agent's gate whose maps this one cannot read: removed, which lifts
		// every booking until this agent's first sample books them again.
		log.Warn("the budget gate left by an earlier agent is of another layout: replacing it", "err", err)
		if err = bpf.RemoveGate(cfg.GatePins()); err == nil {
			g, err = loadGate(cfg, dev, cgroups)
		}
	}
	if err != nil {
		log.Error("prevention unavailable: opens past a CG's booking are only caught after the fact", "err", err)
		return nil
	}
	a.closeAtEnd(func() { _ = g.Close() })
	// How a grant is linked to its open: by the registers, or by the opens' entry
	// tracepoints where they are read wrong (then every open of the node pays more).
	linking := "registers"
	if !g.ByRegisters {
		linking = "entry tracepoints: " + g.NotByRegisters
	}
	// How 32-bit opens are followed: by probes of their entries, or, on a kernel
	// without kprobes, at every syscall's exit (then every syscall of the node pays);
	// or not at all, and why.
	compat := string(bpf.CompatByProbes)
	switch {
	case g.CompatByExit:
		compat = string(bpf.CompatByExit)
	case g.CompatUnfollowed != "":
		compat = "none: " + g.CompatUnfollowed
	}
	log.Info("prevention", "resource", prevent.Gated.Name(), "unknown", cfg.Prevention.Unknown, "pins", cfg.GatePins(), "linking", linking, "compat", compat)
	return prevent.New(prevent.Options{Gate: gate{g}, Events: events, EventGap: refusalEventGap, Log: log})
}

func loadGate(cfg *config.Config, dev theNR1, cgroups cgroup.Hierarchy) (*bpf.Gate, error) {
	var queues []bpf.Device
	for _, f := range dev.files {
		if f.Char && f.Resource == prevent.Gated {
			queues = append(queues, bpf.Device{Major: unix.Major(f.Rdev), Minor: unix.Minor(f.Rdev)})
		}
	}
	if len(queues) == 0 {
		return nil, fmt.Errorf("no %s character device configured", nr1.HypervisorQueue.Name())
	}
	pods, err := cgroups.KubepodsDir()
	if err != nil {
		return nil, err
	}
	if pods == "" {
		return nil, errors.New("no kubepods cgroup in a v2 tree: the gate is attached above every pod")
	}
	g, err := bpf.LoadGate(bpf.GateOptions{PinDir: cfg.GatePins(), Devices: queues, RefuseUnknown: cfg.Prevention.Unknown == config.UnknownRefuse})
	if err != nil {
		return nil, err
	}
	if err := g.Attach(pods); err != nil {
		_ = g.Close()
		return nil, err
	}
	return g, nil
}

// preparer is an offer that tells of a pod's booking before its containers run: the
// DRA driver, at its prepare step.
type preparer interface {
	OnPrepared(book func(pod types.UID, a nr1.Amounts))
}

// starter is an offer that can have a container wait, before it is made, for what must
// be done first: the device plugins, at PreStartContainer.
type starter interface {
	OnPreStart(r nr1.Resource, do func(ctx context.Context))
}

// bookEarly has the offer, when it can, book each pod in the gate before it runs: the
// DRA driver as it prepares the pod's claims, the device plugin of the queues before
// each container given some is made. inits, when not nil, tells the init containers'
// bookings, which the kubelet does not list.
func bookEarly(o offer, keeper *prevent.Keeper, cgroups cgroup.Hierarchy, pods readyPods, alloc podAllocation, inits initLimits, log *slog.Logger) {
	if keeper == nil {
		return
	}
	book := func(uid string, queues nr1.Units, when string) {
		// The kubelet makes the pod's cgroup before it prepares its claims or starts its
		// containers, but not necessarily before a claim's prepare step.
		var id uint64
		if dir, err := cgroups.PodDir(uid); err == nil && dir != "" {
			id, _ = cgroup.ID(dir)
		}
		if err := keeper.BookPod(uid, id, int64(queues)); err != nil {
			log.Error("budget gate: booking a pod "+when, "pod", uid, "err", err)
			return
		}
		log.Debug("budget gate: pod booked "+when, "pod", uid, "queues", queues, "cgroup", id)
	}
	switch o := o.(type) {
	case preparer:
		o.OnPrepared(func(pod types.UID, a nr1.Amounts) { book(string(pod), a[prevent.Gated], "as its claims were prepared") })
	case starter:
		b := &startBooker{keeper: keeper, pods: pods, alloc: alloc, inits: inits, none: map[string]bool{}, log: log,
			book: func(uid string, queues nr1.Units) { book(uid, queues, "before its container started") }}
		o.OnPreStart(prevent.Gated, b.run)
	}
}

// readyPods lists the runtime's ready pod sandboxes.
type readyPods interface {
	ReadyPods(ctx context.Context) ([]*runtime.Pod, error)
}

// podAllocation reads one pod's allocation from the kubelet.
type podAllocation interface {
	Get(ctx context.Context, pod allocation.PodKey) (map[string]allocation.Listed, error)
}

// initLimits reads the largest limit of a resource among a pod's init containers that
// run to completion, from the API server (kube.Client).
type initLimits interface {
	InitLimit(ctx context.Context, namespace, pod, uid, resource string) (int64, error)
}

// preStartWait bounds what booking adds to a container's start: past it, the container
// starts and the gate's policy for unknown pods holds it until a sample books its pod.
const preStartWait = 2 * time.Second

// startBooker books, as a container given queues is about to be made, each ready pod
// the gate does not know and the kubelet lists with an NR1 allocation. The pod whose
// container it is is among them: the kubelet allocated its devices at admission and
// made its sandbox before it asks. Pods outside the gate are few, since the samples
// book every CG they see; pods listed with nothing are remembered while they run.
// A pod's booking is what Kubernetes books for it: its listed containers' sum, or its
// largest init container's when more. The kubelet lists no init container that runs to
// completion, and such a container starts first: booked at the main containers' sum, it
// would be refused inside its own booking.
type startBooker struct {
	keeper interface{ Knows(uid string) bool }
	pods   readyPods
	alloc  podAllocation
	inits  initLimits // nil: the listed sum only
	book   func(uid string, queues nr1.Units)
	log    *slog.Logger

	mu   sync.Mutex // one pass at a time: containers starting together share the pods
	none map[string]bool
}

func (b *startBooker) run(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, preStartWait)
	defer cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	pods, err := b.pods.ReadyPods(ctx)
	if err != nil {
		b.log.Warn("budget gate: a container starts before its pod is booked", "err", err)
		return
	}
	ready := make(map[string]bool, len(pods))
	for _, p := range pods {
		ready[p.UID] = true
		if b.none[p.UID] || b.keeper.Knows(p.UID) {
			continue
		}
		listed, err := b.alloc.Get(ctx, allocation.PodKey{Namespace: p.Namespace, Name: p.Name})
		if err != nil {
			b.log.Warn("budget gate: a pod's allocation is unread as a container starts", "namespace", p.Namespace, "pod", p.Name, "err", err)
			continue
		}
		var sum nr1.Amounts
		for _, l := range listed {
			sum = nr1.Add(sum, l.Units)
		}
		queues, unread := sum[prevent.Gated], false
		if b.inits != nil {
			n, err := b.inits.InitLimit(ctx, p.Namespace, p.Name, p.UID, prevent.Gated.Name())
			if unread = err != nil; unread {
				// Booked at its listed sum: its first sample books its init containers.
				b.log.Warn("budget gate: a pod's init containers are unread as a container starts", "namespace", p.Namespace, "pod", p.Name, "err", err)
			}
			queues = max(queues, nr1.Units(n))
		}
		if sum == (nr1.Amounts{}) && queues == 0 {
			if !unread {
				b.none[p.UID] = true
			}
			continue
		}
		b.book(p.UID, queues)
	}
	for uid := range b.none {
		if !ready[uid] {
			delete(b.none, uid)
		}
	}
}

// gate is the bpf package's gate as the keeper reads its counts.
type gate struct{ *bpf.Gate }

func (g gate) Count(pod uint64) (prevent.Count, bool) {
	c, ok := g.Gate.Count(pod)
	return prevent.Count(c), ok
}
