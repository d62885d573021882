// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Target indices of tallyTargets.
const (
	tCompute0 = iota
	tCompute1
	tCPU
	tQueue
	tClient
)

func tallyTargets(t *testing.T) *Targets {
	t.Helper()
	dir := t.TempDir()
	specs := []TargetSpec{
		{Resource: nr1.ComputeDMAMemory, Path: "compute0", Measure: MappedBytes},
		{Resource: nr1.ComputeDMAMemory, Path: "compute1", Measure: MappedBytes},
		{Resource: nr1.CPUDMAMemory, Path: "cpu", Measure: MappedBytes},
		{Resource: nr1.HypervisorQueue, Path: "queue", Measure: OpenHandles},
		{Resource: nr1.CPUDMAMemory, Path: "client", Measure: FdinfoKey, Key: "drm-memory-dma"},
	}
	for i := range specs {
		specs[i].Path = filepath.Join(dir, specs[i].Path)
		must(t, os.WriteFile(specs[i].Path, nil, 0o600))
	}
	tg, err := resolve(specs)
	must(t, err)
	return tg
}

const mib = 1 << 20

// byCgroup sums a scan per cgroup, as the tests of the sources compare it.
func byCgroup(s *Scan, targets *Targets) map[uint64]nr1.Usage {
	index := map[uint64]int{}
	var ids []uint64
	group := func(id uint64) int {
		g, ok := index[id]
		if !ok {
			g = len(ids)
			index[id] = g
			ids = append(ids, id)
		}
		return g
	}
	for _, m := range s.Mappings {
		group(m.CgroupID)
	}
	for _, h := range s.Handles {
		group(h.CgroupID)
	}
	t := NewTally(targets, len(ids))
	for _, m := range s.Mappings {
		t.AddMapping(index[m.CgroupID], m)
	}
	for _, h := range s.Handles {
		t.AddHandle(index[h.CgroupID], h)
	}
	out := map[uint64]nr1.Usage{}
	for g, u := range t.Sums() {
		out[ids[g]] = u
	}
	return out
}

func TestSumIsTheUnionOfMappedRanges(t *testing.T) {
	targets := tallyTargets(t)
	m := func(pid, target int, start, offMB, sizeMB uint64) Mapping {
		return Mapping{CgroupID: uint64(10 + pid%2), PID: pid, Target: target, Start: start, Offset: offMB * mib, Size: sizeMB * mib}
	}
	for _, tc := range []struct {
		name     string
		mappings []Mapping
		want     nr1.Usage
	}{
		{"nothing", nil, nr1.Usage{}},
		{"one mapping", []Mapping{m(1, tCompute0, 0x7000, 0, 3)}, nr1.Usage{3 * mib}},
		{"inherited by four forked children", []Mapping{
			m(1, tCompute0, 0x7000, 0, 3), m(2, tCompute0, 0x7000, 0, 3), m(3, tCompute0, 0x7000, 0, 3),
			m(4, tCompute0, 0x7000, 0, 3), m(5, tCompute0, 0x7000, 0, 3),
		}, nr1.Usage{3 * mib}},
		{"the same range mapped twice by one process", []Mapping{m(1, tCompute0, 0x7000, 0, 3), m(1, tCompute0, 0x9000, 0, 3)}, nr1.Usage{3 * mib}},
		{"partial overlap adds the rest", []Mapping{m(1, tCompute0, 0x7000, 0, 2), m(2, tCompute0, 0x7000, 1, 3)}, nr1.Usage{4 * mib}},
		{"contained range adds nothing", []Mapping{m(1, tCompute0, 0x7000, 1, 1), m(2, tCompute0, 0x7000, 0, 4)}, nr1.Usage{4 * mib}},
		{"adjacent ranges add", []Mapping{m(1, tCompute0, 0x7000, 1, 1), m(1, tCompute0, 0x9000, 0, 1)}, nr1.Usage{2 * mib}},
		{"distinct ranges add", []Mapping{m(1, tCompute0, 0x7000, 5, 2), m(2, tCompute0, 0x7000, 0, 1), m(3, tCompute0, 0x7000, 2, 1)}, nr1.Usage{4 * mib}},
		{"a run merged across several ranges", []Mapping{
			m(1, tCompute0, 0, 0, 2), m(1, tCompute0, 0, 1, 1), m(1, tCompute0, 0, 2, 2), m(1, tCompute0, 0, 3, 3), m(1, tCompute0, 0, 8, 1),
		}, nr1.Usage{7 * mib}},
		{"the same range of two files of one resource adds", []Mapping{m(1, tCompute0, 0x7000, 0, 3), m(1, tCompute1, 0x7000, 0, 3)}, nr1.Usage{6 * mib}},
		{"the same range of two resources' files counts for each", []Mapping{m(1, tCompute0, 0x7000, 0, 3), m(1, tCPU, 0x7000, 0, 2)}, nr1.Usage{3 * mib, 2 * mib}},
		{"mappings of handle-measured files count nothing", []Mapping{m(1, tQueue, 0x7000, 0, 3), m(1, tClient, 0x7000, 0, 3)}, nr1.Usage{}},
		{"a byte-granular overlap", []Mapping{
			{Target: tCompute0, Offset: 100, Size: 50}, {Target: tCompute0, Offset: 149, Size: 2}, {Target: tCompute0, Offset: 151, Size: 1},
		}, nr1.Usage{52}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Sum(targets, tc.mappings, nil); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSumCountsDistinctDescriptions(t *testing.T) {
	targets := tallyTargets(t)
	h := func(cg uint64, pid, fd, target int, desc uint64, value int64) Handle {
		return Handle{CgroupID: cg, PID: pid, FD: fd, Target: target, Description: desc, Value: value}
	}
	for _, tc := range []struct {
		name    string
		handles []Handle
		want    nr1.Usage
	}{
		{"two opens", []Handle{h(1, 1, 3, tQueue, 7, 0), h(1, 1, 4, tQueue, 8, 0)}, nr1.Usage{0, 0, 0, 2}},
		{"a dup", []Handle{h(1, 1, 3, tQueue, 7, 0), h(1, 1, 4, tQueue, 7, 0)}, nr1.Usage{0, 0, 0, 1}},
		{"inherited by children in two cgroups", []Handle{
			h(1, 1, 3, tQueue, 7, 0), h(1, 2, 3, tQueue, 7, 0), h(2, 3, 3, tQueue, 7, 0), h(2, 3, 9, tQueue, 8, 0),
		}, nr1.Usage{0, 0, 0, 2}},
		{"fdinfo value once per description, the largest read", []Handle{
			h(1, 1, 3, tClient, 5, 2*mib), h(1, 2, 3, tClient, 5, 3*mib), h(2, 3, 4, tClient, 6, 1*mib),
		}, nr1.Usage{0, 4 * mib}},
		{"handles of mapped files count nothing", []Handle{h(1, 1, 3, tCompute0, 9, 0)}, nr1.Usage{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Sum(targets, nil, tc.handles); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTallyKeepsGroupsApart(t *testing.T) {
	targets := tallyTargets(t)
	// Group 0 a pod, 1 and 2 its containers, 3 the unattributed rest.
	tl := NewTally(targets, 4)
	for _, rec := range []struct {
		groups []int
		m      Mapping
	}{
		{[]int{0, 1}, Mapping{PID: 1, Target: tCompute0, Offset: 0, Size: 3 * mib}},
		{[]int{0, 1}, Mapping{PID: 2, Target: tCompute0, Offset: 0, Size: 3 * mib}}, // forked
		{[]int{0, 2}, Mapping{PID: 3, Target: tCompute0, Offset: 0, Size: 3 * mib}}, // a sidecar, same range
		{[]int{0, 2}, Mapping{PID: 3, Target: tCompute0, Offset: 8 * mib, Size: 1 * mib}},
		{[]int{3}, Mapping{PID: 4, Target: tCompute0, Offset: 0, Size: 5 * mib}},
	} {
		for _, g := range rec.groups {
			tl.AddMapping(g, rec.m)
		}
	}
	tl.AddHandle(0, Handle{PID: 1, FD: 3, Target: tQueue, Description: 1})
	tl.AddHandle(1, Handle{PID: 1, FD: 3, Target: tQueue, Description: 1})
	tl.AddHandle(0, Handle{PID: 3, FD: 3, Target: tQueue, Description: 1}) // passed to the sidecar
	tl.AddHandle(2, Handle{PID: 3, FD: 3, Target: tQueue, Description: 1})
	got := tl.Sums()
	want := []nr1.Usage{{4 * mib, 0, 0, 1}, {3 * mib, 0, 0, 1}, {4 * mib, 0, 0, 1}, {5 * mib}}
	for g := range want {
		if got[g] != want[g] {
			t.Errorf("group %d: %v, want %v", g, got[g], want[g])
		}
	}
	for g, u := range tl.Sums() {
		if u != (nr1.Usage{}) {
			t.Errorf("group %d after Sums: %v, want an empty tally", g, u)
		}
	}
}

func TestTallyRefusesAGroupOutOfRange(t *testing.T) {
	tl := NewTally(tallyTargets(t), 2)
	defer func() {
		if recover() == nil {
			t.Error("group 2 of 2 accepted")
		}
	}()
	tl.AddMapping(2, Mapping{Target: tCompute0, Size: 1})
}

func BenchmarkTally(b *testing.B) {
	dir := b.TempDir()
	p := filepath.Join(dir, "compute")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		b.Fatal(err)
	}
	targets, err := resolve([]TargetSpec{{Resource: nr1.ComputeDMAMemory, Path: p, Measure: MappedBytes}})
	if err != nil {
		b.Fatal(err)
	}
	// 300 processes in 30 groups, 8 mappings each, half of them inherited.
	var ms []Mapping
	for pid := range 300 {
		for k := range 8 {
			ms = append(ms, Mapping{PID: pid, Target: 0, Offset: uint64((pid/2*8 + k) * mib), Size: mib})
		}
	}
	tl := NewTally(targets, 30)
	b.ReportAllocs()
	for b.Loop() {
		for _, m := range ms {
			tl.AddMapping(m.PID%30, m)
		}
		_ = tl.Sums()
	}
}
