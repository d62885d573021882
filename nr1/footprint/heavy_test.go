// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// fakeProc makes a procfs of the PIDs given under a directory of the test's, each with
// a stat naming its start time.
func fakeProc(t *testing.T, root string, started map[uint32]string) {
	t.Helper()
	for pid, stat := range started {
		dir := filepath.Join(root, itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func itoa(pid uint32) string { return strconv.FormatUint(uint64(pid), 10) }

// stat is a /proc/PID/stat line of a process named comm started at start.
func stat(pid uint32, comm, start string) string {
	return itoa(pid) + " (" + comm + ") S 1 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 " + start + " 1000 10 18446744073709551615\n"
}

// The processes walked last come after every other, those others listed again once
// walked, so that a process made meanwhile is walked before the heavy ones too.
func TestHeavyLastWalksProcessesMadeMeanwhileFirst(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, map[uint32]string{1: "", 5: "", 9: ""})
	heavy := map[uint32]heavyProcess{5: {cgroup: 50}, 3: {cgroup: 30}} // 3 has exited
	var failed error
	var order []uint32
	for pid := range heavyLast(root, heavy, &failed) {
		order = append(order, pid)
		if pid == 9 {
			fakeProc(t, root, map[uint32]string{7: ""}) // made while 9 was walked
		}
	}
	if failed != nil {
		t.Fatal(failed)
	}
	if want := []uint32{1, 9, 7, 3, 5}; !slices.Equal(order, want) {
		t.Errorf("walked %v, want %v", order, want)
	}
	var stopped []uint32
	for pid := range heavyLast(root, heavy, &failed) {
		stopped = append(stopped, pid)
		break
	}
	if !slices.Equal(stopped, []uint32{1}) {
		t.Errorf("a walk stopped at its first process named %v", stopped)
	}
	if _ = slices.Collect(heavyLast(filepath.Join(root, "absent"), heavy, &failed)); failed == nil {
		t.Error("a procfs that cannot be listed: no error")
	}
}

// A process walked last stays so only while it is the same process: one given its PID
// since (another start time) is walked in its order, and a process gone is dropped.
func TestAPIDGivenAgainIsNotWalkedLast(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, map[uint32]string{
		40: stat(40, "flood", "5000"),
		41: stat(41, "a) (b c", "7000"), // a name that looks like fields
		42: stat(42, "reused", "9100"),
	})
	b := &BPF{procRoot: root, heavy: map[uint32]heavyProcess{
		40: {cgroup: 1, started: 5000},
		41: {cgroup: 1, started: 7000},
		42: {cgroup: 1, started: 4200}, // exited; its PID now another process's
		43: {cgroup: 1, started: 100},  // exited
	}}
	still := b.stillHeavy()
	if len(still) != 2 || still[40].started != 5000 || still[41].started != 7000 {
		t.Errorf("still heavy %v, want PIDs 40 and 41 only", still)
	}
	if n, ok := startTime(root, 41); !ok || n != 7000 {
		t.Errorf("startTime of a process whose name holds ') (' = %d, %v; want 7000", n, ok)
	}
}
