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

// A pool's workers each hold one queue for their time and exit, another at once in
// their place: never more than the pool's size at a time, each open counted, and the
// counts logged with their time, last when it ends; an open that fails is counted and
// logged apart from a refusal.
func TestPoolKeepsItsWorkersGoing(t *testing.T) {
	l := newLoad(t)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var out syncbuf.Buffer
	args := []string{
		"--compute-dma-file", l.compute.path, "--cpu-dma-file", l.cpu.path, "--queue-file", l.queues.path,
		"--write-file", l.write.path, "--status-file", l.status, "--queues", "1", "--pool", "3", "--pool-hold", "100ms",
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, &out) }()
	most := 0
	for ctx.Err() == nil {
		most = max(most, heldAnywhere(l.queues.path))
		time.Sleep(5 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if most < 2 || most > 1+3 {
		t.Errorf("at most %d fds on the queue file at a time, want the 1 held and up to the pool's 3 (2 at least)", most)
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
	// 1.5 s of workers holding 100 ms each, three at a time.
	if opens < 9 || refused != 0 || failed != 0 {
		t.Errorf("pool opens=%d refused=%d failed=%d, want at least 9 opens, none refused or failed:\n%s", opens, refused, failed, out.String())
	}

	// Its queue file gone, every open fails, and says so.
	if err := os.Remove(l.queues.path); err != nil {
		t.Fatal(err)
	}
	failing := []string{"--queue-file", l.queues.path, "--write-file", l.write.path, "--status-file", "", "--pool", "1"}
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var fout syncbuf.Buffer
	if err := run(ctx, failing, &fout); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fout.String(), "pool failed: worker 0: exit status 1: nr1-load pool worker: opening "+l.queues.path) || strings.Contains(fout.String(), "failed=0\n") {
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
