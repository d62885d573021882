// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"log/slog"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/agent/act/actuate"
	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/agent/kube"
	"github.com/neureality-sdk/nr1-agent/agent/observe/cgroup"
	"github.com/neureality-sdk/nr1-agent/agent/observe/inventory"
	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime"
	"github.com/neureality-sdk/nr1-agent/bpf"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

// actuator builds what carries out enforcement on this node. Missing parts are logged
// and leave their actions failing loudly: no API server (standalone kubelet) means
// Events and evictions are only logged; no bpffs or BPF means no throttle. pins lists
// the throttles attached now (nil when they cannot be read).
func actuator(cfg *config.Config, events *kube.Client, dev theNR1, cri *runtime.Client, cgroups cgroup.Hierarchy, log *slog.Logger) (a *actuate.Actuator, pins []string, closeAll func()) {
	a = &actuate.Actuator{
		Stopper:     cri,
		KillTimeout: cfg.Enforcement.KillTimeout.Duration,
		Log:         log,
	}
	if cgroups.V2 != "" {
		a.Killer = cgroups
	}
	var closers []func()
	if events != nil {
		a.Events, a.Evictor, a.Disruptor = events, events, events
		closers = append(closers, events.Close)
	}
	if thr, err := bpf.LoadThrottle(cfg.ThrottlePins(), nr1Devices(dev.files, log)); err != nil {
		log.Error("throttling unavailable", "err", err)
	} else {
		a.Throttler = thr
		closers = append(closers, func() { _ = thr.Close() })
		var strays []string
		if pins, strays, err = thr.Attached(); err != nil {
			log.Error("reading pinned throttles", "err", err)
		} else if len(pins) > 0 {
			log.Info("throttles left by an earlier run", "cgs", pins)
		}
		if len(strays) > 0 {
			log.Warn("pin directory entries not named by a pod UID: not the agent's, left alone", "dir", cfg.ThrottlePins(), "entries", strays)
		}
	}
	if cfg.Enforcement.Freeze {
		a.Freezer = cgroups
	}
	return a, pins, func() {
		for _, c := range closers {
			c()
		}
	}
}

// namespaceLabels follows, through the API server, the namespace labels that exempt
// CGs; watch is nil without one.
func namespaceLabels(cfg *config.Config, api *kube.API, log *slog.Logger) (labels inventory.NamespaceSource, watch *kube.Namespaces) {
	if api == nil {
		return unlabelled{}, nil
	}
	ns := api.Namespaces(cfg.Enforcement.MaxNamespaceAge.Duration, log)
	return ns, ns
}

// unlabelled stands for the namespaces of a node without an API server (a standalone
// kubelet): no namespace there can be labelled.
type unlabelled struct{}

func (unlabelled) Labels(string, time.Time) (map[string]string, error) { return nil, nil }

// nr1Devices are the NR1 character devices a throttle denies.
func nr1Devices(files []device.ResolvedFile, log *slog.Logger) []bpf.Device {
	var out []bpf.Device
	for _, f := range files {
		if f.Char {
			out = append(out, bpf.Device{Major: unix.Major(f.Rdev), Minor: unix.Minor(f.Rdev)})
		}
	}
	if len(out) == 0 {
		log.Warn("no NR1 character device configured: a throttle denies nothing")
	}
	return out
}
