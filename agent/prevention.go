// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/neureality-sdk/nr1-agent/agent/act/prevent"
	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/agent/observe/cgroup"
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
	log.Info("prevention", "resource", prevent.Gated.Name(), "unknown", cfg.Prevention.Unknown, "pins", cfg.GatePins())
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

// bookEarly has the offer, when it can, book each pod in the gate before it runs.
func bookEarly(o offer, keeper *prevent.Keeper, cgroups cgroup.Hierarchy, log *slog.Logger) {
	p, ok := o.(preparer)
	if keeper == nil || !ok {
		return
	}
	p.OnPrepared(func(pod types.UID, a nr1.Amounts) {
		// The kubelet may have made the pod's cgroup before it prepared its claims.
		var id uint64
		if dir, err := cgroups.PodDir(string(pod)); err == nil && dir != "" {
			id, _ = cgroup.ID(dir)
		}
		if err := keeper.BookPod(string(pod), id, int64(a[prevent.Gated])); err != nil {
			log.Error("budget gate: booking a pod as its claims are prepared", "pod", pod, "err", err)
			return
		}
		log.Debug("budget gate: pod booked as its claims were prepared", "pod", pod, "queues", a[prevent.Gated], "cgroup", id)
	})
}

// gate is the bpf package's gate as the keeper reads its counts.
type gate struct{ *bpf.Gate }

func (g gate) Count(pod uint64) (prevent.Count, bool) {
	c, ok := g.Gate.Count(pod)
	return prevent.Count(c), ok
}
