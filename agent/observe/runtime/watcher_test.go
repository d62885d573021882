// SPDX-License-Identifier: Apache-2.0

package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime/fakecri"
	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/internal/clocktest"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type rig struct {
	cri     *fakecri.Server
	watcher *Watcher
	clk     *clocktest.Clock
	cancel  context.CancelFunc
	done    chan error
}

// start serves a fake runtime with a ResNet-50-like pod and runs a watcher on it, timed
// by a fake clock: a resync, a poll or a reconnection happens when the test steps it.
// Unset options are a 50 ms poll and a 50 ms backoff bound. Extra containers are there
// before the watcher starts: those its first list must find.
func start(t *testing.T, noEvents bool, opts Options, extra ...fakecri.Container) *rig {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "cri.sock")
	cri := fakecri.New(socket)
	cri.NoEvents = noEvents
	cri.PutSandbox(fakecri.Sandbox{ID: "sb1", UID: "uid-1", Namespace: "default", Name: "resnet50"}, true)
	cri.PutContainer(fakecri.Container{ID: "c-hh", SandboxID: "sb1", Name: "health-handler", Image: "nr1-load", PID: 101,
		CgroupsPath: "/kubepods/besteffort/poduid-1/c-hh", Annotations: map[string]string{"nr1.neureality.ai/compute_dma_memory": "3"}}, true)
	cri.PutContainer(fakecri.Container{ID: "c-g", SandboxID: "sb1", Name: "graph", Image: "nr1-load", PID: 102,
		CgroupsPath: "/kubepods/besteffort/poduid-1/c-g"}, true)
	for _, c := range extra {
		cri.PutContainer(c, true)
	}
	if err := cri.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cri.Stop)
	r := &rig{cri: cri, clk: clocktest.New(time.Unix(1000, 0)), done: make(chan error, 1)}
	opts.Poll = cmp.Or(opts.Poll, 50*time.Millisecond)
	opts.MaxBackoff = cmp.Or(opts.MaxBackoff, 50*time.Millisecond)
	opts.Clock = r.clk
	r.watcher = NewWatcher(NewClient("unix://"+socket), opts, discard())
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.watcher.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// until waits for cond on the published snapshots.
func (r *rig) until(t *testing.T, timeout time.Duration, what string, cond func(*Snapshot) error) *Snapshot {
	t.Helper()
	deadline := time.After(timeout)
	for {
		s, changed := r.watcher.Load()
		err := cond(s)
		if err == nil {
			return s
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
	}
}

// subscribed waits until the watcher's event stream is open at the runtime.
func (r *rig) subscribed(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.cri.WaitStream(ctx); err != nil {
		t.Fatal(err)
	}
}

// connectionUp waits until the client's connection to the restarted runtime is up:
// gRPC reconnects by itself, in real time, and the watcher's next attempt then succeeds.
func (r *rig) connectionUp(t *testing.T) {
	t.Helper()
	conn, err := r.watcher.client.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for st := conn.cc.GetState(); st != connectivity.Ready; st = conn.cc.GetState() {
		conn.cc.Connect()
		if !conn.cc.WaitForStateChange(ctx, st) {
			t.Fatalf("connection to the restarted runtime still %v", st)
		}
	}
}

// nextRetry returns the wait the watcher has started before its next reconnection.
func (r *rig) nextRetry(t *testing.T) time.Duration {
	t.Helper()
	return r.clk.Next(t, clocktest.After, 5*time.Second)
}

func connected(s *Snapshot) error {
	if !s.Connected {
		return fmt.Errorf("not connected")
	}
	return nil
}

func containerIn(s *Snapshot, podUID, name string) *Container {
	if p := s.Pod(podUID); p != nil {
		for _, c := range p.Containers {
			if c.Name == name {
				return c
			}
		}
	}
	return nil
}

func hasContainers(uid string, names ...string) func(*Snapshot) error {
	return func(s *Snapshot) error {
		p := s.Pod(uid)
		if p == nil {
			return fmt.Errorf("no pod %s", uid)
		}
		if len(p.Containers) != len(names) {
			return fmt.Errorf("pod %s has %d containers, want %v", uid, len(p.Containers), names)
		}
		for i, c := range p.Containers {
			if c.Name != names[i] {
				return fmt.Errorf("container %d is %s, want %s", i, c.Name, names[i])
			}
		}
		return nil
	}
}

func TestInitialList(t *testing.T) {
	r := start(t, false, Options{Resync: time.Hour})
	s := r.until(t, 2*time.Second, "initial list", hasContainers("uid-1", "graph", "health-handler"))
	if !s.Connected || s.Runtime != "fake 1.0" {
		t.Errorf("connected %v runtime %q", s.Connected, s.Runtime)
	}
	p := s.Pod("uid-1")
	if p.Namespace != "default" || p.Name != "resnet50" || !p.Ready || p.QoS() != "BestEffort" {
		t.Errorf("pod %+v qos %s", p, p.QoS())
	}
	hh := containerIn(s, "uid-1", "health-handler")
	if hh.PID != 101 || hh.State != view.Running || hh.CgroupsPath != "/kubepods/besteffort/poduid-1/c-hh" ||
		hh.Annotations["nr1.neureality.ai/compute_dma_memory"] != "3" {
		t.Errorf("health-handler %+v", hh)
	}
}

func TestEventsFollowTheLifecycle(t *testing.T) {
	r := start(t, false, Options{Resync: time.Hour}) // the clock is never stepped: only events can explain what follows
	r.until(t, 2*time.Second, "initial list", hasContainers("uid-1", "graph", "health-handler"))
	r.subscribed(t)

	r.cri.PutSandbox(fakecri.Sandbox{ID: "sb2", UID: "uid-2", Namespace: "ml", Name: "bert"}, false)
	r.cri.PutContainer(fakecri.Container{ID: "c-2", SandboxID: "sb2", Name: "health-handler", PID: 201, CgroupsPath: "/kubepods/poduid-2/c-2"}, false)
	s := r.until(t, time.Second, "new pod by events", hasContainers("uid-2", "health-handler"))
	if c := containerIn(s, "uid-2", "health-handler"); c.PID != 201 || s.Pod("uid-2").QoS() != "Guaranteed" {
		t.Errorf("new container %+v", c)
	}

	r.cri.ExitContainer("c-2", false)
	r.until(t, time.Second, "stop by event", func(s *Snapshot) error {
		if c := containerIn(s, "uid-2", "health-handler"); c == nil || c.State != view.Exited || c.PID != 0 {
			return fmt.Errorf("container %+v", c)
		}
		return nil
	})
	r.cri.DropContainer("c-2", false)
	r.until(t, time.Second, "delete by event", hasContainers("uid-2"))
	r.cri.DropSandbox("sb2", false)
	r.until(t, time.Second, "sandbox delete by event", func(s *Snapshot) error {
		if s.Pod("uid-2") != nil {
			return fmt.Errorf("pod uid-2 still there")
		}
		return nil
	})
	if n := r.cri.Calls("ListPodSandbox"); n != 1 {
		t.Errorf("%d relists; events alone should have done it", n)
	}
}

func TestRelistRepairsMissedEvent(t *testing.T) {
	r := start(t, false, Options{Resync: time.Hour})
	r.until(t, 2*time.Second, "initial list", hasContainers("uid-1", "graph", "health-handler"))
	if d := r.clk.Next(t, clocktest.Ticker, 2*time.Second); d != time.Hour {
		t.Fatalf("the session's ticker is of %v, want the resync", d)
	}
	r.cri.PutContainer(fakecri.Container{ID: "c-late", SandboxID: "sb1", Name: "sidecar", PID: 103, CgroupsPath: "/kubepods/besteffort/poduid-1/c-late"}, true)
	r.cri.DropContainer("c-g", true)
	r.clk.Step(time.Hour)
	s := r.until(t, time.Second, "relist repairs two missed events", hasContainers("uid-1", "health-handler", "sidecar"))
	if c := containerIn(s, "uid-1", "sidecar"); c.PID != 103 {
		t.Errorf("sidecar %+v", c)
	}
	if n := r.cri.Calls("ListPodSandbox"); n != 2 {
		t.Errorf("%d lists, want the initial one and the resync", n)
	}
}

func TestStreamBrokenAndRestored(t *testing.T) {
	r := start(t, false, Options{Resync: time.Hour})
	before := r.until(t, 2*time.Second, "initial list", hasContainers("uid-1", "graph", "health-handler"))
	r.subscribed(t)
	r.cri.BreakStreams()
	r.clk.Step(r.nextRetry(t))
	r.until(t, 2*time.Second, "reconnected", func(s *Snapshot) error {
		if r.watcher.Reconnects() < 1 {
			return fmt.Errorf("no reconnect yet")
		}
		return connected(s)
	})
	// Events flow again on the new stream.
	r.subscribed(t)
	r.cri.PutContainer(fakecri.Container{ID: "c-new", SandboxID: "sb1", Name: "new", PID: 104, CgroupsPath: "/kubepods/besteffort/poduid-1/c-new"}, false)
	after := r.until(t, time.Second, "event after reconnect", hasContainers("uid-1", "graph", "health-handler", "new"))
	if containerIn(after, "uid-1", "health-handler").PID != containerIn(before, "uid-1", "health-handler").PID {
		t.Error("health-handler changed across the reconnect")
	}
}

func TestRuntimeGoneKeepsTheViewThenReconnects(t *testing.T) {
	r := start(t, false, Options{Resync: time.Hour})
	r.until(t, 2*time.Second, "initial list", hasContainers("uid-1", "graph", "health-handler"))
	r.cri.Stop()
	down := r.until(t, 2*time.Second, "disconnected", func(s *Snapshot) error {
		if s.Connected {
			return fmt.Errorf("still connected")
		}
		return nil
	})
	if err := hasContainers("uid-1", "graph", "health-handler")(down); err != nil {
		t.Fatalf("containers reported gone while the runtime is away: %v", err)
	}
	retry := r.nextRetry(t)
	if err := r.cri.Start(); err != nil {
		t.Fatal(err)
	}
	r.connectionUp(t)
	r.clk.Step(retry)
	r.until(t, 3*time.Second, "reconnected with the same view", func(s *Snapshot) error {
		if err := connected(s); err != nil {
			return err
		}
		return hasContainers("uid-1", "graph", "health-handler")(s)
	})
}

// TestReconnectionBacksOff: the wait before each attempt doubles up to MaxBackoff; a
// session that was healthy for a while starts the next waits afresh, a short one does not.
func TestReconnectionBacksOff(t *testing.T) {
	r := start(t, false, Options{Resync: time.Hour, MaxBackoff: time.Second})
	r.until(t, 2*time.Second, "initial list", hasContainers("uid-1", "graph", "health-handler"))
	r.cri.Stop()
	var waits []time.Duration
	for range 6 {
		d := r.nextRetry(t)
		waits = append(waits, d)
		if len(waits) < 6 {
			r.clk.Step(d) // the runtime is still away: the attempt fails
		}
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	if !slices.Equal(waits, want) {
		t.Fatalf("waits before the attempts %v, want %v", waits, want)
	}
	if err := r.cri.Start(); err != nil {
		t.Fatal(err)
	}
	r.connectionUp(t)
	r.clk.Step(waits[5])
	reconnected := func(n int) func(*Snapshot) error {
		return func(s *Snapshot) error {
			if got := r.watcher.Reconnects(); got < n {
				return fmt.Errorf("%d reconnects, want %d", got, n)
			}
			return connected(s)
		}
	}
	r.until(t, 3*time.Second, "reconnected", reconnected(1))

	r.subscribed(t)
	r.cri.BreakStreams() // at once: the backoff goes on
	if d := r.nextRetry(t); d != time.Second {
		t.Fatalf("after a short session the wait is %v, want still %v", d, time.Second)
	} else {
		r.clk.Step(d)
	}
	r.until(t, 3*time.Second, "reconnected again", reconnected(2))

	r.subscribed(t)
	r.clk.Step(11 * time.Second)
	r.cri.BreakStreams() // after a session healthy for 11 s: the backoff starts afresh
	if d := r.nextRetry(t); d != 100*time.Millisecond {
		t.Fatalf("after a healthy session the wait is %v, want 100ms", d)
	}
}

func TestRuntimeWithoutEventsIsPolled(t *testing.T) {
	r := start(t, true, Options{Resync: time.Hour, Poll: 50 * time.Millisecond})
	r.until(t, 2*time.Second, "initial list", hasContainers("uid-1", "graph", "health-handler"))
	// The session's resync ticker, then the poll's, once events are found missing.
	for _, want := range []time.Duration{time.Hour, 50 * time.Millisecond} {
		if d := r.clk.Next(t, clocktest.Ticker, 2*time.Second); d != want {
			t.Fatalf("ticker of %v, want %v", d, want)
		}
	}
	r.cri.PutContainer(fakecri.Container{ID: "c-p", SandboxID: "sb1", Name: "polled", PID: 105, CgroupsPath: "/x/c-p"}, true)
	r.clk.Step(50 * time.Millisecond)
	r.until(t, time.Second, "seen by polling", hasContainers("uid-1", "graph", "health-handler", "polled"))
	if r.cri.Calls("GetContainerEvents") < 1 {
		t.Error("events were not tried")
	}
	if n := r.cri.Calls("ListPodSandbox"); n != 2 {
		t.Errorf("%d lists, want the initial one and one poll", n)
	}
}

func TestKnownContainersCostNoStatusCall(t *testing.T) {
	r := start(t, false, Options{Resync: time.Hour})
	r.until(t, 2*time.Second, "initial list", hasContainers("uid-1", "graph", "health-handler"))
	calls := r.cri.Calls("ContainerStatus")
	conn, err := r.watcher.client.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.watcher.Relist(context.Background(), conn.RS); err != nil {
		t.Fatal(err)
	}
	if got := r.cri.Calls("ContainerStatus"); got != calls {
		t.Errorf("relist of unchanged containers made %d status calls", got-calls)
	}
}

// A relist that finds nothing new publishes nothing (a new snapshot wakes the sampler
// and the allocation tracker), but is a success of the stage.
func TestUnchangedRelistWakesNoOne(t *testing.T) {
	r := start(t, false, Options{Resync: time.Hour})
	r.until(t, 2*time.Second, "initial list", hasContainers("uid-1", "graph", "health-handler"))
	conn, err := r.watcher.client.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, changed := r.watcher.Load()
	okBefore, _ := r.watcher.Health()
	r.clk.Step(time.Minute)
	if err := r.watcher.Relist(context.Background(), conn.RS); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
		t.Error("an unchanged relist published a snapshot")
	default:
	}
	if ok, err := r.watcher.Health(); !ok.After(okBefore) || err != nil {
		t.Errorf("an unchanged relist is no success: %v (before %v), %v", ok, okBefore, err)
	}
	r.cri.PutContainer(fakecri.Container{ID: "c-late", SandboxID: "sb1", Name: "sidecar", PID: 103, CgroupsPath: "/kubepods/besteffort/poduid-1/c-late"}, true)
	if err := r.watcher.Relist(context.Background(), conn.RS); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Error("a relist finding a missed container published nothing")
	}
}

// A container whose verbose info cannot be read is kept without PID or cgroup: the list
// goes on, the runtime stays connected, and the other containers keep theirs.
func TestUnreadableVerboseInfoSkipsOnlyThatContainer(t *testing.T) {
	r := start(t, false, Options{Resync: time.Hour},
		fakecri.Container{ID: "c-bad", SandboxID: "sb1", Name: "bad", PID: 103, CgroupsPath: "/kubepods/besteffort/poduid-1/c-bad",
			Info: `{"pid":103,"runtimeSpec":{"linux":{"cgroupsPath":`},
		fakecri.Container{ID: "c-neg", SandboxID: "sb1", Name: "negative", Info: `{"pid":-1}`})
	s := r.until(t, 2*time.Second, "initial list", hasContainers("uid-1", "bad", "graph", "health-handler", "negative"))
	if !s.Connected {
		t.Error("runtime reported unreachable over one container's info")
	}
	for _, name := range []string{"bad", "negative"} {
		if c := containerIn(s, "uid-1", name); c.State != view.Running || c.PID != 0 || c.CgroupsPath != "" || !strings.Contains(c.Unread, "unreadable") {
			t.Errorf("%s: %+v, want running without PID or cgroupsPath, and why", name, c)
		}
	}
	if hh := containerIn(s, "uid-1", "health-handler"); hh.PID != 101 || hh.CgroupsPath == "" || hh.Unread != "" {
		t.Errorf("health-handler lost its details: %+v", hh)
	}
	// Through an event as through the list; a status without the runtime's info is not
	// read either.
	r.subscribed(t)
	r.cri.PutContainer(fakecri.Container{ID: "c-late", SandboxID: "sb1", Name: "late", Info: "null\x00"}, false)
	r.cri.PutContainer(fakecri.Container{ID: "c-bare", SandboxID: "sb1", Name: "bare", PID: 105, CgroupsPath: "/kubepods/besteffort/poduid-1/c-bare", NoInfo: true}, false)
	s = r.until(t, 2*time.Second, "event", hasContainers("uid-1", "bad", "bare", "graph", "health-handler", "late", "negative"))
	if c := containerIn(s, "uid-1", "late"); c.PID != 0 || c.CgroupsPath != "" || c.Unread == "" {
		t.Errorf("late: %+v", c)
	}
	if c := containerIn(s, "uid-1", "bare"); c.PID != 0 || c.CgroupsPath != "" || !strings.Contains(c.Unread, "no verbose info") {
		t.Errorf("bare: %+v", c)
	}
}

// A container whose verbose status is larger than the client receives (its environment
// from ConfigMaps of characters JSON escapes six-fold is enough) is that container's
// problem: the runtime stays connected, the others keep their details, and it is kept
// without PID or cgroup, through the list as through an event.
func TestHugeStatusBlindsOnlyThatContainer(t *testing.T) {
	huge := func(id string) fakecri.Container {
		env := strings.Repeat(`\u003c`, (17<<20)/6)
		return fakecri.Container{ID: id, SandboxID: "sb1", Name: id, PID: 104, CgroupsPath: "/kubepods/besteffort/poduid-1/" + id,
			Info: `{"pid":104,"runtimeSpec":{"linux":{"cgroupsPath":"/kubepods/besteffort/poduid-1/` + id + `"},"process":{"env":["X=` + env + `"]}}}`}
	}
	r := start(t, false, Options{Resync: time.Hour}, huge("c-huge"))
	s := r.until(t, 5*time.Second, "initial list", hasContainers("uid-1", "c-huge", "graph", "health-handler"))
	if !s.Connected {
		t.Fatal("runtime reported unreachable over one container's status")
	}
	if c := containerIn(s, "uid-1", "c-huge"); c.State != view.Running || c.PID != 0 || c.CgroupsPath != "" || c.Unread == "" {
		t.Errorf("c-huge: %+v, want running without PID or cgroupsPath", c)
	}
	if hh := containerIn(s, "uid-1", "health-handler"); hh.PID != 101 || hh.CgroupsPath == "" {
		t.Errorf("health-handler lost its details: %+v", hh)
	}
	r.subscribed(t)
	r.cri.PutContainer(huge("c-late"), false)
	s = r.until(t, 5*time.Second, "event", hasContainers("uid-1", "c-huge", "c-late", "graph", "health-handler"))
	if c := containerIn(s, "uid-1", "c-late"); c.State != view.Running || c.PID != 0 || c.CgroupsPath != "" {
		t.Errorf("c-late: %+v", c)
	}
}

func TestParseVerboseInfo(t *testing.T) {
	d, err := parseVerboseInfo(`{"sandboxID":"sb1","pid":4242,"config":{"metadata":{"name":"init"},"CDI_devices":[{"name":"neureality.ai/nr1=c1-s1"},{"name":"vendor.example/gpu=0"}]},` +
		`"runtimeSpec":{"ociVersion":"1.2.0","linux":{"cgroupsPath":"kubepods-pod9.slice:cri-containerd:abc","namespaces":[]}}}`)
	if err != nil || d.PID != 4242 || d.CgroupsPath != "kubepods-pod9.slice:cri-containerd:abc" ||
		!slices.Equal(d.CDIDevices, []string{"neureality.ai/nr1=c1-s1", "vendor.example/gpu=0"}) || !d.CDIDevicesKnown {
		t.Errorf("parseVerboseInfo = %+v, %v", d, err)
	}
	// CRI-O's layout: no CRI config, so the CDI devices are not known; the mounts into
	// the shares' directory are kept, and only those.
	d, err = parseVerboseInfo(`{"sandboxID":"sb1","pid":77,"privileged":false,"runtimeSpec":{"ociVersion":"1.2.1",` +
		`"mounts":[{"destination":"/proc","type":"proc","source":"proc"},` +
		`{"destination":"/run/nr1.neureality.ai/shares/c1-s1.json","type":"bind","source":"/var/run/cdi/nr1.neureality.ai_c1.json","options":["bind","ro"]},` +
		`{"destination":"/run/nr1.neureality.ai/sharesX","type":"bind","source":"/tmp/x"}],` +
		`"linux":{"cgroupsPath":"/kubepods/pod9/abc"}}}`)
	if err != nil || d.PID != 77 || d.CDIDevicesKnown || len(d.CDIDevices) != 0 ||
		!slices.Equal(d.ShareMounts, []Mount{{Destination: "/run/nr1.neureality.ai/shares/c1-s1.json", Source: "/var/run/cdi/nr1.neureality.ai_c1.json"}}) {
		t.Errorf("parseVerboseInfo of CRI-O's layout = %+v, %v", d, err)
	}
	for _, bad := range []string{``, `{`, `[]`, `{"pid":-1}`, `{"pid":4194305}`, `{"pid":1.5}`, `{"pid":"1"}`, `{"runtimeSpec":{"linux":{"cgroupsPath":7}}}`, `{"config":{"CDI_devices":{}}}`} {
		if d, err := parseVerboseInfo(bad); err == nil || !errors.Is(err, errUnreadable) {
			t.Errorf("parseVerboseInfo(%q) = %+v, %v; want an errUnreadable", bad, d, err)
		}
	}
}

func FuzzParseVerboseInfo(f *testing.F) {
	// containerd's layout (abridged) and CRI-O's.
	f.Add(`{"sandboxID":"5e1c","pid":4242,"removing":false,"snapshotKey":"abc","snapshotter":"overlayfs","runtimeType":"io.containerd.runc.v2",` +
		`"runtimeSpec":{"ociVersion":"1.2.0","process":{"args":["/pause"]},"linux":{"cgroupsPath":"/kubepods/besteffort/pod5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b11/0b3e7d21"}}}`)
	f.Add(`{"pid":17,"sandboxID":"x","runtimeSpec":{"linux":{"cgroupsPath":"kubepods-burstable-pod5f0c3a52_1b7e_4c1a_9d55_0e4a7c2f9b11.slice:crio:0b3e7d21"}}}`)
	f.Add(`{"pid":0}`)
	f.Add(`{"pid":-1,"runtimeSpec":{"linux":{"cgroupsPath":"/../../etc"}}}`)
	f.Add(`{"PID":1e3}`)
	f.Add(`{"pid":9,"config":{"CDI_devices":[{"name":"neureality.ai/nr1=c1-s1"},{}]}}`)
	f.Add(`{"pid":9,"runtimeSpec":{"mounts":[{"destination":"/run/nr1.neureality.ai/shares/c1-0.json","source":"/var/run/cdi/nr1.neureality.ai_c1.json"},{"destination":3}]}}`)
	f.Fuzz(func(t *testing.T, raw string) {
		d, err := parseVerboseInfo(raw)
		if err != nil {
			if !errors.Is(err, errUnreadable) {
				t.Fatalf("error %v is not an errUnreadable", err)
			}
			return
		}
		if d.PID < 0 || d.PID > maxPID {
			t.Fatalf("accepted pid %d", d.PID)
		}
		// What was read survives the runtime's own layout unchanged.
		var info verboseInfo
		info.PID, info.RuntimeSpec.Linux.CgroupsPath, info.RuntimeSpec.Mounts = d.PID, d.CgroupsPath, d.ShareMounts
		if d.CDIDevicesKnown {
			info.Config = &struct {
				CDIDevices []struct {
					Name string `json:"name"`
				} `json:"CDI_devices"`
			}{}
		}
		for _, name := range d.CDIDevices {
			info.Config.CDIDevices = append(info.Config.CDIDevices, struct {
				Name string `json:"name"`
			}{name})
		}
		b, err := json.Marshal(info)
		if err != nil {
			t.Fatal(err)
		}
		if d2, err := parseVerboseInfo(string(b)); err != nil || d2.PID != d.PID || d2.CgroupsPath != d.CgroupsPath || !slices.Equal(d2.CDIDevices, d.CDIDevices) ||
			d2.CDIDevicesKnown != d.CDIDevicesKnown || !slices.Equal(d2.ShareMounts, d.ShareMounts) {
			t.Fatalf("round trip of %+v: %+v, %v", d, d2, err)
		}
	})
}
