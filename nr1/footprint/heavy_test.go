// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"cmp"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/neureality-sdk/nr1-agent/bpf"
)

// fakeProc makes a procfs of the PIDs given under a directory of the test's.
func fakeProc(t *testing.T, root string, pids ...uint32) {
	t.Helper()
	for _, pid := range pids {
		if err := os.MkdirAll(filepath.Join(root, itoa(pid)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func itoa(pid uint32) string { return strconv.FormatUint(uint64(pid), 10) }

// The processes walked last come after every other, in the order given, those others
// listed again once walked, so that a process made meanwhile is walked before the heavy
// ones too; the heavy ones' walk begins before the first of them, and a heavy process
// skip names is passed over.
func TestHeavyLastWalksProcessesMadeMeanwhileFirst(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, 1, 5, 9, 12)
	heavy := map[uint32]uint64{5: 50, 3: 30, 12: 30} // 3 has exited
	tail := []uint32{12, 3, 5}
	var failed error
	var order []uint32
	begun := -1
	begin := func() { begun = len(order) }
	none := func(uint32) bool { return false }
	list := func() ([]uint32, error) { return processes(root) }
	for pid := range heavyLast(list, heavy, tail, &failed, begin, none) {
		order = append(order, pid)
		if pid == 9 {
			fakeProc(t, root, 7) // made while 9 was walked
		}
	}
	if failed != nil {
		t.Fatal(failed)
	}
	if want := []uint32{1, 9, 7, 12, 3, 5}; !slices.Equal(order, want) {
		t.Errorf("walked %v, want %v", order, want)
	}
	if begun != 3 {
		t.Errorf("the heavy processes begun after %d processes, want after 3", begun)
	}
	spent := func(pid uint32) bool { return heavy[pid] == 30 }
	if got := slices.Collect(heavyLast(list, heavy, tail, &failed, func() {}, spent)); !slices.Equal(got, []uint32{1, 7, 9, 5}) {
		t.Errorf("cgroup 30 passed over: walked %v, want [1 7 9 5]", got)
	}
	var stopped []uint32
	for pid := range heavyLast(list, heavy, tail, &failed, begin, none) {
		stopped = append(stopped, pid)
		break
	}
	if !slices.Equal(stopped, []uint32{1}) {
		t.Errorf("a walk stopped at its first process named %v", stopped)
	}
	absent := func() ([]uint32, error) { return processes(filepath.Join(root, "absent")) }
	if _ = slices.Collect(heavyLast(absent, heavy, tail, &failed, func() {}, none)); failed == nil {
		t.Error("a listing that fails: no error")
	}
}

// processes lists the processes of a fake procfs under root.
func processes(root string) ([]uint32, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var pids []uint32
	for _, e := range entries {
		if n, err := strconv.ParseUint(e.Name(), 10, 32); err == nil {
			pids = append(pids, uint32(n))
		}
	}
	return pids, nil
}

// The heavy cgroups are walked smallest first, by the ticks the last scan counted of
// each, then by PID; those below the threshold after every other.
func TestTheSmallestHeavyCgroupIsWalkedFirst(t *testing.T) {
	b := &BPF{heavy: map[uint64]uint64{10: 500, 20: 17, 30: 17}}
	got := b.tailOrder(map[uint32]uint64{4: 10, 2: 10, 9: 20, 3: 30, 8: 20})
	if want := []uint32{8, 9, 3, 2, 4}; !slices.Equal(got, want) {
		t.Errorf("walked %v, want %v", got, want)
	}
	// 30, below the threshold (named by the light walk), after every unit above it.
	b.heavyFDs, b.heavy[30] = HeavyFDs, 3
	got = b.tailOrder(map[uint32]uint64{4: 10, 2: 10, 9: 20, 3: 30, 8: 20})
	if want := []uint32{8, 9, 2, 4, 3}; !slices.Equal(got, want) {
		t.Errorf("30 below the threshold: walked %v, want %v", got, want)
	}
}

// A walk out of time settles each heavy unit it did not read whole: the one whose walk
// was cut is unfinished if heavy by its own size (unreached otherwise), each after it is unfinished when the last scan found it past its
// walk (or this one did) and unreached otherwise; one cut before the tail, by the node's
// time, leaves every unit not past its walk unreached; the units walked before the cut
// are left as they were. Over generated tails and cuts.
func TestSettleCutChargesTheCutCgroupAndTheFloodsAfterIt(t *testing.T) {
	rng := rand.New(rand.NewPCG(53, 2))
	budget, own := uint64(HeavyWalk/bpf.Tick), uint64(HeavyFDs/bpf.Tick)
	for range 2000 {
		cgroups := 1 + rng.IntN(5)
		ticks, last := map[uint64]uint64{}, map[uint32]uint64{}
		for cg := range uint64(cgroups) {
			ticks[100+cg] = 1 + rng.Uint64N(budget+1) // past budget: found past its walk
		}
		var tail []uint32
		for pid := range uint32(1 + rng.IntN(12)) {
			last[1000+pid] = 100 + rng.Uint64N(uint64(cgroups))
			tail = append(tail, 1000+pid)
		}
		// The tail in walk order: cgroups by ticks, as tailOrder sorts them.
		slices.SortFunc(tail, func(x, y uint32) int {
			return cmp.Or(cmp.Compare(ticks[last[x]], ticks[last[y]]), cmp.Compare(last[x], last[y]), cmp.Compare(x, y))
		})
		cut := rng.IntN(len(tail)+1) - 1
		spent := map[uint64]bool{}
		for _, pid := range tail[:max(cut, 0)] { // those walked before the cut may be spent
			if rng.IntN(3) == 0 {
				spent[last[pid]] = true
			}
		}
		before := maps.Clone(spent)
		unreached := settleCut(tail, last, cut, ticks, own, spent)
		for _, cg := range unreached {
			if spent[cg] {
				t.Fatalf("tail %v cut at %d: cgroup %d both unfinished and unreached", tail, cut, cg)
			}
		}
		for i, pid := range tail {
			cg := last[pid]
			got := "untouched"
			switch {
			case spent[cg] && !before[cg]:
				got = "unfinished"
			case slices.Contains(unreached, cg):
				got = "unreached"
			case before[cg]:
				got = "past its walk already"
			}
			want := "untouched"
			switch {
			case before[cg]:
				want = "past its walk already"
			case cut < 0 && ticks[cg] > budget:
				want = "unfinished"
			case cut < 0:
				want = "unreached"
			case last[tail[cut]] == cg && ticks[cg] >= own:
				want = "unfinished"
			case last[tail[cut]] == cg:
				want = "unreached"
			case i > cut && ticks[cg] > budget:
				want = "unfinished"
			case i > cut:
				want = "unreached"
			}
			// A cgroup's processes are walked together: its first after the cut decides.
			if i < cut && slices.ContainsFunc(tail[cut:], func(p uint32) bool { return last[p] == cg }) {
				continue
			}
			if got != want {
				t.Fatalf("tail %v (cgroups %v, ticks %v) cut at %d: cgroup %d of process %d %s, want %s", tail, last, ticks, cut, cg, pid, got, want)
			}
		}
	}
}

// A listing of processes is reused while no process is made, and a process made since
// is named by the next.
func TestAProcessMadeSinceTheLastListingIsNamed(t *testing.T) {
	p, _ := newCgroups(t, 1)
	b := newBPFOrSkip(t, p)
	if err := b.FollowMappers(); err != nil {
		t.Fatal(err)
	}
	first, err := b.processes()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	p.start(t, 0, cmd)
	next, err := b.processes()
	if err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	if slices.Contains(first, pid) || !slices.Contains(next, pid) {
		t.Errorf("process %d started between two listings: in the first %v, in the next %v; want the next alone", pid, slices.Contains(first, pid), slices.Contains(next, pid))
	}
}

// The units named past the light walk are the largest of those not heavy already, as few
// as leave the others within the budget. Over generated units.
func TestPastLightWalkNamesTheLargestUntilTheRestFits(t *testing.T) {
	rng := rand.New(rand.NewPCG(53, 9))
	for range 2000 {
		ticks := map[uint64]uint64{}
		var heavy []uint64
		for u := range uint64(rng.IntN(12)) {
			ticks[u] = rng.Uint64N(40)
			if rng.IntN(4) == 0 {
				heavy = append(heavy, u)
			}
		}
		budget := rng.Uint64N(100)
		past := pastLightWalk(ticks, heavy, budget)
		left := uint64(0)
		for u, n := range ticks {
			if !slices.Contains(heavy, u) && !slices.Contains(past, u) {
				left += n
				for _, p := range past {
					if ticks[p] < n {
						t.Fatalf("ticks %v, heavy %v, budget %d: named %v, leaving unit %d (%d ticks) larger than %d (%d)", ticks, heavy, budget, past, u, n, p, ticks[p])
					}
				}
			}
		}
		if left > budget {
			t.Fatalf("ticks %v, heavy %v, budget %d: named %v, leaving %d ticks", ticks, heavy, budget, past, left)
		}
		if len(past) > 0 && left+ticks[past[len(past)-1]] <= budget {
			t.Fatalf("ticks %v, heavy %v, budget %d: named %v, one more than needed", ticks, heavy, budget, past)
		}
		for _, u := range past {
			if slices.Contains(heavy, u) {
				t.Fatalf("ticks %v, heavy %v: named %d, heavy already", ticks, heavy, u)
			}
		}
		if again := pastLightWalk(ticks, heavy, budget); !slices.Equal(again, past) {
			t.Fatalf("ticks %v, heavy %v, budget %d: named %v, then %v", ticks, heavy, budget, past, again)
		}
	}
}
