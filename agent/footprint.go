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
