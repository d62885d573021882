// SPDX-License-Identifier: Apache-2.0

package sampler

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime"
	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime/fakecri"
	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// fixedView is a runtime view that does not change.
type fixedView struct{ s *runtime.Snapshot }

func (v fixedView) Load() (*runtime.Snapshot, <-chan struct{}) { return v.s, nil }

// A failed ContainerStats is an unknown partition for that CG, never zero bytes; so is
// an answer without the figure (CRI-O's when its storage cannot measure the layer), one
// of 0 bytes measured at no time (containerd's for a layer not sized yet) and an image
// the runtime does not know; the other CGs are still measured.
func TestPartitionFailureIsUnknownNotZero(t *testing.T) {
	cri := fakecri.New(filepath.Join(t.TempDir(), "cri.sock"))
	for _, c := range []fakecri.Container{
		{ID: "a1", SandboxID: "sa", Name: "health-handler", Image: "img-a"},
		{ID: "a2", SandboxID: "sa", Name: "sidecar", Image: "img-a"},
		{ID: "b1", SandboxID: "sb", Name: "health-handler", Image: "img-b"},
		{ID: "c1", SandboxID: "sc", Name: "health-handler", Image: "img-a"},
		{ID: "d1", SandboxID: "sd", Name: "health-handler", Image: "img-gone"},
		{ID: "e1", SandboxID: "se", Name: "health-handler", Image: "img-a"},
	} {
		cri.PutContainer(c, true)
	}
	cri.SetImageSize("img-a", 100<<20)
	cri.SetImageSize("img-b", 50<<20)
	cri.SetWritable("a1", 10<<20, nil)
	cri.SetWritable("a2", 1<<20, nil)
	cri.SetWritableSizedAt("a1", time.Unix(1000, 0))
	cri.SetWritableSizedAt("a2", time.Unix(990, 0))
	cri.SetWritable("b1", 0, status.Error(codes.DeadlineExceeded, "stats timed out"))
	cri.SetWritableMissing("c1")
	cri.SetWritable("d1", 1<<20, nil)
	cri.SetWritableUnsized("e1")
	if err := cri.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cri.Stop)

	running := func(id, name, image string) *runtime.Container {
		return &runtime.Container{ID: id, Name: name, ImageRef: image, State: view.Running}
	}
	rs := &runtime.Snapshot{Connected: true, Pods: []*runtime.Pod{
		{UID: "ua", Containers: []*runtime.Container{running("a1", "health-handler", "img-a"), running("a2", "sidecar", "img-a")}},
		{UID: "ub", Containers: []*runtime.Container{running("b1", "health-handler", "img-b")}},
		{UID: "uc", Containers: []*runtime.Container{running("c1", "health-handler", "img-a")}},
		{UID: "ud", Containers: []*runtime.Container{running("d1", "health-handler", "img-gone")}},
		{UID: "ue", Containers: []*runtime.Container{running("e1", "health-handler", "img-a")}},
	}}
	for _, listFails := range []bool{false, true} {
		cri.FailListContainerStats(map[bool]error{true: status.Error(codes.Unimplemented, "no list")}[listFails])
		t.Run(map[bool]string{false: "listed", true: "each read alone"}[listFails], func(t *testing.T) {
			p := NewPartitionSampler(runtime.NewClient("unix://"+cri.Socket), fixedView{rs}, time.Hour, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			lists, each := cri.Calls("ListContainerStats"), cri.Calls("ContainerStats")
			if err := p.Measure(context.Background()); err != nil {
				t.Fatal(err)
			}
			// One call for the round; alone, only the containers the list leaves out
			// (b1 failing, c1 and e1 without a figure), or every one without a list.
			wantEach := map[bool]int{false: 3, true: 6}[listFails]
			if got := cri.Calls("ListContainerStats") - lists; got != 1 {
				t.Errorf("%d ListContainerStats calls in a round, want 1", got)
			}
			if got := cri.Calls("ContainerStats") - each; got != wantEach {
				t.Errorf("%d ContainerStats calls in a round, want %d", got, wantEach)
			}
			checkPartitionFailures(t, p)
		})
	}
}

func checkPartitionFailures(t *testing.T, p *PartitionSampler) {
	t.Helper()
	got, _ := p.Load()
	// The image once per CG, both writable layers; sized when the older of them was.
	if want := nr1.Base(100<<20 + 11<<20); got.ByCG["ua"] != want {
		t.Errorf("ua %d bytes, want %d", got.ByCG["ua"], want)
	}
	if at := got.SizedAt["ua"]; !at.Equal(time.Unix(990, 0)) {
		t.Errorf("ua's layers sized at %v, want the older's time, %v", at, time.Unix(990, 0))
	}
	if at, ok := got.SizedAt["ub"]; ok {
		t.Errorf("ub, whose layer is unread, sized at %v", at)
	}
	if v, ok := got.ByCG["ub"]; ok {
		t.Errorf("ub measured as %d bytes although its ContainerStats failed", v)
	}
	if why := got.Failed["ub"]; !strings.Contains(why, "stats timed out") {
		t.Errorf("ub failure %q", why)
	}
	for _, uid := range []string{"uc", "ud", "ue"} {
		if v, ok := got.ByCG[uid]; ok {
			t.Errorf("%s measured as %d bytes although the runtime gave no figure", uid, v)
		}
		if why := got.Failed[uid]; !strings.Contains(why, runtime.ErrNoFigure.Error()) {
			t.Errorf("%s failure %q", uid, why)
		}
	}
	if got.Read.IsZero() {
		t.Error("no read time")
	}
}

// A pod's sandboxes are one CG: the sandbox the runtime keeps beside the live one
// (its containers exited) neither hides nor doubles what the live one holds.
func TestPartitionOfAPodWithALeftoverSandbox(t *testing.T) {
	cri := fakecri.New(filepath.Join(t.TempDir(), "cri.sock"))
	cri.PutContainer(fakecri.Container{ID: "live", SandboxID: "s2", Name: "health-handler", Image: "img-a"}, true)
	cri.SetImageSize("img-a", 100<<20)
	cri.SetWritable("live", 30<<20, nil)
	if err := cri.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cri.Stop)
	exited := &runtime.Container{ID: "old", Name: "health-handler", ImageRef: "img-a", State: view.Exited}
	live := &runtime.Container{ID: "live", Name: "health-handler", ImageRef: "img-a", State: view.Running}
	for _, order := range [][]*runtime.Pod{
		{{UID: "ua", SandboxID: "s2", Ready: true, Containers: []*runtime.Container{live}}, {UID: "ua", SandboxID: "s1", Containers: []*runtime.Container{exited}}},
		{{UID: "ua", SandboxID: "s1", Containers: []*runtime.Container{exited}}, {UID: "ua", SandboxID: "s2", Ready: true, Containers: []*runtime.Container{live}}},
	} {
		p := NewPartitionSampler(runtime.NewClient("unix://"+cri.Socket), fixedView{&runtime.Snapshot{Connected: true, Pods: order}}, time.Hour, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err := p.Measure(context.Background()); err != nil {
			t.Fatal(err)
		}
		got, _ := p.Load()
		if want := nr1.Base(130 << 20); got.ByCG["ua"] != want {
			t.Errorf("sandboxes %s then %s: ua %d bytes, want the live one's %d", order[0].SandboxID, order[1].SandboxID, got.ByCG["ua"], want)
		}
	}
}

// A reading like the last renews its time and wakes no one; one that differs wakes the
// sampler.
func TestPartitionWakesOnlyOnChange(t *testing.T) {
	cri := fakecri.New(filepath.Join(t.TempDir(), "cri.sock"))
	cri.PutContainer(fakecri.Container{ID: "a1", SandboxID: "sa", Name: "health-handler", Image: "img-a"}, true)
	cri.SetImageSize("img-a", 100<<20)
	cri.SetWritable("a1", 10<<20, nil)
	if err := cri.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cri.Stop)
	rs := &runtime.Snapshot{Connected: true, Pods: []*runtime.Pod{
		{UID: "ua", Containers: []*runtime.Container{{ID: "a1", Name: "health-handler", ImageRef: "img-a", State: view.Running}}},
	}}
	p := NewPartitionSampler(runtime.NewClient("unix://"+cri.Socket), fixedView{rs}, time.Hour, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	woken := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	_, first := p.Load()
	if err := p.Measure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !woken(first) {
		t.Fatal("the first reading woke no one")
	}
	before, same := p.Load()
	if err := p.Measure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if woken(same) {
		t.Error("a reading like the last woke the sampler")
	}
	if after, _ := p.Load(); !after.Read.After(before.Read) {
		t.Errorf("a reading like the last kept the time %s (now %s)", before.Read, after.Read)
	}
	cri.SetWritable("a1", 11<<20, nil)
	if err := p.Measure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !woken(same) {
		t.Error("a grown writable layer woke no one")
	}
}

// A runtime that cannot be reached fails the stage, its CGs unknown; one CG's failure
// (TestPartitionFailureIsUnknownNotZero) does not.
func TestPartitionOfAnUnreachableRuntimeFailsTheStage(t *testing.T) {
	rs := &runtime.Snapshot{Connected: true, Pods: []*runtime.Pod{
		{UID: "ua", Containers: []*runtime.Container{{ID: "a1", Name: "health-handler", ImageRef: "img-a", State: view.Running}}},
		{UID: "ub", Containers: []*runtime.Container{{ID: "b1", Name: "health-handler", ImageRef: "img-a", State: view.Running}}},
	}}
	gone := "unix://" + filepath.Join(t.TempDir(), "no-runtime.sock")
	p := NewPartitionSampler(runtime.NewClient(gone), fixedView{rs}, time.Hour, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Measure(ctx); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("Measure with no runtime: %v, want the runtime named as not answering", err)
	}
	got, _ := p.Load()
	for _, uid := range []string{"ua", "ub"} {
		if v, ok := got.ByCG[uid]; ok || got.Failed[uid] == "" {
			t.Errorf("%s: %d bytes (measured %v), failure %q: want unknown", uid, v, ok, got.Failed[uid])
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = p.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := p.Health(); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the partition stage healthy with no runtime to measure with")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
