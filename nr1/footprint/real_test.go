// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/sim"
)

func newBPFOrSkip(tb testing.TB, p *population) *BPF {
	tb.Helper()
	b, err := NewBPF("/proc", p.cgroupV2, p.targets)
	if errors.Is(err, ebpf.ErrNotSupported) {
		tb.Skipf("kernel lacks BPF iterators or BTF: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = b.Close() })
	return b
}

// TestSourcesAgreeOnARealPopulation: 300 processes in 10 real cgroups hold mappings and
// handles of the simulator's files through nr1-load (grown then shrunk: partial munmap
// and closes) and through sharers (dup'ed fds, fds inherited by a child), while other
// processes start and exit. Each source must report per cgroup exactly what was opened
// and mapped (the union of its loads' ranges, which all start at offset 0), and the two
// must agree record for record.
func TestSourcesAgreeOnARealPopulation(t *testing.T) {
	p := newPopulation(t)
	if n := p.processes(t); n < 300 {
		t.Fatalf("population of %d processes, want at least 300", n)
	}
	b := newBPFOrSkip(t, p)
	proc := NewProcfs("/proc", p.cgroupV2, p.targets)
	p.churn(t)

	ctx := context.Background()
	for round := range 3 {
		bs, err := b.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := proc.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []*Scan{bs, ps} {
			got := byCgroup(s, p.targets)
			for i, id := range p.ids {
				if got[id] != p.expected[id] {
					t.Errorf("round %d, %s, cgroup cg%d: %v, want %v", round, s.Source, i, got[id], p.expected[id])
				}
			}
		}
		ps.Mappings = firstOfEach(p.targets, ps.Mappings)
		bs.Normalize()
		ps.Normalize()
		if !reflect.DeepEqual(bs.Mappings, ps.Mappings) {
			t.Errorf("round %d: mappings differ: bpf %d, procfs %d", round, len(bs.Mappings), len(ps.Mappings))
		}
		if !reflect.DeepEqual(bs.Handles, ps.Handles) {
			t.Errorf("round %d: handles differ: bpf %d, procfs %d", round, len(bs.Handles), len(ps.Handles))
		}
		t.Logf("round %d: %d mappings, %d handles; bpf %v, procfs %v", round, len(bs.Mappings), len(bs.Handles), bs.Took, ps.Took)
	}
}

// The BPF source is refused where the cgroup its iterators see for a task is not the one
// procfs names: on such a node every record would be unattributed.
func TestBPFRefusedWhereItCannotAttribute(t *testing.T) {
	p, _ := newCgroups(t, 1)
	newBPFOrSkip(t, p) // loads and attributes on the real v2 tree

	if _, err := NewBPF("/proc", "", p.targets); !errors.Is(err, ErrUnattributable) {
		t.Errorf("no cgroup v2 hierarchy: %v", err)
	}
	// A tree with the same paths whose ids are not the kernel's.
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	fake := t.TempDir()
	for _, line := range strings.Split(string(b), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok {
			if err := os.MkdirAll(filepath.Join(fake, path), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, err = NewBPF("/proc", fake, p.targets)
	if !errors.Is(err, ErrUnattributable) || !strings.Contains(err.Error(), "v2 cgroup id") {
		t.Errorf("a tree that is not the kernel's: %v", err)
	}
}

// A scan's time counts what it walks, not what it writes: processes holding two million
// fds of no target make a pass that writes nothing, and a scan given far less time than
// walking them takes is cut, saying where: at a PID, or, the flood's cgroup named heavy by
// the scan before, on that cgroup (unfinished past its walk, unreached out of time).
func TestScanHonoursItsDeadlineThroughAFloodOfFds(t *testing.T) {
	p, _ := newCgroups(t, 1)
	b := newBPFOrSkip(t, p)
	floodIn(t, p, floodOfFds(t), 100, 0)
	ctx := context.Background()
	whole, err := b.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if whole.Cutoff != 0 {
		t.Fatalf("a scan with no deadline cut at PID %d", whole.Cutoff)
	}
	deadline := whole.Took / 20
	short, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	s, err := b.Scan(short)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("whole scan %v; with %v to go, %v, cut at PID %d, unfinished %v, unreached %v", whole.Took, deadline, s.Took, s.Cutoff, s.Unfinished, s.Unreached)
	if s.Cutoff == 0 && !slices.Contains(s.Unfinished, p.ids[0]) && !slices.Contains(s.Unreached, p.ids[0]) {
		t.Errorf("a scan given %v of the %v the flood takes to walk says it read every process", deadline, whole.Took)
	}
}

// A flood of fds is walked after every other process once a scan found it heavy, in one
// process past the threshold or spread over processes each below it (40 of 19000 fds,
// 760000 in one cgroup, past the default threshold of 65536): a scan too short for the
// flood (half its time) reads every other process in full (no cutoff, the CG beside it
// measured whole) and names the flooders' cgroup unfinished, its own doing; however long
// the scan may take, it walks HeavyWalk fds of the flood at most. The flooders' PIDs are
// below the other CG's, so that walked in PID order they would cut it off.
func TestAHeavyProcessIsWalkedLast(t *testing.T) {
	for _, c := range []struct {
		name     string
		heavyFDs uint64
	}{{"one process past the threshold", 10000}, {"processes past it together", HeavyFDs}} {
		t.Run(c.name, func(t *testing.T) { heavyWalkedLast(t, c.heavyFDs) })
	}
}

func heavyWalkedLast(t *testing.T, heavyFDs uint64) {
	p, dir := newCgroups(t, 2)
	b := newBPFOrSkip(t, p)
	if err := b.SetHeavyFDs(heavyFDs); err != nil {
		t.Fatal(err)
	}
	floodIn(t, p, floodOfFds(t), 40, 0)
	threeQueuesIn(t, p, dir, 1)
	queues := func(s *Scan) int { return queuesOf(p, s, 1) }
	ctx := context.Background()
	whole, err := b.Scan(ctx) // names the flooders heavy
	if err != nil {
		t.Fatal(err)
	}
	if whole.Cutoff != 0 || !slices.Contains(whole.Heavy, p.ids[0]) || queues(whole) != 3 {
		t.Fatalf("a scan with no deadline: cut at PID %d, heavy %v, %d queues beside; want none cut, cgroup %d heavy, 3 queues", whole.Cutoff, whole.Heavy, queues(whole), p.ids[0])
	}
	// The first scan walked the whole flood in PID order: the flood's time. Half of it
	// is too short for the flood, and long enough for the other processes walked one by
	// one on a machine loaded by other tests.
	deadline := whole.Took / 2
	short, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	s, err := b.Scan(short)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("whole scan %v; with %v to go, %v: cut at PID %d, unfinished %v", whole.Took, deadline, s.Took, s.Cutoff, s.Unfinished)
	if s.Cutoff != 0 || queues(s) != 3 {
		t.Errorf("a scan given %v: cut at PID %d, %d queues beside the flood; want every other process read, its 3 queues", deadline, s.Cutoff, queues(s))
	}
	if !slices.Contains(s.Unfinished, p.ids[0]) {
		t.Errorf("a scan given %v of the %v the flood takes: unfinished %v, want the flooders' cgroup %d", deadline, whole.Took, s.Unfinished, p.ids[0])
	}
	// Given twice the flood's time, the flood's walk still stops at HeavyWalk fds: the
	// scan takes about that much more than the other processes' walk, not the flood's
	// time (760000 fds).
	long := 2 * whole.Took
	lctx, cancel := context.WithTimeout(ctx, long)
	defer cancel()
	l, err := b.Scan(lctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("with %v to go, %v: cut at PID %d, unfinished %v", long, l.Took, l.Cutoff, l.Unfinished)
	if l.Took > long/2 || l.Cutoff != 0 || !slices.Contains(l.Unfinished, p.ids[0]) || queues(l) != 3 {
		t.Errorf("a scan given %v, twice the flood's time: took %v, cut at PID %d, unfinished %v, %d queues beside; want at most half of it, the flood unfinished after %d fds, the 3 queues", long, l.Took, l.Cutoff, l.Unfinished, queues(l), HeavyWalk)
	}
}

// TestAnUnwalkedProcesssNamespaceIsRead: a process of a heavy cgroup that the scan
// does not walk (past the cgroup's budget), alone in its network namespace, holding a
// queue in flight on a socket there: the queue is still read, and counts for its sender.
func TestAnUnwalkedProcesssNamespaceIsRead(t *testing.T) {
	p, _ := newCgroups(t, 1)
	b := newBPFOrSkip(t, p)
	floodIn(t, p, floodOfFds(t), 40, 0)
	// Started after the flood, so walked after HeavyWalk of its fds.
	p.startMapper(t, 0, mapperSpec{InFlight: []string{p.sim.File(sim.HypervisorQ)}, NewNetNS: true})
	if _, err := b.Scan(context.Background()); err != nil { // names the cgroup heavy
		t.Fatal(err)
	}
	s, err := b.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	queues := 0
	for _, h := range s.Handles {
		if h.CgroupID == p.ids[0] && p.targets.At(h.Target).Resource == nr1.HypervisorQueue {
			queues++
		}
	}
	if !slices.Contains(s.Unfinished, p.ids[0]) || queues != 1 || s.InFlightCut {
		t.Errorf("unfinished %v, %d queues in flight, in-flight pass cut %v; want cgroup %d unfinished, its 1 queue, the pass whole", s.Unfinished, queues, s.InFlightCut, p.ids[0])
	}
}

// TestAFloodSpreadOverAPodsCgroupsIsThePods: a flood spread over three cgroups, each
// below HeavyFDs, is none of theirs alone; named one pod's (SetGroups), it is the pod's:
// heavy, walked last, one walk of HeavyWalk fds for the three (171000 fds, each cgroup
// 57000, read whole were each its own), and unfinished under the pod's cgroup, while
// the CG beside it is read whole.
func TestAFloodSpreadOverAPodsCgroupsIsThePods(t *testing.T) {
	p, dir := newCgroups(t, 4)
	b := newBPFOrSkip(t, p)
	b.lightWalk = 1 << 40 // the pod's grouping alone, not the light walk's budget
	flood := floodOfFds(t)
	for cg := range 3 {
		floodIn(t, p, flood, 3, cg)
	}
	threeQueuesIn(t, p, dir, 3)
	scan := func() *Scan {
		t.Helper()
		s, err := b.Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for range 2 {
		if s := scan(); len(s.Heavy) != 0 || len(s.Unfinished) != 0 {
			t.Fatalf("each its own: heavy %v, unfinished %v; want none, each cgroup below %d fds", s.Heavy, s.Unfinished, HeavyFDs)
		}
	}
	const pod = 4242 // the pod's cgroup: a unit, never listed itself
	b.SetGroups(map[uint64]uint64{p.ids[0]: pod, p.ids[1]: pod, p.ids[2]: pod, 99: 98})
	if s := scan(); !slices.Equal(s.Heavy, []uint64{pod}) {
		t.Fatalf("one pod's: heavy %v, want the pod %d alone", s.Heavy, pod)
	}
	for i := range 2 {
		s := scan()
		queues := queuesOf(p, s, 3)
		if !slices.Equal(s.Unfinished, []uint64{pod}) || len(s.Unreached) != 0 || s.Cutoff != 0 || queues != 3 {
			t.Errorf("scan %d after: unfinished %v, unreached %v, cut at %d, %d queues beside; want the pod %d unfinished alone, the 3 queues", i, s.Unfinished, s.Unreached, s.Cutoff, queues, pod)
		}
	}
}

// TestAFloodSpreadOverManyPodsIsTheirsNotTheNodes: twenty cgroups (pods) of 38000 fds
// each, each below HeavyFDs, 760000 in all, past LightWalk: the largest are named heavy
// until the rest fit in it, and a scan given half the flood's time reads every other process
// (no cutoff, the CG beside them, at higher PIDs, whole) and leaves what it did not walk
// to the flooders alone. Walked in PID order, the flood cut the scan at a PID, the node's
// uncertainty, and the CG's queues went unread.
func TestAFloodSpreadOverManyPodsIsTheirsNotTheNodes(t *testing.T) {
	const flooders = 20
	p, dir := newCgroups(t, flooders+1)
	b := newBPFOrSkip(t, p)
	flood := floodOfFds(t)
	for cg := range flooders {
		floodIn(t, p, flood, 2, cg)
	}
	threeQueuesIn(t, p, dir, flooders)
	ctx := context.Background()
	whole, err := b.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	floods := p.ids[:flooders]
	named := 0
	for _, u := range whole.Heavy {
		if !slices.Contains(floods, u) {
			t.Fatalf("heavy %v: unit %d is no flooder's", whole.Heavy, u)
		}
		named++
	}
	if whole.Cutoff != 0 || named < flooders-LightWalk/(2*19000) {
		t.Fatalf("a scan with no deadline: cut at PID %d, heavy %v; want none cut, the largest flooders heavy until %d fds are left", whole.Cutoff, whole.Heavy, LightWalk)
	}
	deadline := whole.Took / 2
	for i := range 3 {
		short, cancel := context.WithTimeout(ctx, deadline)
		s, err := b.Scan(short)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("whole scan %v; with %v to go, %v (%v): cut at PID %d, heavy %v, unfinished %v, unreached %v", whole.Took, deadline, s.Took, s.Phases, s.Cutoff, s.Heavy, s.Unfinished, s.Unreached)
		charged := slices.Concat(s.Unfinished, s.Unreached)
		if s.Cutoff != 0 || queuesOf(p, s, flooders) != 3 || slices.ContainsFunc(charged, func(u uint64) bool { return !slices.Contains(floods, u) }) {
			t.Errorf("scan %d given %v of the flood's %v: cut at PID %d, %d queues beside, unfinished and unreached %v; want no cutoff, the 3 queues, only flooders charged", i, deadline, whole.Took, s.Cutoff, queuesOf(p, s, flooders), charged)
		}
	}
}

// floodIn starts n processes in cgroup cg of p, each holding flood, for the test's life.
func floodIn(t *testing.T, p *population, flood []*os.File, n, cg int) {
	t.Helper()
	for range n {
		cmd := exec.Command("sleep", "600")
		cmd.ExtraFiles = flood
		p.start(t, cg, cmd)
	}
}

// threeQueuesIn starts nr1-load holding 3 queues in cgroup cg of p, and waits until it
// says it holds them.
func threeQueuesIn(t *testing.T, p *population, dir string, cg int) {
	t.Helper()
	status := filepath.Join(dir, "beside")
	p.start(t, cg, exec.Command(nr1Load, "--compute-dma-file", p.sim.File(sim.ComputeDMA), "--cpu-dma-file", p.sim.File(sim.CPUDMA),
		"--queue-file", p.sim.File(sim.HypervisorQ), "--write-file", filepath.Join(dir, "blob"), "--status-file", status, "--queues", "3"))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(status)
		var st struct{ Queues int64 }
		if err == nil && json.Unmarshal(b, &st) == nil && st.Queues == 3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the load beside the flood never reported its 3 queues: %s %v", b, err)
		}
	}
}

// queuesOf counts the queue handles s read of cgroup cg of p.
func queuesOf(p *population, s *Scan, cg int) int {
	n := 0
	for _, h := range s.Handles {
		if h.CgroupID == p.ids[cg] && p.targets.At(h.Target).Resource == nr1.HypervisorQueue {
			n++
		}
	}
	return n
}

// floodOfFds is 19000 fds of /dev/null (this host's limit is 20000 a process), for the
// test's life, to hand to processes as ExtraFiles: close-on-exec, so that no other
// process the test starts holds them.
func floodOfFds(t *testing.T) []*os.File {
	t.Helper()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	flood := make([]*os.File, 19000)
	for i := range flood {
		fd, err := unix.FcntlInt(null.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		flood[i] = os.NewFile(uintptr(fd), os.DevNull)
		t.Cleanup(func() { _ = flood[i].Close() })
	}
	return flood
}

// A flood spends its own walk only: an honest cgroup whose processes hold 76000 fds
// (past the heavy threshold, within what a scan walks of one) is read whole beside a
// flood of 760000 whose processes have lower PIDs, and only the flood is unfinished. With
// one walk for every heavy cgroup, the flood spent it and the honest cgroup was unfinished,
// uncertain by "its own" doing.
func TestAFloodSpendsOnlyItsOwnWalk(t *testing.T) {
	p, _ := newCgroups(t, 2)
	b := newBPFOrSkip(t, p)
	flood := floodOfFds(t)
	floodIn(t, p, flood, 40, 0)
	floodIn(t, p, flood, 4, 1)
	ctx := context.Background()
	first, err := b.Scan(ctx) // names both heavy
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(first.Heavy, p.ids[0]) || !slices.Contains(first.Heavy, p.ids[1]) {
		t.Fatalf("heavy %v, want the flood's cgroup %d and the honest one %d", first.Heavy, p.ids[0], p.ids[1])
	}
	for range 3 {
		s, err := b.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(s.Unfinished, p.ids[0]) || slices.Contains(s.Unfinished, p.ids[1]) || len(s.Unreached) != 0 {
			t.Fatalf("unfinished %v, unreached %v; want the flood's cgroup %d unfinished alone, the honest one %d read whole", s.Unfinished, s.Unreached, p.ids[0], p.ids[1])
		}
	}
}

// A unit past its walk rests after each walk (HeavyRest): the scans in between pass over
// its processes whole and it is unfinished in them, its queues a lower bound; a cgroup
// beside it is read whole in every scan, and once the rest is over the unit is walked
// again, from where its last walk stopped round to its first process, whose queues it
// reads.
func TestAUnitPastItsWalkRestsBetweenWalks(t *testing.T) {
	p, dir := newCgroups(t, 2)
	b := newBPFOrSkip(t, p)
	b.rest = time.Hour
	threeQueuesIn(t, p, filepath.Join(dir, "0"), 0) // its PID below the flood's: walked first
	threeQueuesIn(t, p, filepath.Join(dir, "1"), 1)
	floodIn(t, p, floodOfFds(t), 8, 0) // 152000 fds, past a walk
	scan := func(what string, unfinished bool, queues int) {
		t.Helper()
		s, err := b.Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// Where the time went: each phase once, in order, the heavy walks among them once
		// the flood is known (passed over while it rests), within the scan's time.
		var names []string
		var sum time.Duration
		for _, p := range s.Phases {
			names, sum = append(names, p.Name), sum+p.Took
		}
		want := []string{PhaseMappings, PhaseMembers, PhaseFDs, PhaseHeavy, PhaseNamespaces, PhaseInFlight, PhaseAfter}
		if what == "the first scan, every process walked whole" {
			want = slices.Delete(want, 3, 4) // no heavy unit known yet
		}
		if !slices.Equal(names, want) || sum > s.Took {
			t.Errorf("%s: phases %v taking %v of %v; want %v within it", what, names, sum, s.Took, want)
		}
		if got := slices.Contains(s.Unfinished, p.ids[0]); got != unfinished || slices.Contains(s.Unfinished, p.ids[1]) || len(s.Unreached) != 0 {
			t.Errorf("%s: unfinished %v, unreached %v; want the flood's cgroup %d unfinished %v, the other read whole", what, s.Unfinished, s.Unreached, p.ids[0], unfinished)
		}
		if got := queuesOf(p, s, 0); got != queues {
			t.Errorf("%s: %d queues of the flood's cgroup, want %d", what, got, queues)
		}
		if got := queuesOf(p, s, 1); got != 3 {
			t.Errorf("%s: %d queues of the cgroup beside, want its 3", what, got)
		}
	}
	scan("the first scan, every process walked whole", false, 3)
	scan("walked past its walk", true, 3)
	scan("resting", true, 0)
	scan("resting still", true, 0)
	b.rest = 0
	scan("walked again", true, 3)
}

// A unit resting after its walk still has the sockets its walk met read: queues in
// flight on a socket of a namespace no process is in, which only the unit's process
// names, count in every scan, resting or not. Their sender may be any CG's process, not
// the unit's: resting must not hide what a neighbour parked there.
func TestARestingUnitsSocketsAreStillRead(t *testing.T) {
	p, _ := newCgroups(t, 1)
	b := newBPFOrSkip(t, p)
	b.rest = time.Hour
	queue := p.sim.File(sim.HypervisorQ)
	// Its PID below the flood's: walked within the unit's walk.
	p.startMapper(t, 0, mapperSpec{InFlight: []string{queue, queue, queue}, InFlightElsewhere: true})
	floodIn(t, p, floodOfFds(t), 8, 0) // 152000 fds, past a walk
	for _, what := range []string{"every process walked whole", "walked past its walk", "resting", "resting still"} {
		s, err := b.Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := queuesOf(p, s, 0); got != 3 || s.InFlightCut || len(s.InFlightForeign) != 0 {
			t.Errorf("%s: %d queues in flight, pass cut %v, namespaces not entered for %v; want the 3, read whole", what, got, s.InFlightCut, s.InFlightForeign)
		}
	}
}

// A unit past its walk has its walks begin where the last one stopped: walk after walk
// covers every process of it, and a socket of a namespace no process is in held by a
// process past the first walk's budget is met, remembered, and read from then on, in
// every scan: what was sent to it counts for its sender.
func TestWalksCoverEveryProcessOfAUnitPastItsWalk(t *testing.T) {
	p, _ := newCgroups(t, 1)
	b := newBPFOrSkip(t, p)
	b.rest = 0
	floodIn(t, p, floodOfFds(t), 16, 0) // 304000 fds: more than two walks
	queue := p.sim.File(sim.HypervisorQ)
	// Started after the flood, so past the first walk's budget.
	p.startMapper(t, 0, mapperSpec{InFlight: []string{queue, queue, queue}, InFlightElsewhere: true})
	var got []int
	for i := range 8 {
		s, err := b.Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, queuesOf(p, s, 0))
		if len(s.InFlightForeign) != 0 || s.InFlightCut {
			t.Errorf("scan %d: namespaces not entered for %v, pass cut %v; want every one entered, the pass whole", i, s.InFlightForeign, s.InFlightCut)
		}
	}
	// The first scan walks every process whole; the second, the unit's first walk,
	// stops before the mapper; a later one meets it, within three walks, and the walks
	// after, which pass over it, still read its socket.
	met := 2 + slices.Index(got[2:], 3)
	if got[0] != 3 || got[1] != 0 || met < 2 || met > 4 || slices.ContainsFunc(got[met:], func(n int) bool { return n != 3 }) {
		t.Errorf("queues in flight scan by scan %v; want 3 (the first scan), 0 (a walk that stops before the mapper), then 3 in every scan from the third, fourth or fifth on", got)
	}
}

// restingFlood is a cgroup holding three queues in a process walked first, and a flood
// past a unit's walk, scanned by a source whose units rest a second after each walk.
func restingFlood(t *testing.T) (*population, *BPF) {
	t.Helper()
	p, dir := newCgroups(t, 1)
	b := newBPFOrSkip(t, p)
	b.rest = time.Second
	threeQueuesIn(t, p, dir, 0) // its PID below the flood's: walked first
	floodIn(t, p, floodOfFds(t), 8, 0)
	return p, b
}

// A scan in a hurry (one a change started) leaves a unit's walk due after its rest to the
// next scan not in a hurry, and walks it all the same once its rest has passed twice: a
// stream of changes never keeps a unit unread for longer.
func TestAScanInAHurryLeavesAWalkToTheNext(t *testing.T) {
	p, b := restingFlood(t)
	scan := func(ctx context.Context, what string, queues int) {
		t.Helper()
		s, err := b.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := queuesOf(p, s, 0); got != queues || !slices.Contains(s.Unfinished, p.ids[0]) && queues == 0 {
			t.Errorf("%s: %d queues, unfinished %v; want %d", what, got, s.Unfinished, queues)
		}
	}
	calm, hurry := context.Background(), InAHurry(context.Background())
	scan(calm, "the first scan, every process walked whole", 3)
	// The rest counts from the walk's start: the next scans are timed from there.
	walked := time.Now()
	scan(calm, "walked past its walk", 3)
	time.Sleep(time.Until(walked.Add(b.rest + 50*time.Millisecond)))
	if time.Since(walked) >= 2*b.rest {
		t.Fatalf("a walk took %v, past twice the rest the test gives it", time.Since(walked))
	}
	scan(hurry, "rested, in a hurry", 0)
	walked = time.Now()
	scan(calm, "rested, not in a hurry", 3)
	time.Sleep(time.Until(walked.Add(2*b.rest + 50*time.Millisecond)))
	scan(hurry, "rested twice over, in a hurry", 3)
}

// A scan at its time yields a unit's walk to a change waiting for the next scan
// (YieldingTo), and keeps the time of the unit's last walk, so that the next scan with
// no change waiting walks it; once the last walk is twice the rest old, it walks it
// whatever waits. A change that comes while the unit is walked cuts the walk there, and
// the next walk goes on from it.
func TestAScanAtItsTimeYieldsAWalkToAWaitingChange(t *testing.T) {
	p, b := restingFlood(t)
	asked, waitFrom := 0, 0 // a change waits from the waitFrom-th question on; 0: none
	ctx := YieldingTo(context.Background(), func() bool { asked++; return waitFrom > 0 && asked >= waitFrom })
	scanOnly := func() *Scan {
		t.Helper()
		asked = 0
		s, err := b.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	scan := func(what string, queues int) *Scan {
		t.Helper()
		s := scanOnly()
		if got := queuesOf(p, s, 0); got != queues || !slices.Contains(s.Unfinished, p.ids[0]) && queues == 0 {
			t.Errorf("%s: %d queues, unfinished %v; want %d", what, got, s.Unfinished, queues)
		}
		return s
	}
	scan("the first scan, every process walked whole", 3)
	walked := time.Now()
	scan("walked past its walk", 3)
	time.Sleep(time.Until(walked.Add(b.rest + 50*time.Millisecond)))
	if time.Since(walked) >= 2*b.rest {
		t.Fatalf("a walk took %v, past twice the rest the test gives it", time.Since(walked))
	}
	waitFrom = 1
	scan("rested, a change waiting", 0)
	if asked == 0 {
		t.Fatal("the scan never asked whether a change waits")
	}
	waitFrom = 0
	walked = time.Now()
	scan("rested, yielded, nothing waiting", 3)
	time.Sleep(time.Until(walked.Add(2*b.rest + 50*time.Millisecond)))
	waitFrom = 1
	walked = time.Now()
	scan("rested twice over, a change waiting", 3)

	// Cut within the walk: the unit keeps the time of its last walk not cut, and the next
	// scan, with nothing waiting, walks on from the cut rather than resting.
	last := b.walked[p.ids[0]]
	time.Sleep(time.Until(walked.Add(b.rest + 50*time.Millisecond)))
	waitFrom = 4 // past the first process's check, and a few of its ticks
	before := b.resume[p.ids[0]]
	s := scanOnly()
	cut := b.resume[p.ids[0]]
	if !slices.Contains(s.Unfinished, p.ids[0]) || b.walked[p.ids[0]] != last || cut == before {
		t.Errorf("a walk cut by a change: unfinished %v, walked at %v (was %v), stopped in %d (was %d); want the flood's cgroup unfinished, its walk's time kept, stopped elsewhere",
			s.Unfinished, b.walked[p.ids[0]], last, cut, before)
	}
	waitFrom = 0
	scanOnly()
	if !b.walked[p.ids[0]].After(last) || b.resume[p.ids[0]] == cut {
		t.Errorf("after a cut walk, nothing waiting: walked at %v, stopped in %d; want a walk, going on from %d", b.walked[p.ids[0]], b.resume[p.ids[0]], cut)
	}
}

// However far into a walk a change comes, within one of the unit's processes or between
// two, a walk it cuts goes on, at the next, after the last process it walked: walks cut
// over and over still cover the unit.
func TestAWalkCutByAChangeAnywhereGoesOn(t *testing.T) {
	p, b := restingFlood(t)
	b.rest = 500 * time.Millisecond
	asked, waitFrom := 0, 0
	ctx := YieldingTo(context.Background(), func() bool { asked++; return waitFrom > 0 && asked >= waitFrom })
	scan := func() {
		t.Helper()
		asked = 0
		if _, err := b.Scan(ctx); err != nil {
			t.Fatal(err)
		}
	}
	u := p.ids[0]
	scan() // every process walked whole: the unit found heavy
	// From the second question on: the first is asked before the unit's first process.
	for waitFrom = 2; waitFrom <= 12; waitFrom++ {
		saved := waitFrom
		waitFrom = 0
		scan() // a walk no change cuts, the rest counted from it
		walked, before := time.Now(), b.resume[u]
		time.Sleep(b.rest + 50*time.Millisecond)
		waitFrom = saved
		scan()
		if time.Since(walked) >= 2*b.rest {
			t.Fatalf("the scans took %v, past twice the rest the test gives them", time.Since(walked))
		}
		if b.resume[u] == before {
			t.Errorf("a change at question %d: the walk it cut stopped in process %d, where the walk before it stopped: it will walk the same processes again", waitFrom, before)
		}
	}
}
