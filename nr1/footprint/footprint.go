// Package footprint measures what processes hold of the NR1 device files: the bytes of
// their mappings and their open file descriptions, per cgroup, with the detail behind
// each figure. Two sources give identical numbers: BPF iterators (cheap) and procfs (the
// fallback).
package footprint

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Measure is how a target's use is counted.
type Measure int

// The measures.
const (
	// MappedBytes sums the sizes of mappings of the target.
	MappedBytes Measure = iota
	// OpenHandles counts open file descriptions of the target: an fd shared by fork or
	// dup is one, two opens are two.
	OpenHandles
	// FdinfoKey sums a key of /proc/PID/fdinfo/FD (drm-usage-stats format) over the open
	// file descriptions of the target.
	FdinfoKey
)

// Mapping is one mapping of a target.
type Mapping struct {
	CgroupID uint64 `json:"cgroupID"`
	PID      int    `json:"pid"`
	Target   int    `json:"target"`
	Start    uint64 `json:"start"`
	Size     uint64 `json:"size"`
	Offset   uint64 `json:"offset"`
}

// Handle is one fd open on a target.
type Handle struct {
	CgroupID uint64 `json:"cgroupID"`
	PID      int    `json:"pid"`
	FD       int    `json:"fd"`
	Target   int    `json:"target"`
	// Description is the same for fds sharing one open file description within a scan.
	Description uint64 `json:"description"`
	// Value is the fdinfo key's value, for FdinfoKey targets.
	Value int64 `json:"value,omitempty"`
}

// Scan is what one pass over every process found.
type Scan struct {
	Source   string        `json:"source"`
	Took     time.Duration `json:"took"`
	Mappings []Mapping     `json:"mappings"`
	Handles  []Handle      `json:"handles"`
	// Unreadable counts processes whose /proc entries were refused (procfs only).
	Unreadable int `json:"unreadable,omitempty"`
}

// Source scans every process on the host.
type Source interface {
	Name() string
	Scan(ctx context.Context) (*Scan, error)
	Close() error
}

// Usage is what a cgroup holds of each resource, in base units: bytes for memory
// resources (mapped bytes), handles (or the fdinfo value) for the others.
type Usage = nr1.Amounts

// ByCgroup sums the scan per cgroup and resource, by each target's measure.
func (s *Scan) ByCgroup(targets *Targets) map[uint64]Usage {
	out := map[uint64]Usage{}
	add := func(cgroup uint64, r nr1.Resource, v int64) {
		u := out[cgroup]
		u[r] += v
		out[cgroup] = u
	}
	for _, m := range s.Mappings {
		if t := targets.At(m.Target); t.Measure == MappedBytes {
			add(m.CgroupID, t.Resource, int64(m.Size)) //nolint:gosec // a mapping's size fits
		}
	}
	type desc struct{ cgroup, id uint64 }
	seen := map[desc]bool{}
	for _, h := range s.Handles {
		t := targets.At(h.Target)
		if t.Measure == MappedBytes {
			continue
		}
		d := desc{h.CgroupID, h.Description}
		if seen[d] {
			continue
		}
		seen[d] = true
		if t.Measure == OpenHandles {
			add(h.CgroupID, t.Resource, 1)
		} else {
			add(h.CgroupID, t.Resource, h.Value)
		}
	}
	return out
}

// Normalize sorts the detail so that two scans of the same state compare equal, and
// renumbers descriptions by first appearance (their raw values are source-specific).
func (s *Scan) Normalize() {
	slices.SortFunc(s.Mappings, func(a, b Mapping) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Start, b.Start))
	})
	slices.SortFunc(s.Handles, func(a, b Handle) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.FD, b.FD))
	})
	renum := map[uint64]uint64{}
	for i := range s.Handles {
		id, ok := renum[s.Handles[i].Description]
		if !ok {
			id = uint64(len(renum) + 1)
			renum[s.Handles[i].Description] = id
		}
		s.Handles[i].Description = id
	}
}

func (m Measure) String() string {
	switch m {
	case MappedBytes:
		return "mappedBytes"
	case OpenHandles:
		return "openHandles"
	case FdinfoKey:
		return "fdinfo"
	}
	return fmt.Sprintf("Measure(%d)", int(m))
}
