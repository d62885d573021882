package footprint

import (
	"context"
	"fmt"
	"time"

	"github.com/neureality-sdk/nr1-agent/bpf"
)

// BPF is the footprint source that runs the task_file and task_vma iterators: one pass
// in the kernel over every task, with only the target files reported back.
type BPF struct {
	fp       *bpf.Footprint
	targets  *Targets
	procRoot string // for fdinfo values
}

// NewBPF loads the iterators; an error means the kernel cannot run them and procfs must
// be used instead.
func NewBPF(procRoot string, targets *Targets) (*BPF, error) {
	fp, err := bpf.LoadFootprint()
	if err != nil {
		return nil, err
	}
	if err := fp.SetTargets(targets.Keys()); err != nil {
		_ = fp.Close()
		return nil, err
	}
	return &BPF{fp: fp, targets: targets, procRoot: procRoot}, nil
}

// Name is "bpf".
func (b *BPF) Name() string { return "bpf" }

// Close unloads the programs.
func (b *BPF) Close() error { return b.fp.Close() }

// Scan runs both iterators.
func (b *BPF) Scan(_ context.Context) (*Scan, error) {
	start := time.Now()
	s := &Scan{Source: b.Name()}
	err := b.fp.VMAs(func(r *bpf.Record) {
		s.Mappings = append(s.Mappings, Mapping{
			CgroupID: r.CgroupId, PID: int(r.Pid), Target: int(r.Target), Start: r.Start, Size: r.Size, Offset: r.Pgoff << pageShift,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("bpf footprint: %w", err)
	}
	err = b.fp.Files(func(r *bpf.Record) {
		s.Handles = append(s.Handles, Handle{CgroupID: r.CgroupId, PID: int(r.Pid), FD: int(r.Fd), Target: int(r.Target), Description: r.File})
	})
	if err != nil {
		return nil, fmt.Errorf("bpf footprint: %w", err)
	}
	fillFdinfo(b.procRoot, b.targets, s.Handles)
	s.Took = time.Since(start)
	return s, nil
}
