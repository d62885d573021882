package agent

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/footprint"
)

// footprintSource resolves the NR1 device files and opens the configured source: BPF
// when its iterators load (or when asked), procfs otherwise.
func footprintSource(cfg *config.Config, cgroupV2 string, log *slog.Logger) (footprint.Source, *footprint.Targets, error) {
	var specs []footprint.TargetSpec
	for _, r := range nr1.All {
		for _, f := range cfg.NR1.Resources[r].Files {
			m := footprint.DefaultMeasure(r)
			switch f.Measure {
			case "mappedBytes":
				m = footprint.MappedBytes
			case "openHandles":
				m = footprint.OpenHandles
			case "fdinfo":
				m = footprint.FdinfoKey
			}
			specs = append(specs, footprint.TargetSpec{Resource: r, Path: f.Path, Measure: m, Key: f.FdinfoKey})
		}
	}
	targets, err := footprint.Resolve(specs)
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
