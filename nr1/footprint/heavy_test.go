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

// The processes walked last come after every other, those others listed again once
// walked, so that a process made meanwhile is walked before the heavy ones too; the
// heavy ones' time begins before the first of them.
func TestHeavyLastWalksProcessesMadeMeanwhileFirst(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, 1, 5, 9)
	heavy := map[uint32]uint64{5: 50, 3: 30} // 3 has exited
	var failed error
	var order []uint32
	begun := -1
	begin := func() { begun = len(order) }
	for pid := range heavyLast(root, heavy, &failed, begin) {
		order = append(order, pid)
		if pid == 9 {
			fakeProc(t, root, 7) // made while 9 was walked
		}
	}
	if failed != nil {
		t.Fatal(failed)
	}
	if want := []uint32{1, 9, 7, 3, 5}; !slices.Equal(order, want) {
		t.Errorf("walked %v, want %v", order, want)
	}
	if begun != 3 {
		t.Errorf("the heavy processes begun after %d processes, want after 3", begun)
	}
	var stopped []uint32
	for pid := range heavyLast(root, heavy, &failed, begin) {
		stopped = append(stopped, pid)
		break
	}
	if !slices.Equal(stopped, []uint32{1}) {
		t.Errorf("a walk stopped at its first process named %v", stopped)
	}
	if _ = slices.Collect(heavyLast(filepath.Join(root, "absent"), heavy, &failed, func() {})); failed == nil {
		t.Error("a procfs that cannot be listed: no error")
	}
}
