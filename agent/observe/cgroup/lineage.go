// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/cgroupfs"
)

// maxClimb only guards against a file system that never reaches its root: the kernel
// sets no depth on a cgroup tree, and a pod allowed to write its cgroups can nest them
// as deep as its memory allows, which is far less than this.
const maxClimb = 1 << 24

// Lineage finds which of a set of cgroups a cgroup is below, by its id alone: it opens
// the cgroup by its file handle and climbs "..", one descriptor at a time, with no path.
// A pod allowed to write its cgroups can nest them past PATH_MAX, where no path reaches
// them and a walk from the pod's cgroup stops (Tree); what its processes hold there is
// still the pod's. A cgroup's ancestors never change (the kernel renames a cgroup only
// within its parent), so what a climb found stays true while its cgroup lives.
type Lineage struct {
	mount   int // the cgroup2 mount, opened: the handles' root
	dev     uint64
	rootIno uint64

	mu    sync.Mutex
	found map[uint64]uint64 // cgroup id → the id of a cgroup it was found below
}

// OpenLineage opens the cgroup2 mount at v2 for climbs. Opening a handle needs
// CAP_DAC_READ_SEARCH, which the agent has.
func OpenLineage(v2 string) (*Lineage, error) {
	fd, err := unix.Open(v2, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup2 mount %s: %w", v2, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("cgroup2 mount %s: %w", v2, err)
	}
	return &Lineage{mount: fd, dev: st.Dev, rootIno: st.Ino, found: map[uint64]uint64{}}, nil
}

// Close closes the mount's descriptor.
func (l *Lineage) Close() error {
	if err := unix.Close(l.mount); err != nil {
		return fmt.Errorf("closing the cgroup2 mount: %w", err)
	}
	return nil
}

// Below returns the nearest ancestor of cgroup id that is in set; false when none is, or
// the cgroup is gone. A climb that found one is remembered for as long as that ancestor
// is in the sets asked with: a pod's deepest cgroup costs one climb, not one a sample.
func (l *Lineage) Below(id uint64, in func(uint64) bool) (uint64, bool, error) {
	l.mu.Lock()
	a, known := l.found[id]
	l.mu.Unlock()
	if known && in(a) {
		return a, true, nil
	}
	a, ok, err := l.climb(id, in)
	if ok {
		l.mu.Lock()
		l.found[id] = a
		l.mu.Unlock()
	}
	return a, ok, err
}

// Forget drops what was found of the cgroups keep does not name.
func (l *Lineage) Forget(keep func(uint64) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.found {
		if !keep(id) {
			delete(l.found, id)
		}
	}
}

func (l *Lineage) climb(id uint64, in func(uint64) bool) (uint64, bool, error) {
	fd, err := cgroupfs.OpenID(l.mount, id, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if cgroupfs.Gone(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("cgroup %d: %w", id, err)
	}
	defer func() { _ = unix.Close(fd) }()
	for range maxClimb {
		parent, err := unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return 0, false, fmt.Errorf("climbing from cgroup %d: %w", id, err)
		}
		_ = unix.Close(fd)
		fd = parent
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return 0, false, fmt.Errorf("climbing from cgroup %d: %w", id, err)
		}
		if st.Dev != l.dev {
			return 0, false, nil // above the mount: below none
		}
		if in(st.Ino) {
			return st.Ino, true, nil
		}
		if st.Ino == l.rootIno {
			return 0, false, nil
		}
	}
	return 0, false, fmt.Errorf("cgroup %d: more than %d levels deep", id, maxClimb)
}
