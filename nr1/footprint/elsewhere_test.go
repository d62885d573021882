// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/sim"
)

// A queue held by the kernel for a CG (a read blocked on it, its fd closed by another
// thread; an io_uring request pending is held alike) is in no fd table, ring or socket,
// yet held: the scan counts it for its opener's cgroup, until it is released. Without
// that, a queue a CG holds that way is invisible to every walk, and the budget gate is
// settled to what the walks found.
func TestAQueueTheKernelHoldsForACGCounts(t *testing.T) {
	p, _ := newCgroups(t, 2)
	b := newBPFOrSkip(t, p)
	// The opens' tracepoints, which remember each queue description with its opener.
	if _, err := b.WatchChanges(slog.New(slog.NewTextHandler(io.Discard, nil))); errors.Is(err, os.ErrNotExist) {
		t.Skipf("kernel lacks the syscall tracepoints: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	cmd := exec.Command(nr1Load, "--compute-dma-file", p.sim.File(sim.ComputeDMA), "--cpu-dma-file", p.sim.File(sim.CPUDMA),
		"--queue-file", p.sim.File(sim.HypervisorQ), "--write-file", filepath.Join(dir, "blob"), "--status-file", "", "--blocked-queues", "1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	before := monotonic()
	p.start(t, 1, cmd)
	for rd := bufio.NewReader(out); ; {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("nr1-load never held its blocked queue: %v", err)
		}
		if strings.Contains(line, "blocked_queues=1") {
			break
		}
	}
	queues := func(s *Scan) (fds, elsewhere int) {
		for _, h := range s.Handles {
			if h.CgroupID != p.ids[1] || p.targets.At(h.Target).Resource != nr1.HypervisorQueue {
				continue
			}
			if h.FD < 0 {
				elsewhere++
			} else {
				fds++
			}
		}
		return fds, elsewhere
	}
	s, err := b.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stillReading(t, cmd.Process.Pid)
	// The simulated queue is tun's device, which other tests on the machine open too:
	// only this CG's descriptions are asked about.
	if fds, elsewhere := queues(s); fds != 0 || elsewhere != 1 || s.Cutoff != 0 {
		t.Errorf("a queue a blocked read holds: %d by fds, %d elsewhere (scan cut off at %d); want 0 and 1", fds, elsewhere, s.Cutoff)
	}
	// A scan that began before the queue was opened may have walked past its fd before
	// it was made (a pool's next worker's): it is not held elsewhere for that scan.
	for _, c := range []struct {
		since uint64
		want  int
	}{{before, 0}, {monotonic(), 1}} {
		walked := &Scan{}
		if err := walked.heldElsewhere(b.fp, len(b.targets.list), c.since); err != nil {
			t.Fatal(err)
		}
		if _, elsewhere := queues(walked); elsewhere != c.want {
			t.Errorf("held elsewhere for a scan begun %s the open: %d, want %d (%d remembered in all)", map[int]string{0: "before", 1: "after"}[c.want], elsewhere, c.want, walked.Elsewhere)
		}
	}
	_ = cmd.Process.Kill() // the read ends, the description is released
	_ = cmd.Wait()
	if s, err = b.Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fds, elsewhere := queues(s); fds != 0 || elsewhere != 0 {
		t.Errorf("once released: %d by fds, %d elsewhere; want none", fds, elsewhere)
	}
}

// stillReading fails the test unless a thread of process pid is still in read(2): a
// holding that ended by itself is not the scan's to find.
func stillReading(t *testing.T, pid int) {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/syscall", pid, task.Name()))
		if err == nil && strings.HasPrefix(string(b), fmt.Sprintf("%d ", unix.SYS_READ)) {
			return
		}
	}
	t.Fatalf("no thread of nr1-load (%d) reads its blocked queue any more: the holding ended by itself", pid)
}
