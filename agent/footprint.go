package agent

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
	"github.com/neureality-sdk/nr1-agent/nr1/footprint"
)

// footprintSource opens the configured source on the NR1 device files: BPF when its
// iterators load (or when asked), procfs otherwise.
func footprintSource(cfg *config.Config, files []device.ResolvedFile, cgroupV2 string, log *slog.Logger) (footprint.Source, *footprint.Targets, error) {
	targets, err := footprint.NewTargets(footprint.Specs(files))
	if err != nil {
		return nil, nil, err
	}
	if cfg.Sampling.Source != "procfs" {
		b, err := footprint.NewBPF(cfg.Paths.Procfs, targets)
		if err == nil {
			log.Info("footprint source", "source", "bpf")
			return b, targets, nil
		}
		if cfg.Sampling.Source == "bpf" {
			return nil, nil, fmt.Errorf("sampling.source bpf: %w", err)
		}
		log.Warn("BPF footprint unavailable, using procfs", "err", err)
	}
	if cgroupV2 == "" {
		return nil, nil, errors.New("the procfs footprint source needs a cgroup v2 hierarchy (hybrid or unified)")
	}
	log.Info("footprint source", "source", "procfs")
	return footprint.NewProcfs(cfg.Paths.Procfs, cgroupV2, targets), targets, nil
}
