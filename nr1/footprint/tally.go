// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Tally sums records into groups the caller numbers (a CG, a container, the
// unattributed rest). A record may be added to several groups.
//
// Memory is the union of the distinct (target, file offset range) a group maps: the
// same pages mapped by a forked child, mapped twice, or mapped by two containers of one
// pod are held once, so summing mapping sizes would count them once per mapping.
// Handles count distinct open file descriptions per group, for the same reason.
type Tally struct {
	targets *Targets
	groups  int
	spans   []span
	descs   []desc
}

type span struct {
	group, target int
	lo, hi        uint64 // file offsets, [lo, hi)
}

type desc struct {
	group, target int
	id            uint64
	value         int64
}

// NewTally returns a tally of groups numbered 0 to groups-1.
func NewTally(targets *Targets, groups int) *Tally {
	return &Tally{targets: targets, groups: groups}
}

// AddMapping counts m in group g: its bytes for a target measured in mapped bytes, the
// description it keeps open for one counted in handles (once with the fds on it).
func (t *Tally) AddMapping(g int, m Mapping) {
	t.check(g)
	switch measure := t.targets.At(m.Target).Measure; {
	case measure == OpenHandles && m.Description != 0:
		t.descs = append(t.descs, desc{group: g, target: m.Target, id: m.Description})
		return
	case measure != MappedBytes || m.Size == 0:
		return
	}
	t.spans = append(t.spans, span{group: g, target: m.Target, lo: m.Offset, hi: m.Offset + m.Size})
}

// AddHandle counts h in group g. Handles of targets measured in mapped bytes count
// nothing: holding the file open holds no memory.
func (t *Tally) AddHandle(g int, h Handle) {
	t.check(g)
	if t.targets.At(h.Target).Measure == MappedBytes {
		return
	}
	t.descs = append(t.descs, desc{group: g, target: h.Target, id: h.Description, value: h.Value})
}

func (t *Tally) check(g int) {
	if g < 0 || g >= t.groups {
		panic(fmt.Sprintf("footprint: tally group %d out of [0, %d)", g, t.groups))
	}
}

// Sums returns each group's usage, indexed by group, and empties the tally.
//
// Sorting by (group, target, offset) lets one sweep merge each run of overlapping or
// adjacent ranges, without a set per group.
func (t *Tally) Sums() []nr1.Usage {
	out := make([]nr1.Usage, t.groups)
	slices.SortFunc(t.spans, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.target, b.target), cmp.Compare(a.lo, b.lo))
	})
	for i := 0; i < len(t.spans); {
		cur := t.spans[i]
		j := i + 1
		for ; j < len(t.spans); j++ {
			s := t.spans[j]
			if s.group != cur.group || s.target != cur.target || s.lo > cur.hi {
				break
			}
			cur.hi = max(cur.hi, s.hi)
		}
		out[cur.group][t.targets.At(cur.target).Resource] += nr1.Base(cur.hi - cur.lo) //nolint:gosec // a file's mapped range fits
		i = j
	}

	slices.SortFunc(t.descs, func(a, b desc) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.target, b.target), cmp.Compare(a.id, b.id))
	})
	for i := 0; i < len(t.descs); {
		cur := t.descs[i]
		j := i + 1
		for ; j < len(t.descs); j++ {
			d := t.descs[j]
			if d.group != cur.group || d.target != cur.target || d.id != cur.id {
				break
			}
			// Each fd of a description reads the same client's fdinfo, at slightly
			// different moments: the largest is the latest of a growing client.
			cur.value = max(cur.value, d.value)
		}
		tg := t.targets.At(cur.target)
		if tg.Measure == OpenHandles {
			out[cur.group][tg.Resource]++
		} else {
			out[cur.group][tg.Resource] += nr1.Base(cur.value)
		}
		i = j
	}
	t.spans, t.descs = t.spans[:0], t.descs[:0]
	return out
}

// Sum is the usage of one set of records: the union of their mapped ranges and their
// distinct open file descriptions.
func Sum(targets *Targets, mappings []Mapping, handles []Handle) nr1.Usage {
	t := NewTally(targets, 1)
	t.spans = slices.Grow(t.spans, len(mappings))
	t.descs = slices.Grow(t.descs, len(handles))
	for _, m := range mappings {
		t.AddMapping(0, m)
	}
	for _, h := range handles {
		t.AddHandle(0, h)
	}
	return t.Sums()[0]
}
