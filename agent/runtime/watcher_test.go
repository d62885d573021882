package runtime

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/runtime/fakecri"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type rig struct {
	cri     *fakecri.Server
	watcher *Watcher
	cancel  context.CancelFunc
	done    chan error
}

// start serves a fake runtime with a ResNet-50-like pod and runs a watcher on it.
func start(t *testing.T, noEvents bool, resync time.Duration) *rig {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "cri.sock")
	cri := fakecri.New(socket)
	cri.NoEvents = noEvents
	cri.PutSandbox(fakecri.Sandbox{ID: "sb1", UID: "uid-1", Namespace: "default", Name: "resnet50"}, true)
	cri.PutContainer(fakecri.Container{ID: "c-hh", SandboxID: "sb1", Name: "health-handler", Image: "nr1-load", PID: 101,
		CgroupsPath: "/kubepods/besteffort/poduid-1/c-hh", Annotations: map[string]string{"nr1.neureality.ai/compute_dma_memory": "3"}}, true)
	cri.PutContainer(fakecri.Container{ID: "c-g", SandboxID: "sb1", Name: "graph", Image: "nr1-load", PID: 102,
		CgroupsPath: "/kubepods/besteffort/poduid-1/c-g"}, true)
	if err := cri.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cri.Stop)
	r := &rig{cri: cri, done: make(chan error, 1)}
	r.watcher = NewWatcher(NewClient("unix://"+socket), Options{Resync: resync, Poll: 50 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}, discard())
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
	deadline := time.Now().Add(2 * time.Second)
	for r.cri.Streams() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no event stream opened")
		}
		time.Sleep(5 * time.Millisecond)
	}
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
	r := start(t, false, time.Hour)
	s := r.until(t, 2*time.Second, "initial list", hasContainers("uid-1", "graph", "health-handler"))
	if !s.Connected || s.Runtime != "fake 1.0" {
		t.Errorf("connected %v runtime %q", s.Connected, s.Runtime)
	}
	p := s.Pod("uid-1")
	if p.Namespace != "default" || p.Name != "resnet50" || !p.Ready || p.QoS() != "BestEffort" {
		t.Errorf("pod %+v qos %s", p, p.QoS())
	}
	hh := containerIn(s, "uid-1", "health-handler")
	if hh.PID != 101 || hh.State != Running || hh.CgroupsPath != "/kubepods/besteffort/poduid-1/c-hh" ||
		hh.Annotations["nr1.neureality.ai/compute_dma_memory"] != "3" {
		t.Errorf("health-handler %+v", hh)
	}
}

func TestEventsFollowTheLifecycle(t *testing.T) {
	r := start(t, false, time.Hour) // no resync: only events can explain what follows
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
		if c := containerIn(s, "uid-2", "health-handler"); c == nil || c.State != Exited || c.PID != 0 {
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
	r := start(t, false, 100*time.Millisecond)
	r.until(t, 2*time.Second, "initial list", hasContainers("uid-1", "graph", "health-handler"))
	r.cri.PutContainer(fakecri.Container{ID: "c-late", SandboxID: "sb1", Name: "sidecar", PID: 103, CgroupsPath: "/kubepods/besteffort/poduid-1/c-late"}, true)
	r.cri.DropContainer("c-g", true)
	s := r.until(t, time.Second, "relist repairs two missed events", hasContainers("uid-1", "health-handler", "sidecar"))
	if c := containerIn(s, "uid-1", "sidecar"); c.PID != 103 {
		t.Errorf("sidecar %+v", c)
	}
}

func TestStreamBrokenAndRestored(t *testing.T) {
	r := start(t, false, time.Hour)
	before := r.until(t, 2*time.Second, "initial list", hasContainers("uid-1", "graph", "health-handler"))
	r.subscribed(t)
	r.cri.BreakStreams()
	r.until(t, 2*time.Second, "reconnected", func(*Snapshot) error {
		if r.watcher.Reconnects() < 1 {
			return fmt.Errorf("no reconnect yet")
		}
		return nil
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
	r := start(t, false, time.Hour)
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
	if err := r.cri.Start(); err != nil {
		t.Fatal(err)
	}
	r.until(t, 3*time.Second, "reconnected with the same view", func(s *Snapshot) error {
		if !s.Connected {
			return fmt.Errorf("not connected")
		}
		return hasContainers("uid-1", "graph", "health-handler")(s)
	})
}

func TestRuntimeWithoutEventsIsPolled(t *testing.T) {
	r := start(t, true, time.Hour)
	r.until(t, 2*time.Second, "initial list", hasContainers("uid-1", "graph", "health-handler"))
	r.cri.PutContainer(fakecri.Container{ID: "c-p", SandboxID: "sb1", Name: "polled", PID: 105, CgroupsPath: "/x/c-p"}, true)
	r.until(t, time.Second, "seen by polling", hasContainers("uid-1", "graph", "health-handler", "polled"))
	if r.cri.Calls("GetContainerEvents") < 1 {
		t.Error("events were not tried")
	}
}

func TestKnownContainersCostNoStatusCall(t *testing.T) {
	r := start(t, false, time.Hour)
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
