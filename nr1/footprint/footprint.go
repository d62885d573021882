// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"context"
	"fmt"
	"time"

	"github.com/neureality-sdk/nr1-agent/bpf"
)

// Measure is how a target's use is counted.
type Measure int

// The measures.
const (
	// MappedBytes counts the bytes of the target's distinct file ranges mapped: pages
	// mapped several times (fork, a second mmap, another container) are held once.
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
	// Description is the open file description the mapping keeps open, for a target
	// counted in handles: a queue mapped and then closed is still held. Zero for a
	// target measured in bytes, or when the source cannot tell (procfs, which names the
	// mapping's cgroup in Scan.Uncounted instead).
	Description uint64 `json:"description,omitempty"`
}

// Handle is one fd open on a target; or (FD -1) one open file description of a target
// registered with an io_uring of process PID, or (PID 0, FD -1) in flight over a unix
// socket, for the sender's cgroup.
type Handle struct {
	CgroupID uint64 `json:"cgroupID"`
	// Up are the nearest ancestors of CgroupID, nearest first (0 past the root), for a
	// handle in flight: its sender's container may be gone since, and its pod is then
	// who holds it.
	Up     [3]uint64 `json:"up,omitzero"`
	PID    int       `json:"pid"`
	FD     int       `json:"fd"`
	Target int       `json:"target"`
	// Description is the same for fds sharing one open file description within a scan.
	Description uint64 `json:"description"`
	// Value is the fdinfo key's value, for FdinfoKey targets.
	Value int64 `json:"value,omitempty"`
}

// HeavyFDs is how many fds a cgroup's processes hold, one alone or all together, past
// which a scan names it (Scan.Heavy).
const HeavyFDs = bpf.HeavyFDs

// HeavyWalk is how many fds a scan walks at most of the processes it walks last, those of
// heavy cgroups: twice HeavyFDs, tens of milliseconds of a core.
const HeavyWalk = 2 * HeavyFDs

// LightWalk is how many fds, all together, the units walked first (those no scan named
// heavy) hold at most: past it, the largest of them are named heavy too (Scan.Heavy), so
// that a flood spread over many pods, each below HeavyFDs, is walked last, each pod its
// own walk, and the time it takes is theirs (unfinished, unreached) rather than a cutoff,
// the node's uncertainty, which every CG past it would share. One heavy walk's worth: an
// honest node's processes hold a small part of it.
const LightWalk = HeavyWalk

// HeavyRest is how long a heavy unit found past its walk rests after each walk: the scans
// in between pass over its processes whole, unfinished by its doing as a walk would
// leave it, and find what its sockets hold in flight and its mappings only. The scans a
// change starts, a gap apart, then cost the node about what they cost without the
// flood, and the unit's walk, tens of milliseconds, is paid once a rest. Just under the
// default sampling interval (1 s), so that each scan at the interval walks it, whatever
// the timers' jitter.
const HeavyRest = 900 * time.Millisecond

// Scan is what one pass over every process found.
type Scan struct {
	Source string        `json:"source"`
	Took   time.Duration `json:"took"`
	// Phases are where Took went, in the order the scan went through them (BPF source
	// only): a slow scan says what made it slow.
	Phases   []Phase   `json:"phases,omitempty"`
	Mappings []Mapping `json:"mappings"`
	Handles  []Handle  `json:"handles"`
	// Unreadable counts processes whose /proc entries were refused (procfs only).
	Unreadable int `json:"unreadable,omitempty"`
	// Cutoff is 0 when every process was read. A scan that ran out of its time (its
	// context's deadline) stops early: then only the processes with a PID below Cutoff
	// were read completely, and the records of the others are missing or partial.
	Cutoff int `json:"cutoff,omitempty"`
	// InFlightUnread are the cgroups (v2 ids) one of whose sockets holds more target
	// files in flight than the scan reads: their handles are a lower bound, by their own
	// doing.
	InFlightUnread []uint64 `json:"inFlightUnread,omitempty"`
	// InFlightForeign are the cgroups (v2 ids) with a socket of a network namespace the
	// scan could not enter: their handles are a lower bound, by the node's failing.
	InFlightForeign []uint64 `json:"inFlightForeign,omitempty"`
	// RingUnread are the cgroups (v2 ids) with an io_uring holding files the scan did
	// not read: their handles are a lower bound, by their own doing.
	RingUnread []uint64 `json:"ringUnread,omitempty"`
	// RingLayout are the cgroups (v2 ids) with an io_uring of a layout the source does
	// not know: their handles are a lower bound, by the node's failing.
	RingLayout []uint64 `json:"ringLayout,omitempty"`
	// PastCap are the cgroups holding, on one socket or ring, more distinct targets than
	// a scan counts for it: over, whatever they were given.
	PastCap []PastCap `json:"pastCap,omitempty"`
	// Uncounted are the cgroups (v2 ids) with a process holding a target counted in
	// handles without an fd on it (a mapping, an io_uring), whose description the source
	// cannot tell (procfs): their handles are a lower bound.
	Uncounted []uint64 `json:"uncounted,omitempty"`
	// Heavy are the cgroups (v2 ids) whose processes hold more fds than HeavyFDs, one of
	// them alone or all together (a flood spread over many processes): a scan that ran
	// out of time (Cutoff) did by their doing.
	Heavy []uint64 `json:"heavy,omitempty"`
	// Unfinished are the heavy cgroups whose processes the scan did not read in full, by
	// their doing: found heavy once, their processes are walked after every other
	// process, smallest cgroup first, HeavyWalk of each one's fds at most, so that what
	// their tables cost falls on them, not on the others. Past its walk, or out of time
	// while walking it, a cgroup is unfinished; so is one the time did not reach that the
	// last scan found past its walk, and one resting after such a walk (HeavyRest).
	Unfinished []uint64 `json:"unfinished,omitempty"`
	// Unreached are the heavy cgroups, walked whole by the last scan, that the time did
	// not reach: spent on the other processes or a smaller heavy cgroup, the node's time,
	// not their doing. One the last scan found past its walk is unfinished instead.
	Unreached []uint64 `json:"unreached,omitempty"`
	// InFlightCut says the pass over what sockets hold in flight ran out of its time
	// before it read every network namespace: every cgroup's handles are a lower bound.
	InFlightCut bool `json:"inFlightCut,omitempty"`
	// Elsewhere counts the handles held where no walk finds them, by the kernel for a
	// process (an io_uring request pending, a read blocked with its fd closed), among
	// Handles (FD -1, for the opener's cgroup; BPF source only).
	Elsewhere int `json:"elsewhere,omitempty"`
	// Unlinked are the regular files with no name left that processes hold open on
	// their own root, an overlay (their container's writable layer): the runtime sizes
	// a layer by walking its names, and never finds them (BPF source only).
	Unlinked []Unlinked `json:"unlinked,omitempty"`
	// UnlinkedUnread are the cgroups (v2 ids) holding more such files than a scan sizes
	// (MaxUnlinked): their docker partition is a lower bound, by their own doing.
	UnlinkedUnread []uint64 `json:"unlinkedUnread,omitempty"`
}

// Unlinked is a file with no name left in a cgroup's writable layer, held open by one
// of its processes: the blocks it takes there (as du counts them), once per inode and
// cgroup.
type Unlinked struct {
	CgroupID uint64 `json:"cgroupID"`
	Inode    uint64 `json:"inode"` // the kernel's inode: an identity while it is held
	Bytes    int64  `json:"bytes"`
	// Since is when a scan first found the cgroup holding it with no name: a figure of
	// the layer taken before then may still hold it by its name.
	Since time.Time `json:"since"`
}

// MaxUnlinked bounds the unlinked files a scan sizes per cgroup: each costs a stat.
const MaxUnlinked = 64

// PastCap is a cgroup (v2 id) holding more distinct files of a target on one socket or
// ring than a scan counts for it.
type PastCap struct {
	CgroupID uint64 `json:"cgroupID"`
	Target   int    `json:"target"`
}

// Source scans every process on the host.
type Source interface {
	Name() string
	Scan(ctx context.Context) (*Scan, error)
	Close() error
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

// A Phase of a scan and the time it took.
type Phase struct {
	Name string        `json:"name"`
	Took time.Duration `json:"took"`
}

// The phases of a BPF scan.
const (
	PhaseMappings   = "mappings"   // the walk of mappings
	PhaseMembers    = "members"    // the processes of the heavy units listed from their cgroups
	PhaseFDs        = "fds"        // the processes listed, and every one's fds walked but the heavy units'
	PhaseHeavy      = "heavy"      // the walks of heavy units
	PhaseNamespaces = "namespaces" // the network namespaces named and entered
	PhaseInFlight   = "in-flight"  // the files in flight on sockets
	PhaseAfter      = "after"      // exited processes, fdinfo, removed files sized
)

// phases times a scan's phases, each from the end of the last.
type phases struct {
	at   time.Time
	list []Phase
}

func (p *phases) done(name string) {
	now := time.Now()
	p.list = append(p.list, Phase{Name: name, Took: now.Sub(p.at)})
	p.at = now
}
