// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/bpf"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

// Target is one NR1 device file and how its use counts.
type Target struct {
	Resource nr1.Resource
	Path     string
	Measure  Measure
	// Key is the fdinfo key for FdinfoKey targets.
	Key string
	// Char is true for a character device, identified by Rdev; a regular file is
	// identified by (Dev, Ino). Device numbers are the kernel's encoding.
	Char bool
	Dev  uint32
	Ino  uint64
	Rdev uint32
}

// Targets are the resolved device files.
type Targets struct {
	list  []Target
	byKey map[bpf.TargetKey]int
}

// TargetSpec is a device file, as nr1/device resolved it, and how its use counts.
type TargetSpec struct {
	Resource nr1.Resource
	Path     string
	Measure  Measure
	Key      string
	device.Identity
}

// DefaultMeasure is how a resource's device files count by default: mapped bytes for
// DMA memory, open handles for queues.
func DefaultMeasure(r nr1.Resource) Measure {
	if r == nr1.HypervisorQueue {
		return OpenHandles
	}
	return MappedBytes
}

// NewTargets indexes the device files by their kernel identity.
func NewTargets(specs []TargetSpec) (*Targets, error) {
	t := &Targets{byKey: map[bpf.TargetKey]int{}}
	for _, s := range specs {
		tg := Target{Resource: s.Resource, Path: s.Path, Measure: s.Measure, Key: s.Key}
		if s.Char {
			tg.Char, tg.Rdev = true, bpf.KernelDev(s.Rdev)
		} else {
			tg.Dev, tg.Ino = bpf.KernelDev(s.Dev), s.Ino
		}
		k := tg.key()
		if i, dup := t.byKey[k]; dup {
			return nil, fmt.Errorf("NR1 device files %s and %s are the same file", t.list[i].Path, s.Path)
		}
		t.byKey[k] = len(t.list)
		t.list = append(t.list, tg)
	}
	return t, nil
}

func (t Target) key() bpf.TargetKey {
	if t.Char {
		return bpf.TargetKey{Rdev: t.Rdev}
	}
	return bpf.TargetKey{Ino: t.Ino, Dev: t.Dev}
}

// At returns target i.
func (t *Targets) At(i int) Target { return t.list[i] }

// Keys maps each target's kernel identity to its index.
func (t *Targets) Keys() map[bpf.TargetKey]uint32 {
	out := make(map[bpf.TargetKey]uint32, len(t.list))
	for i, tg := range t.list {
		v := uint32(i)
		if tg.Measure == MappedBytes {
			v |= bpf.TargetBytes
		}
		out[tg.key()] = v
	}
	return out
}

// match finds the target of a file by its stat identity (user-space device encoding).
func (t *Targets) match(mode uint32, dev, ino, rdev uint64) (int, bool) {
	var k bpf.TargetKey
	if mode&unix.S_IFMT == unix.S_IFCHR {
		k.Rdev = bpf.KernelDev(rdev)
	} else {
		k.Ino, k.Dev = ino, bpf.KernelDev(dev)
	}
	i, ok := t.byKey[k]
	return i, ok
}

// matchRegular finds a regular-file target by (device, inode) as /proc/PID/maps shows
// them (kernel encoding split into major and minor).
func (t *Targets) matchRegular(major, minor uint32, ino uint64) (int, bool) {
	i, ok := t.byKey[bpf.TargetKey{Ino: ino, Dev: major<<20 | minor}]
	return i, ok
}

// hasChar reports whether a MappedBytes target is a character device: mappings of
// those can only be told by stat-ing the mapped file.
func (t *Targets) hasCharMapping() bool {
	for _, tg := range t.list {
		if tg.Char && tg.Measure == MappedBytes {
			return true
		}
	}
	return false
}

// Specs are the targets of the resolved device files, each counted by its configured
// measure or its resource's default.
func Specs(files []device.ResolvedFile) []TargetSpec {
	out := make([]TargetSpec, 0, len(files))
	for _, f := range files {
		m := DefaultMeasure(f.Resource)
		switch f.Measure {
		case "mappedBytes":
			m = MappedBytes
		case "openHandles":
			m = OpenHandles
		case "fdinfo":
			m = FdinfoKey
		}
		// The agent reads the file's identity at its own path; /proc shows the
		// processes' paths, which the targets match by identity, not by name.
		out = append(out, TargetSpec{Resource: f.Resource, Path: f.Path, Measure: m, Key: f.FdinfoKey, Identity: f.Identity})
	}
	return out
}
