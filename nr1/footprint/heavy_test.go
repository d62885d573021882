// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
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
	for pid := range heavyLast(root, heavy, tail, &failed, begin, none) {
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
	if got := slices.Collect(heavyLast(root, heavy, tail, &failed, func() {}, spent)); !slices.Equal(got, []uint32{1, 7, 9, 5}) {
		t.Errorf("cgroup 30 passed over: walked %v, want [1 7 9 5]", got)
	}
	var stopped []uint32
	for pid := range heavyLast(root, heavy, tail, &failed, begin, none) {
		stopped = append(stopped, pid)
		break
	}
	if !slices.Equal(stopped, []uint32{1}) {
		t.Errorf("a walk stopped at its first process named %v", stopped)
	}
	if _ = slices.Collect(heavyLast(filepath.Join(root, "absent"), heavy, tail, &failed, func() {}, none)); failed == nil {
		t.Error("a procfs that cannot be listed: no error")
	}
}

// The heavy cgroups are walked smallest first, by the ticks the last scan counted of
// each, then by PID.
func TestTheSmallestHeavyCgroupIsWalkedFirst(t *testing.T) {
	b := &BPF{heavy: map[uint64]uint64{10: 500, 20: 17, 30: 17}}
	got := b.tailOrder(map[uint32]uint64{4: 10, 2: 10, 9: 20, 3: 30, 8: 20})
	if want := []uint32{8, 9, 3, 2, 4}; !slices.Equal(got, want) {
		t.Errorf("walked %v, want %v", got, want)
	}
}
