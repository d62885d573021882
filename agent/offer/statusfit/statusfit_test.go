// SPDX-License-Identifier: Apache-2.0

package statusfit

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/internal/latest"
	"github.com/neureality-sdk/nr1-agent/internal/syncbuf"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

type recorded struct{ uid, reason, message string }

type events struct{ got []recorded }

func (e *events) Event(_, _, uid, _, reason, message string) {
	e.got = append(e.got, recorded{uid, reason, message})
}

func cg(uid string, known bool, containers ...*view.Container) *view.CG {
	c := &view.CG{UID: uid, Namespace: "ns", Name: uid, AllocationKnown: known, Containers: containers}
	for _, ctr := range containers {
		if ctr.AllocationSource == view.FromPodResources {
			for _, r := range nr1.All {
				c.Allocation[r] += ctr.Allocation[r]
			}
		}
	}
	return c
}

func listed(a nr1.Amounts) *view.Container {
	return &view.Container{Name: "health-handler", Allocation: a, AllocationSource: view.FromPodResources}
}

// The ResNet-50 CG's entries are about 98 KiB, 100,000 MB of compute DMA's 4 MiB. An
// init container the kubelet does not list has no entries in the status.
func TestStatusBytes(t *testing.T) {
	resnet := StatusBytes(cg("rn", true, listed(nr1.Amounts{3, 0, 2392, 7})))
	if want := int64(2402*deviceBytes + 3*resourceBytes + len(nr1.ComputeDMAMemory.Name()) + len(nr1.DockerPartition.Name()) + len(nr1.HypervisorQueue.Name())); resnet != want {
		t.Errorf("ResNet-50: %d bytes, want %d", resnet, want)
	}
	big := cg("big", true, listed(nr1.Amounts{100000, 0, 0, 1}), &view.Container{Name: "init", Allocation: nr1.Amounts{100000}, AllocationSource: view.FromAnnotations})
	if n := StatusBytes(big); n <= MaxRequestBytes || n > 4300000 {
		t.Errorf("100,000 MB: %d bytes, want just over 4 MB", n)
	}
}

func TestCheckTellsOncePerCG(t *testing.T) {
	ev := &events{}
	gates := "on"
	c := New(func(context.Context) (bool, string, error) {
		return gates == "on", "ResourceHealthStatus=" + gates, nil
	}, ev, slog.New(slog.NewTextHandler(io.Discard, nil)))
	big := cg("big", false, listed(nr1.Amounts{100000, 0, 2394, 1}))
	small := cg("small", true, listed(nr1.Amounts{3, 0, 2392, 7}))
	c.Check(t.Context(), []*view.CG{big, small})
	if len(ev.got) != 0 {
		t.Fatalf("told before the allocation was known: %+v", ev.got)
	}
	big.AllocationKnown = true
	for range 3 {
		c.Check(t.Context(), []*view.CG{big, small})
	}
	if len(ev.got) != 1 || ev.got[0].uid != "big" || ev.got[0].reason != Reason {
		t.Fatalf("events %+v, want one %s on big", ev.got, Reason)
	}
	for _, want := range []string{"100000 MB of compute_dma_memory", "ResourceHealthStatus=on", "3 MiB", "ResourceHealthStatus and ResourceHealthStatusMessage off", "mode: dra"} {
		if !strings.Contains(ev.got[0].message, want) {
			t.Errorf("message %q does not say %q", ev.got[0].message, want)
		}
	}
	tooLarge, health, unknown := c.Collectors()[0], c.Collectors()[1], c.Collectors()[2]
	if n := testutil.ToFloat64(tooLarge); n != 1 {
		t.Errorf("gauge %v with the big CG running, want 1", n)
	}
	if n := testutil.ToFloat64(health); n != 1 {
		t.Errorf("resource health gauge %v, want 1", n)
	}
	if n := testutil.ToFloat64(unknown); n != 0 {
		t.Errorf("gates unknown gauge %v with the gates read, want 0", n)
	}
	c.Check(t.Context(), []*view.CG{small})
	if n := testutil.ToFloat64(tooLarge); n != 0 {
		t.Errorf("gauge %v once it is gone, want 0", n)
	}
	// With the kubelet's resource health off, nothing is said; the gates are read again
	// once they are old.
	gates = "off"
	c.now = func() time.Time { return time.Now().Add(gatesMaxAge) }
	c.Check(t.Context(), []*view.CG{cg("big2", true, listed(nr1.Amounts{100000}))})
	if len(ev.got) != 1 || testutil.ToFloat64(tooLarge) != 0 {
		t.Errorf("told with resource health off: %+v", ev.got)
	}
	if n := testutil.ToFloat64(health); n != 0 {
		t.Errorf("resource health gauge %v once the gates say off, want 0", n)
	}
	// The kubelet restarted with the gate on, within the minute the last reading is kept:
	// a CG past the budget is checked against the gates read afresh.
	gates = "on"
	c.Check(t.Context(), []*view.CG{cg("big3", true, listed(nr1.Amounts{100000}))})
	if len(ev.got) != 2 || ev.got[1].uid != "big3" || testutil.ToFloat64(health) != 1 {
		t.Errorf("a big CG after the gates turned on: events %+v, gauge %v", ev.got, testutil.ToFloat64(health))
	}
}

// Run checks the CGs of each new sample as it is published.
func TestRunChecksEachNewSample(t *testing.T) {
	ev := &events{}
	c := New(func(context.Context) (bool, string, error) { return true, "ResourceHealthStatus=on", nil }, ev, slog.New(slog.NewTextHandler(io.Discard, nil)))
	samples := latest.New[*view.Sample](nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, samples.View()) }()
	samples.Publish(time.Now(), &view.Sample{CGs: []*view.Measured{{CG: cg("big", true, listed(nr1.Amounts{100000}))}}})
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(c.Collectors()[0]) != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if len(ev.got) != 1 || ev.got[0].uid != "big" {
		t.Errorf("events %+v, want one on big", ev.got)
	}
}

// A reading of the gates that fails is unknown, exported and logged: the default (on) is
// kept and CGs past the budget are still told. One that never ends holds neither the
// checker nor its stop, and no second reading starts beside it.
func TestGatesUnknownOrStuck(t *testing.T) {
	ev := &events{}
	var log syncbuf.Buffer
	fail := errors.New("the kubelet's --config /k.yaml: not a regular file")
	c := New(func(context.Context) (bool, string, error) { return true, "unknown", fail }, ev, slog.New(slog.NewTextHandler(&log, nil)))
	c.Check(t.Context(), []*view.CG{cg("big", true, listed(nr1.Amounts{100000}))})
	_, health, unknown := c.Collectors()[0], c.Collectors()[1], c.Collectors()[2]
	if testutil.ToFloat64(unknown) != 1 || testutil.ToFloat64(health) != 1 || len(ev.got) != 1 {
		t.Errorf("gates failing: unknown %v, health %v, events %+v; want 1, 1, one Event", testutil.ToFloat64(unknown), testutil.ToFloat64(health), ev.got)
	}
	if !strings.Contains(log.String(), "not a regular file") {
		t.Errorf("the failure is not logged: %s", log.String())
	}

	release := make(chan struct{})
	defer close(release)
	var started atomic.Int32
	stuck := New(func(ctx context.Context) (bool, string, error) {
		started.Add(1)
		<-release
		return false, "late", nil
	}, ev, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		stuck.Check(ctx, []*view.CG{cg("small", true, listed(nr1.Amounts{3, 0, 2392, 7}))})
	}()
	for started.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Check held by a reading of the gates that never ends, its context cancelled")
	}
	stuck.now = func() time.Time { return time.Now().Add(2 * gatesMaxAge) }
	stuck.Check(t.Context(), []*view.CG{cg("big4", true, listed(nr1.Amounts{100000}))})
	if n := started.Load(); n != 1 {
		t.Errorf("%d readings started while the first never ended, want 1", n)
	}
	if testutil.ToFloat64(stuck.Collectors()[2]) != 1 {
		t.Error("a reading still under way is not reported as the gates unknown")
	}
}
