// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/internal/load32"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/sim"
)

// A 32-bit CG is measured as a 64-bit one is: its system calls enter the kernel through
// its compat entries, which the syscall tracepoints do not see, so its DMA mapping
// (mmap2), its queues (openat) and the queue it put in flight (socketcall on i386,
// sendmsg on ARM) are each counted, by a scan that walks the mappings of the processes
// that may map a target only, as the agent's do.
func TestA32BitCGIsMeasured(t *testing.T) {
	load := load32.OrSkip(t)
	p, dir := newCgroups(t, 1)
	b := newBPFOrSkip(t, p)
	if err := b.FollowMappers(); err != nil {
		t.Fatalf("following mappers: %v", err)
	}
	ctx := context.Background()
	if _, err := b.Scan(ctx); err != nil { // the full pass over every process's mappings
		t.Fatal(err)
	}
	p.start(t, 0, exec.Command(load, "--compute-dma-file", p.sim.File(sim.ComputeDMA), "--cpu-dma-file", p.sim.File(sim.CPUDMA),
		"--queue-file", p.sim.File(sim.HypervisorQ), "--write-file", filepath.Join(dir, "blob"), "--status-file", filepath.Join(dir, "status"),
		"--compute-dma-mb", "3", "--queues", "2", "--inflight-queues", "1"))
	want := nr1.Usage{}
	want[nr1.ComputeDMAMemory] = 3 << 20
	want[nr1.HypervisorQueue] = 3
	var got nr1.Usage
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		s, err := b.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got = byCgroup(s, p.targets)[p.ids[0]]; got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a 32-bit CG holding 3 MB of compute DMA and 3 queues (one in flight) measured %v, want %v", got, want)
		}
	}
}
