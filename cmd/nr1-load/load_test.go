// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/syncbuf"
)

// mappedMB sums this process's mappings of path, from /proc/self/maps.
func mappedMB(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var total int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != path {
			continue
		}
		var lo, hi int64
		if _, err := fmt.Sscanf(fields[0], "%x-%x", &lo, &hi); err != nil {
			t.Fatal(err)
		}
		total += hi - lo
	}
	return total / mb
}

// openHandles counts this process's fds open on path.
func openHandles(t *testing.T, path string) int64 {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == path {
			n++
		}
	}
	return n
}

func newLoad(t *testing.T) *load {
	t.Helper()
	dir := t.TempDir()
	l := &load{out: &strings.Builder{}, now: time.Now, status: filepath.Join(dir, "status.json")}
	l.compute.path = filepath.Join(dir, "compute_dma")
	l.cpu.path = filepath.Join(dir, "cpu_dma")
	l.queues.path = filepath.Join(dir, "queue")
	l.write.path = filepath.Join(dir, "blob")
	for _, p := range []string{l.compute.path, l.cpu.path} {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(64 * mb); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if err := os.WriteFile(l.queues.path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLoadHoldsWhatItIsTold(t *testing.T) {
	l := newLoad(t)
	check := func(h Holding) {
		t.Helper()
		if got := mappedMB(t, l.compute.path); got != h.ComputeDMAMB {
			t.Errorf("compute DMA mapped %d MB, want %d", got, h.ComputeDMAMB)
		}
		if got := mappedMB(t, l.cpu.path); got != h.CPUDMAMB {
			t.Errorf("CPU DMA mapped %d MB, want %d", got, h.CPUDMAMB)
		}
		if got := openHandles(t, l.queues.path); got != h.Queues {
			t.Errorf("%d queue handles, want %d", got, h.Queues)
		}
		var st unix.Stat_t
		if err := unix.Stat(l.write.path, &st); h.WriteMB > 0 && (err != nil || st.Blocks*512 < h.WriteMB*mb) {
			t.Errorf("writable layer: %d bytes allocated, want at least %d MB (%v)", st.Blocks*512, h.WriteMB, err)
		}
		b, err := os.ReadFile(l.status)
		if err != nil {
			t.Fatal(err)
		}
		var s status
		if err := json.Unmarshal(b, &s); err != nil || s.Holding != h || s.PID != os.Getpid() {
			t.Errorf("status %s, want %+v", b, h)
		}
	}
	for _, h := range []Holding{
		{ComputeDMAMB: 3, CPUDMAMB: 1, Queues: 7, WriteMB: 4},
		{ComputeDMAMB: 10, CPUDMAMB: 1, Queues: 9, WriteMB: 8}, // grow: new mappings
		{ComputeDMAMB: 5, CPUDMAMB: 0, Queues: 2, WriteMB: 2},  // shrink: partial munmap
		{ComputeDMAMB: 0, Queues: 0},
	} {
		if err := l.apply(h); err != nil {
			t.Fatal(err)
		}
		check(h)
	}
}

func TestRunFollowsSteps(t *testing.T) {
	l := newLoad(t)
	var out strings.Builder
	err := run(context.Background(), []string{
		"--compute-dma-file", l.compute.path, "--cpu-dma-file", l.cpu.path, "--queue-file", l.queues.path,
		"--write-file", l.write.path, "--status-file", l.status,
		"--compute-dma-mb", "3", "--queues", "7",
		"--step", "100ms:compute=6", "--step", "50ms:queues=8", "--exit",
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if !strings.Contains(lines[0], " budget ") {
		t.Fatalf("first line %q does not report the budget", lines[0])
	}
	lines = lines[1:]
	want := []string{"holding compute_dma_mb=3 cpu_dma_mb=0 queues=7",
		"stepping to compute_dma_mb=3 cpu_dma_mb=0 queues=8", "holding compute_dma_mb=3 cpu_dma_mb=0 queues=8",
		"stepping to compute_dma_mb=6 cpu_dma_mb=0 queues=8", "holding compute_dma_mb=6 cpu_dma_mb=0 queues=8"}
	if len(lines) != len(want) {
		t.Fatalf("log:\n%s", out.String())
	}
	var prev time.Time
	for i, line := range lines {
		ts, err := time.Parse(time.RFC3339Nano, strings.Fields(line)[0])
		if err != nil || ts.Before(prev) || !strings.Contains(line, want[i]) {
			t.Fatalf("line %d %q: want a timestamp then %q", i, line, want[i])
		}
		prev = ts
	}
}

// After its steps, a probing load tries a new open of the queue device again and again,
// logging each refusal with its time and holding nothing more: opens that succeed are
// closed at once.
func TestProbeLogsRefusals(t *testing.T) {
	l := newLoad(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var out syncbuf.Buffer
	args := []string{
		"--compute-dma-file", l.compute.path, "--cpu-dma-file", l.cpu.path, "--queue-file", l.queues.path,
		"--write-file", l.write.path, "--status-file", l.status, "--queues", "2", "--probe", "20ms",
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, &out) }()
	time.Sleep(100 * time.Millisecond)
	if n := openHandles(t, l.queues.path); n != 2 {
		t.Errorf("%d fds on the queue file while probing, want the 2 held", n)
	}
	// Every open refused from now on, as a throttle refuses them (a directory in its
	// place: root is refused that too).
	if err := os.Remove(l.queues.path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(l.queues.path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, line := range strings.Split(out.String(), "\n") {
		stamp, rest, _ := strings.Cut(line, " ")
		if strings.HasPrefix(rest, "probe refused: ") {
			if _, err := time.Parse(time.RFC3339Nano, stamp); err != nil {
				t.Errorf("refusal %q without its time", line)
			}
			refused++
		}
	}
	if refused == 0 {
		t.Errorf("no refusal logged:\n%s", out.String())
	}
}

func TestParseStepErrors(t *testing.T) {
	for _, bad := range []string{"compute=3", "x:compute=3", "1s:gpu=3", "1s:compute=-1", "1s:compute", "-1s:queues=2"} {
		if _, err := ParseStep(bad); err == nil {
			t.Errorf("ParseStep(%q) accepted", bad)
		}
	}
}

// mappedRanges lists the file ranges (MB, [from to)) of this process's mappings of
// path, merged where they touch: the kernel merges mappings adjacent both in memory and
// in the file, which depends on where mmap places them (top down natively, bottom up
// under qemu-user).
func mappedRanges(t *testing.T, path string) [][2]int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	var ranges [][2]int64
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[5] != path {
			continue
		}
		var lo, hi, off int64
		if _, err := fmt.Sscanf(fields[0], "%x-%x", &lo, &hi); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscanf(fields[2], "%x", &off); err != nil {
			t.Fatal(err)
		}
		ranges = append(ranges, [2]int64{off / mb, (off + hi - lo) / mb})
	}
	slices.SortFunc(ranges, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) }) // maps lists by address
	var out [][2]int64
	for _, r := range ranges {
		if n := len(out); n > 0 && r[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], r[1])
			continue
		}
		out = append(out, r)
	}
	return out
}

// Distinct buffers of one device are distinct ranges of its file: an offset places
// this load's buffers after another's.
func TestDMAOffsetPlacesTheBuffers(t *testing.T) {
	l := newLoad(t)
	l.compute.base = 1
	if err := l.apply(Holding{ComputeDMAMB: 2}); err != nil {
		t.Fatal(err)
	}
	if err := l.apply(Holding{ComputeDMAMB: 4}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(mappedRanges(t, l.compute.path)); got != "[[1 5]]" || mappedMB(t, l.compute.path) != 4 {
		t.Errorf("4 MB mapped at %s MB, want [[1 5]]: the first at the offset, the growth after it", got)
	}
	if err := l.apply(Holding{}); err != nil {
		t.Fatal(err)
	}
}

// --unlink-written holds what it writes in files with no name left: the layer's names
// show nothing, the held files take the MB asked, a growth adds a file, a shrink holds
// what is left.
func TestUnlinkedWritesHoldTheirBlocksWithNoName(t *testing.T) {
	dir := t.TempDir()
	w := writable{path: filepath.Join(dir, "blob"), unlink: true}
	held := func() (int64, int) {
		t.Helper()
		if names, err := os.ReadDir(dir); err != nil || len(names) != 0 {
			t.Fatalf("names left in the layer: %v %v", names, err)
		}
		var size int64
		for _, f := range w.held {
			st, err := f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			if n := st.Sys().(*syscall.Stat_t).Nlink; n != 0 {
				t.Errorf("%s: %d links", f.Name(), n)
			}
			size += st.Size()
		}
		return size / mb, len(w.held)
	}
	for _, step := range []struct {
		target      int64
		size, files int
	}{{3, 3, 1}, {5, 5, 2}, {1, 1, 1}, {0, 0, 0}} {
		if err := w.set(step.target); err != nil {
			t.Fatal(err)
		}
		if size, files := held(); size != int64(step.size) || files != step.files {
			t.Errorf("set(%d): %d MB in %d files, want %d MB in %d", step.target, size, files, step.size, step.files)
		}
	}
}
