// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/internal/syncbuf"
)

// A pool's workers each hold one queue for their time and exit, another in their place:
// never more than the pool's size at a time, all of them at once at some point, each
// open counted, and the counts logged with their time, last when it ends (after the
// workers still holding end); an open that fails is counted and logged apart from a
// refusal. Counts, not time: a loaded machine starts processes slowly.
func TestPoolKeepsItsWorkersGoing(t *testing.T) {
	l := newLoad(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncbuf.Buffer
	args := []string{
		"--compute-dma-file", l.compute.path, "--cpu-dma-file", l.cpu.path, "--queue-file", l.queues.path,
		"--write-file", l.write.path, "--status-file", l.status, "--queues", "1", "--pool", "3", "--pool-hold", "300ms",
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, &out) }()
	most := 0
	for deadline := time.Now().Add(60 * time.Second); most < 1+3 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		n := heldAnywhere(l.queues.path)
		if n > 1+3 {
			t.Errorf("%d fds on the queue file at once, more than the 1 held and the pool's 3", n)
		}
		most = max(most, n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if most != 1+3 {
		t.Fatalf("at most %d fds on the queue file at a time, want the 1 held and the pool's 3 at once", most)
	}
	var opens, refused, failed int
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	stamp, rest, _ := strings.Cut(last, " ")
	if _, err := time.Parse(time.RFC3339Nano, stamp); err != nil {
		t.Fatalf("last line %q: %v", last, err)
	}
	if _, err := fmt.Sscanf(rest, "pool opens=%d refused=%d failed=%d", &opens, &refused, &failed); err != nil {
		t.Fatalf("last line %q: %v\n%s", last, err, out.String())
	}
	// The three seen holding at once ended their hold before the last count.
	if opens < 3 || refused != 0 || failed != 0 {
		t.Errorf("pool opens=%d refused=%d failed=%d, want at least the 3 seen, none refused or failed:\n%s", opens, refused, failed, out.String())
	}

	// Its queue file gone, every open fails, and says so.
	if err := os.Remove(l.queues.path); err != nil {
		t.Fatal(err)
	}
	failing := []string{"--queue-file", l.queues.path, "--write-file", l.write.path, "--status-file", "", "--pool", "1"}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	var fout syncbuf.Buffer
	go func() { done <- run(ctx, failing, &fout) }()
	want := "pool failed: worker 0: exit status 1: nr1-load pool worker: opening " + l.queues.path
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(fout.String(), want) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fout.String(), want) || strings.Contains(fout.String(), "failed=0\n") {
		t.Errorf("a pool whose opens fail:\n%s", fout.String())
	}
}

// heldAnywhere counts the fds on path of every process.
func heldAnywhere(path string) int {
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && target == path {
			n++
		}
	}
	return n
}
