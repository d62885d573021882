// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/agent/measure/cadence"
	"github.com/neureality-sdk/nr1-agent/agent/observe/inventory"
	"github.com/neureality-sdk/nr1-agent/bpf"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
	"github.com/neureality-sdk/nr1-agent/nr1/footprint"
)

// footprintSource opens the configured source on the NR1 device files: BPF when its
// iterators load and attribute (or when asked), procfs otherwise. refused says why BPF
// was wanted and not used ("unattributable" or "unavailable"), for the metrics.
func footprintSource(cfg *config.Config, files []device.ResolvedFile, cgroupV2 string, log *slog.Logger) (src footprint.Source, targets *footprint.Targets, refused string, err error) {
	targets, err = footprint.NewTargets(footprint.Specs(files))
	if err != nil {
		return nil, nil, "", err
	}
	if cfg.Sampling.Source != "procfs" {
		b, err := footprint.NewBPF(cfg.Paths.Procfs, cgroupV2, targets)
		if err == nil {
			log.Info("footprint source", "source", "bpf")
			return b, targets, "", nil
		}
		if cfg.Sampling.Source == "bpf" {
			return nil, nil, "", fmt.Errorf("sampling.source bpf: %w", err)
		}
		refused = "unavailable"
		if errors.Is(err, footprint.ErrUnattributable) {
			refused = "unattributable"
		}
		log.Warn("BPF footprint source refused, using procfs", "reason", refused, "err", err)
	}
	if cgroupV2 == "" {
		return nil, nil, "", errors.New("the procfs footprint source needs a cgroup v2 hierarchy (hybrid or unified)")
	}
	log.Info("footprint source", "source", "procfs")
	return footprint.NewProcfs(cfg.Paths.Procfs, cgroupV2, targets), targets, refused, nil
}

// unseen names what the footprint source cannot see on this node, each logged: a BPF
// source's 32-bit system calls on a kernel with their entries and no kprobes
// (bpf.CompatUnseen). The procfs source walks every mapping at every sample and sees no
// send in flight at all, which its refusal of BPF says.
func unseen(src footprint.Source, log *slog.Logger) []string {
	if _, ok := src.(*footprint.BPF); !ok {
		return nil
	}
	if err := bpf.CompatUnseen(); err != nil {
		log.Warn("a CG's 32-bit system calls go unseen on this node: its int $0x80 mappings are found within the full pass only, its 32-bit sends are charged to the receiving socket's creator (the budget gate follows its 32-bit opens and ptrace at every syscall's exit instead); a kernel with kprobes follows them",
			"err", err)
		return []string{"32-bit-syscalls"}
	}
	return nil
}

// cgroupChanges counts the node's cgroups made and removed, so that the inventory walks
// a pod's cgroups only after one changed: with the BPF source only (a kernel that
// refuses it would refuse this too); nil, every pod's cgroups walked at every sample,
// when the tracepoints cannot be attached, which is logged.
func cgroupChanges(src footprint.Source, a *Agent, log *slog.Logger) inventory.CgroupChanges {
	if _, ok := src.(*footprint.BPF); !ok {
		return nil
	}
	c, err := bpf.WatchCgroups()
	if err != nil {
		log.Warn("following cgroups as they are made and removed is refused: every pod's cgroups are walked at every sample", "err", err)
		return nil
	}
	a.closeAtEnd(func() { _ = c.Close() })
	return c
}

// followMappers makes the BPF source's scans walk the mappings of the processes that
// may map an NR1 file only; when the tracepoints cannot be attached, every process's
// are walked at every sample, which is logged.
func followMappers(src footprint.Source, log *slog.Logger) {
	b, ok := src.(*footprint.BPF)
	if !ok {
		return
	}
	if err := b.FollowMappers(); err != nil {
		log.Warn("following the processes that map NR1 files is refused: every process's mappings are walked at every sample", "err", err)
	}
}

// watchChanges follows the processes taking NR1 files as it happens, when the source is
// BPF and sampling.onChange asks: nil otherwise, or when the tracepoints cannot be
// attached (the sampler then samples at its interval only, which is logged).
func watchChanges(cfg *config.Config, src footprint.Source, log *slog.Logger) *footprint.Changes {
	b, ok := src.(*footprint.BPF)
	if !ok || !cfg.Sampling.OnChange {
		return nil
	}
	c, err := b.WatchChanges(log)
	if err != nil {
		log.Warn("following NR1 files as they are opened and mapped is refused: sampling at the interval only", "interval", cfg.Sampling.Interval.Duration, "err", err)
		return nil
	}
	log.Info("sampling on change", "gap", cfg.Sampling.ChangeGap.Duration, "interval", cfg.Sampling.Interval.Duration)
	return c
}

// following is the kernel's reports of NR1 files taken, when followed: c is nil when
// they are not.
type following struct{ c *footprint.Changes }

// wake is the channel the reports wake samples on; nil when not followed.
func (f following) wake() <-chan struct{} {
	if f.c == nil {
		return nil
	}
	return f.c.Wake()
}

func (f following) run(ctx context.Context) error {
	if f.c != nil {
		f.c.Run(ctx)
	}
	return nil
}

// counts are the reports' counters; nil when not followed.
func (f following) counts() cadence.ChangeCounts {
	if f.c == nil {
		return nil
	}
	return f.c
}
