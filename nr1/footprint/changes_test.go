// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/sim"
)

// A process of a CG mapping the DMA file and opening the queue wakes the sampler; a scan
// after the wake sees what it took.
func TestChangesWakeWhenACGTakesATarget(t *testing.T) {
	// The changes are any process's on the host: the queue here is /dev/full's numbers
	// (1:7), which nothing else opens, not tun's, which the other tests' simulated queues
	// share.
	p, _ := newCgroupsWithQueue(t, 1, 1, 7)
	b := newBPFOrSkip(t, p)
	c, err := b.WatchChanges(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("kernel lacks the syscall tracepoints: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	select {
	case <-c.Wake():
		t.Fatal("woken before anything was taken")
	case <-time.After(200 * time.Millisecond):
	}
	p.startMapper(t, 0, mapperSpec{Maps: []mapperRange{{File: p.sim.File(sim.ComputeDMA), SizeMB: 2}}, Open: []string{p.sim.File(sim.HypervisorQ)}})
	select {
	case <-c.Wake():
	case <-time.After(10 * time.Second):
		t.Fatal("no wake after a CG mapped the DMA file and opened the queue")
	}
	if n := c.Seen(); n < 2 {
		t.Errorf("%d changes seen, want the mapping and the open", n)
	}
	s, err := b.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := byCgroup(s, p.targets)[p.ids[0]]; got != (nr1.Usage{2 << 20, 0, 0, 1}) {
		t.Errorf("scan after the wake: %v", got)
	}
}
