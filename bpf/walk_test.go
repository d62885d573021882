// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"slices"
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
	if err := f.SetHeavyFDs(heavy); err != nil {
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

// FilesOf walks the processes named in their order, within one scan: a description two
// processes of one cgroup hold is reported once, with the first process named that
// holds it; each process's records come together, after those of the process before
// it; a process gone is skipped.
func TestFilesOfWalksTheProcessesNamedInTheirOrder(t *testing.T) {
	f := loadOrSkip(t)
	if err := f.SetTargets(map[TargetKey]uint32{keyOf(t, "/dev/zero"): 1}); err != nil {
		t.Fatal(err)
	}
	g := &gateFixture{t: t, root: v2CgroupOrSkip(t)}
	_, cg := g.pod("walked", -1, "ctr")
	holder, taker, third, gone := g.opener(cg), g.opener(cg), g.opener(cg), g.opener(cg)
	fd := holder.must("open /dev/zero")
	taker.must("steal " + strconv.Itoa(holder.cmd.Process.Pid) + " " + strconv.Itoa(fd))
	third.must("open /dev/zero")
	pid := func(o *openerProc) uint32 { return uint32(o.cmd.Process.Pid) }
	gonePid := pid(gone)
	_ = gone.cmd.Process.Kill()
	_ = gone.cmd.Wait()
	order := []uint32{pid(taker), gonePid, pid(third), pid(holder)}
	var seen []uint32
	files := map[uint64]int{}
	if err := f.FilesOf(slices.Values(order), func(r *Record) error {
		if r.Target != 1 {
			return nil
		}
		if len(seen) == 0 || seen[len(seen)-1] != r.Pid {
			seen = append(seen, r.Pid)
		}
		files[r.File]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []uint32{pid(taker), pid(third)}; !slices.Equal(seen, want) {
		t.Errorf("processes reported in the order %v, want %v: the gone one skipped, the holder's description reported with the taker named first", seen, want)
	}
	if len(files) != 2 {
		t.Errorf("descriptions reported %v, want 2, each once", files)
	}
	for d, n := range files {
		if n != 1 {
			t.Errorf("description %#x reported %d times, want once", d, n)
		}
	}
}

// A process passed over mid-walk (ErrNextProcess) takes with it the records its walk
// had written but not yet read: a namespace first named among them is named again by
// the next cgroup's process holding a socket in it, or its sockets go unread.
func TestANamespaceDroppedWithAProcessIsNamedByTheNextCgroup(t *testing.T) {
	f := loadOrSkip(t)
	g := &gateFixture{t: t, root: v2CgroupOrSkip(t)}
	_, passed := g.pod("passed", -1, "ctr")
	_, next := g.pod("next", -1, "ctr")
	a, b := g.opener(passed), g.opener(next)
	// The first tick comes at the 4096th fd walked, before a's socket, which the same
	// read then names.
	n := a.must("open /dev/null")
	a.must("dupflood " + strconv.Itoa(n) + " 5000")
	a.must("dgram")
	b.must("dgram")
	home := mustNetns(t, "self")
	pa, pb := uint32(a.cmd.Process.Pid), uint32(b.cmd.Process.Pid)
	for scan := range 2 {
		named := map[uint32]bool{}
		if err := f.FilesOf(slices.Values([]uint32{pa, pb}), func(r *Record) error {
			switch {
			case r.Kind == KindTick && r.Pid == pa:
				return ErrNextProcess
			case r.Kind == KindNetNS && r.File == home:
				named[r.Pid] = true
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if named[pa] {
			t.Fatalf("scan %d: the passed-over process's socket read: the test no longer drops it", scan)
		}
		if !named[pb] {
			t.Errorf("scan %d: the namespace of the next cgroup's socket not named: dropped with the process passed over", scan)
		}
	}
}
