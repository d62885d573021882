// SPDX-License-Identifier: Apache-2.0

package actuate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/act/enforce"
	"github.com/neureality-sdk/nr1-agent/agent/kube"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

type recorder struct{ events []string }

func (r *recorder) Event(ns, pod, _, typ, reason, msg string) {
	r.events = append(r.events, fmt.Sprintf("%s/%s %s %s: %s", ns, pod, typ, reason, msg))
}

type fakes struct {
	calls    []string
	evictErr error
}

func (f *fakes) Evict(_ context.Context, ns, pod, _ string) error {
	f.calls = append(f.calls, "evict "+ns+"/"+pod)
	return f.evictErr
}
func (f *fakes) StopContainer(_ context.Context, id string, timeout time.Duration) error {
	f.calls = append(f.calls, fmt.Sprintf("stop %s %v", id, timeout))
	return nil
}
func (f *fakes) Attach(name, dir string) error {
	f.calls = append(f.calls, "attach "+name+" "+dir)
	return nil
}
func (f *fakes) Detach(name string) error { f.calls = append(f.calls, "detach "+name); return nil }

func newActuator() (*Actuator, *recorder, *fakes) {
	r, f := &recorder{}, &fakes{}
	return &Actuator{Events: r, Evictor: f, Stopper: f, Throttler: f, KillTimeout: 5 * time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, r, f
}

func act(k enforce.Kind) enforce.Action {
	return enforce.Action{Kind: k, UID: "u", Namespace: "default", Pod: "cg", PodCgroup: "/cg/podu", Resource: nr1.HypervisorQueue,
		Containers: []enforce.ContainerRef{{ID: "c1", Name: "health-handler"}}, Message: "holds 20 of 7"}
}

func TestActionsAndTheirEvents(t *testing.T) {
	tests := []struct {
		kind      enforce.Kind
		wantEvent string
		wantCall  string
	}{
		{enforce.Warn, "Warning NR1LimitExceeded: holds 20 of 7", ""},
		{enforce.Throttle, "Warning NR1Throttled: holds 20 of 7: new opens of NR1 devices are refused", "attach u /cg/podu"},
		{enforce.Unthrottle, "Normal NR1Throttled: holds 20 of 7", "detach u"},
		{enforce.Kill, "Warning NR1Killed: container health-handler stopped: holds 20 of 7", "stop c1 5s"},
		{enforce.Evict, "Warning NR1Evicted: holds 20 of 7", "evict default/cg"},
		{enforce.BadAnnotation, "Warning NR1BadAnnotation: holds 20 of 7", ""},
	}
	for _, tt := range tests {
		a, r, f := newActuator()
		if err := a.Act(context.Background(), act(tt.kind)); err != nil {
			t.Fatalf("%s: %v", tt.kind, err)
		}
		if len(r.events) != 1 || r.events[0] != "default/cg "+tt.wantEvent {
			t.Errorf("%s: events %q", tt.kind, r.events)
		}
		if got := strings.Join(f.calls, ";"); got != tt.wantCall {
			t.Errorf("%s: calls %q, want %q", tt.kind, got, tt.wantCall)
		}
	}
}

func TestDryRunOnlyReports(t *testing.T) {
	a, r, f := newActuator()
	x := act(enforce.Kill)
	x.DryRun = true
	if err := a.Act(context.Background(), x); err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 0 || len(r.events) != 1 || !strings.Contains(r.events[0], "NR1EnforcementDryRun: dry-run, would kill") {
		t.Errorf("calls %v events %v", f.calls, r.events)
	}
}

func TestRefusedEvictionIsReportedAsSuch(t *testing.T) {
	a, r, f := newActuator()
	f.evictErr = fmt.Errorf("evicting: %w", kube.ErrEvictionRefused)
	err := a.Act(context.Background(), act(enforce.Evict))
	if !errors.Is(err, enforce.ErrEvictionRefused) || len(r.events) != 0 {
		t.Fatalf("err %v events %v", err, r.events)
	}
	a.Stopper, a.Throttler = nil, nil
	if err := a.Act(context.Background(), act(enforce.Kill)); !errors.Is(err, ErrUnavailable) {
		t.Errorf("kill without CRI: %v", err)
	}
}

type failingDetach struct{ fakes }

func (f *failingDetach) Detach(string) error { return errors.New("bpffs: read-only") }

// A kill or eviction lifts the CG's throttle after it, so that a restarted container
// is not born throttled; a throttle that cannot be lifted leaves the kill standing.
func TestKillLiftsTheThrottleAfterIt(t *testing.T) {
	for _, kind := range []enforce.Kind{enforce.Kill, enforce.Evict} {
		a, _, f := newActuator()
		x := act(kind)
		x.LiftThrottle = true
		if err := a.Act(context.Background(), x); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if got := f.calls[len(f.calls)-1]; got != "detach u" {
			t.Errorf("%s: calls %v, want the detach last", kind, f.calls)
		}
	}
	a, r, _ := newActuator()
	fd := &failingDetach{}
	a.Throttler = fd
	x := act(enforce.Kill)
	x.LiftThrottle = true
	err := a.Act(context.Background(), x)
	if !errors.Is(err, enforce.ErrThrottleKept) {
		t.Errorf("detach failing after a kill: %v", err)
	}
	for _, ev := range r.events {
		if strings.Contains(ev, "NR1EnforcementFailed") {
			t.Errorf("the kill was done, yet reported failed: %v", r.events)
		}
	}
}

// failingFreeze records what it is asked, and fails freezing.
type failingFreeze struct{ f *fakes }

func (z failingFreeze) Freeze(dir string) error {
	z.f.calls = append(z.f.calls, "freeze "+dir)
	return errors.New("freezer: device or resource busy")
}

func (z failingFreeze) Thaw(dir string) error { z.f.calls = append(z.f.calls, "thaw "+dir); return nil }

// A throttle whose freeze fails is undone whole: it must not outlive the step the
// ladder takes as failed.
func TestThrottleWhoseFreezeFailsIsUndone(t *testing.T) {
	a, _, f := newActuator()
	a.Freezer = failingFreeze{f}
	err := a.Act(context.Background(), act(enforce.Throttle))
	if err == nil || !strings.Contains(err.Error(), "device or resource busy") {
		t.Fatalf("throttle with a failing freeze: %v", err)
	}
	if got := strings.Join(f.calls, ", "); got != "attach u /cg/podu, freeze /cg/podu, thaw /cg/podu, detach u" {
		t.Errorf("calls %s, want the attach undone", got)
	}
}

type failingStop struct{ fakes }

func (f *failingStop) StopContainer(context.Context, string, time.Duration) error {
	return errors.New("CRI: context deadline exceeded")
}

func TestFailedActionIsReported(t *testing.T) {
	a, r, _ := newActuator()
	a.Stopper = &failingStop{}
	if err := a.Act(context.Background(), act(enforce.Kill)); err == nil {
		t.Fatal("a failed stop returned no error")
	}
	if len(r.events) != 1 || !strings.Contains(r.events[0], "Warning NR1EnforcementFailed: could not kill (retried with backoff)") {
		t.Errorf("events %q", r.events)
	}
}

// A static pod cannot be evicted through the API server: its container is stopped.
func TestStaticPodIsKilledInsteadOfEvicted(t *testing.T) {
	a, r, f := newActuator()
	f.evictErr = fmt.Errorf("evicting: %w", kube.ErrStaticPod)
	if err := a.Act(context.Background(), act(enforce.Evict)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.calls, ";"); got != "evict default/cg;stop c1 5s" {
		t.Errorf("calls %q", got)
	}
	if len(r.events) != 1 || !strings.Contains(r.events[0], "NR1Killed") {
		t.Errorf("events %q", r.events)
	}
}

type disruptor struct {
	f   *fakes
	err error
}

func (d disruptor) MarkDisrupted(_ context.Context, ns, pod, uid, reason, msg string) error {
	d.f.calls = append(d.f.calls, fmt.Sprintf("mark %s/%s %s %s: %s", ns, pod, uid, reason, msg))
	return d.err
}

type killer struct{ f *fakes }

func (k killer) Kill(dir string) error {
	k.f.calls = append(k.f.calls, "cgroup.kill "+dir)
	return nil
}

// A kill marks the pod DisruptionTarget before it stops its containers, so that its end
// reads as a disruption by NR1 when the pod fails; a mark that fails (no API server, a
// static pod) still stops them. At once, the kernel kills the container's cgroup before
// the runtime's stop records it; with a grace, only the runtime stops it.
func TestKillMarksThePodDisruptedFirst(t *testing.T) {
	for _, markErr := range []error{nil, errors.New("API server unavailable")} {
		a, r, f := newActuator()
		a.KillTimeout = 0
		a.Disruptor = disruptor{f, markErr}
		a.Killer = killer{f}
		k := act(enforce.Kill)
		k.Containers[0].Cgroup = "/cg/podu/c1"
		if err := a.Act(context.Background(), k); err != nil {
			t.Fatalf("mark error %v: kill: %v", markErr, err)
		}
		want := "mark default/cg u NR1Killed: holds 20 of 7;cgroup.kill /cg/podu/c1;stop c1 0s"
		if got := strings.Join(f.calls, ";"); got != want {
			t.Errorf("mark error %v: calls %q, want %q", markErr, got, want)
		}
		if len(r.events) != 1 || !strings.Contains(r.events[0], "NR1Killed") {
			t.Errorf("mark error %v: events %q", markErr, r.events)
		}
	}
	a, _, f := newActuator()
	a.Killer = killer{f}
	k := act(enforce.Kill)
	k.Containers[0].Cgroup = "/cg/podu/c1"
	if err := a.Act(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.calls, ";"); got != "stop c1 5s" {
		t.Errorf("with a grace: calls %q, want the runtime's stop alone", got)
	}
}

// A warning of the selfUncertain ladder is an NR1Uncertain Event, not a limit exceeded.
func TestOwnUncertaintyWarningIsItsOwnReason(t *testing.T) {
	a, r, _ := newActuator()
	w := act(enforce.Warn)
	w.Cause = "in-flight"
	if err := a.Act(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	if len(r.events) != 1 || r.events[0] != "default/cg Warning NR1Uncertain: holds 20 of 7" {
		t.Errorf("events %q", r.events)
	}
}
