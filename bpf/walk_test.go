// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"strconv"
	"testing"
)

// A flood of fds of no target writes no record of its own, yet the walk is seen to take
// its time: a tick per Tick fds walked, and each process past the heavy mark named once,
// with its cgroup.
func TestWalkTicksThroughAFloodAndNamesHeavyTables(t *testing.T) {
	f := loadOrSkip(t)
	if err := f.SetTargets(map[TargetKey]uint32{keyOf(t, "/dev/zero"): 1}); err != nil {
		t.Fatal(err)
	}
	// A test process may hold 20000 fds here, far below HeavyFDs.
	const heavy, perProcess, processes = 10000, 15000, 4
	if err := f.objs.HeavyFds.Set(uint64(heavy)); err != nil {
		t.Fatal(err)
	}
	g := &gateFixture{t: t, root: v2CgroupOrSkip(t)}
	_, cg := g.pod("flood", -1, "ctr")
	pids := map[uint32]bool{}
	for range processes {
		o := g.opener(cg)
		n := o.must("open /dev/null")
		o.must("dupflood " + strconv.Itoa(n) + " " + strconv.Itoa(perProcess))
		pids[uint32(o.cmd.Process.Pid)] = true
	}
	id := g.cgroupID(cg)
	for round := range 2 { // the counts start again with each scan
		ticks, named := 0, map[uint32]int{}
		if err := f.Files(func(r *Record) error {
			switch r.Kind {
			case KindTick:
				ticks++
			case KindHeavy:
				named[r.Pid]++
				if r.CgroupId != id || !pids[r.Pid] {
					t.Errorf("round %d: heavy %+v, want a flooding process of cgroup %d", round, *r, id)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if walked := processes * perProcess; ticks < walked/Tick {
			t.Errorf("round %d: %d ticks, want at least one per %d of the %d fds walked", round, ticks, Tick, walked)
		}
		if len(named) != processes {
			t.Errorf("round %d: heavy processes %v, want each of the %d flooders once", round, named, processes)
		}
		for pid, n := range named {
			if n != 1 {
				t.Errorf("round %d: process %d named heavy %d times, want once", round, pid, n)
			}
		}
	}
}
