// SPDX-License-Identifier: Apache-2.0

package deviceplugin

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/internal/clocktest"
	"github.com/neureality-sdk/nr1-agent/internal/served"
	"github.com/neureality-sdk/nr1-agent/internal/syncbuf"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

var nodeCapacity = nr1.Amounts{116244, 512, 13417, 65536}

type fixedProber struct{ h device.Health }

func (p fixedProber) Probe() device.Health { return p.h }

func healthy() device.Health {
	var h device.Health
	for i := range h {
		h[i].Healthy = true
	}
	return h
}

type harness struct {
	dir     string
	clk     *clocktest.Clock
	monitor *device.Monitor
	manager *Manager
	files   map[nr1.Resource][]device.ResolvedFile
	cancel  context.CancelFunc
	done    chan error
}

// startManager runs a manager for the four resources at node capacity, with the
// compute-DMA resource carrying a regular file and the queue resource a char device. Its
// clock is fake: every debounce and retry shorter than the resync ends as it starts, and
// the resync comes only when a test steps the clock, so filesystem events alone drive
// what the tests see. opts change the manager before it runs.
func startManager(t *testing.T, opts ...func(*Manager)) *harness {
	t.Helper()
	const resync = time.Hour
	// Short: unix socket paths are limited to 107 bytes.
	root, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	dir := filepath.Join(root, "device-plugins")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	dma := filepath.Join(root, "nr1_compute_dma")
	if err := os.WriteFile(dma, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h := &harness{
		dir:     dir,
		clk:     clocktest.NewJumping(time.Unix(1000, 0), func(w clocktest.Wait) bool { return w.Kind != clocktest.Ticker && w.D < resync }),
		monitor: device.NewMonitor(fixedProber{healthy()}, time.Hour, clock.RealClock{}, discard()),
		files: map[nr1.Resource][]device.ResolvedFile{
			nr1.ComputeDMAMemory: {resolved(t, nr1.ComputeDMAMemory, device.File{Path: dma, ContainerPath: "/dev/nr1/compute_dma"})},
			nr1.HypervisorQueue:  {resolved(t, nr1.HypervisorQueue, device.File{Path: "/dev/null"})}, // a character device present everywhere
		},
		done: make(chan error, 1),
	}
	var plugins []*Plugin
	all := append(slices.Clone(h.files[nr1.ComputeDMAMemory]), h.files[nr1.HypervisorQueue]...)
	for _, r := range nr1.All {
		plugins = append(plugins, NewPlugin(r, nodeCapacity[r], all, h.monitor))
	}
	h.manager = NewManager(dir, plugins, resync, h.clk, discard())
	for _, o := range opts {
		o(h.manager)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.manager.Run(ctx) }()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	<-h.done
	h.cancel = nil
}

// settled waits until a reconcile pass has left nothing to retry.
func (h *harness) settled(t *testing.T) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		_, next := h.manager.Passes()
		if _, err := h.manager.Health(); err == nil {
			return
		}
		select {
		case <-next:
		case <-deadline:
			t.Fatal("no reconcile pass left nothing to retry")
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func allNames() []string {
	var names []string
	for _, r := range nr1.All {
		names = append(names, r.Name())
	}
	sort.Strings(names)
	return names
}

func TestRegistersAllFourAndListsCapacity(t *testing.T) {
	h := startManager(t)
	k := startStubKubelet(t, h.dir)
	k.waitFor(5*time.Second, "four lists", func() bool { return len(k.lists) == 4 })

	k.mu.Lock()
	defer k.mu.Unlock()
	got := k.registeredNames()
	sort.Strings(got)
	if !slices.Equal(got, allNames()) {
		t.Fatalf("registered %v, want %v", got, allNames())
	}
	for _, req := range k.requests {
		if req.Version != pluginapi.Version || filepath.Dir(filepath.Join(h.dir, req.Endpoint)) != h.dir {
			t.Errorf("bad registration %+v", req)
		}
	}
	for _, r := range nr1.All {
		list := k.lastList(r.Name())
		if nr1.Units(len(list.Devices)) != nodeCapacity[r] {
			t.Errorf("%s: %d devices, want %d", r.Name(), len(list.Devices), nodeCapacity[r])
		}
		ids := map[string]bool{}
		for _, d := range list.Devices {
			if d.Health != pluginapi.Healthy || ids[d.ID] {
				t.Fatalf("%s: device %+v unhealthy or repeated", r.Name(), d)
			}
			ids[d.ID] = true
		}
	}
	if !h.manager.Registered(nr1.ComputeDMAMemory) || h.manager.Registrations() != 4 {
		t.Errorf("manager state: registered=%v registrations=%d", h.manager.Registered(nr1.ComputeDMAMemory), h.manager.Registrations())
	}
}

func TestHealthFlipAndRecovery(t *testing.T) {
	h := startManager(t)
	k := startStubKubelet(t, h.dir)
	k.waitFor(5*time.Second, "four lists", func() bool { return len(k.lists) == 4 })

	allWith := func(health string) func() bool {
		return func() bool {
			for _, r := range nr1.All {
				l := k.lastList(r.Name())
				if l == nil || nr1.Units(len(l.Devices)) != nodeCapacity[r] {
					return false
				}
				for _, d := range l.Devices {
					if d.Health != health {
						return false
					}
				}
			}
			return true
		}
	}
	sick := healthy()
	for i := range sick {
		sick[i] = device.Status{Reason: "health attribute reads \"fault\""}
	}
	h.monitor.Update(sick)
	k.waitFor(10*time.Second, "all devices Unhealthy", allWith(pluginapi.Unhealthy))
	h.monitor.Update(healthy())
	k.waitFor(10*time.Second, "all devices Healthy again", allWith(pluginapi.Healthy))

	// A flip of one resource sends a new list for it alone.
	k.mu.Lock()
	before := len(k.lists[nr1.DockerPartition.Name()])
	k.mu.Unlock()
	queueOnly := healthy()
	queueOnly[nr1.HypervisorQueue] = device.Status{Reason: "device file gone"}
	h.monitor.Update(queueOnly)
	k.waitFor(10*time.Second, "queue devices Unhealthy", func() bool {
		return k.lastList(nr1.HypervisorQueue.Name()).Devices[0].Health == pluginapi.Unhealthy
	})
	k.mu.Lock()
	after := len(k.lists[nr1.DockerPartition.Name()])
	k.mu.Unlock()
	if after != before {
		t.Errorf("docker partition got %d new lists on a queue health change", after-before)
	}
}

func dialPlugin(t *testing.T, h *harness, r nr1.Resource) pluginapi.DevicePluginClient {
	socket := h.manager.Socket(r)
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

func TestAllocate(t *testing.T) {
	h := startManager(t)
	k := startStubKubelet(t, h.dir)
	k.waitFor(5*time.Second, "four lists", func() bool { return len(k.lists) == 4 })
	ctx := context.Background()

	ids := func(r nr1.Resource, n int) []string {
		k.mu.Lock()
		defer k.mu.Unlock()
		var out []string
		for _, d := range k.lastList(r.Name()).Devices[:n] {
			out = append(out, d.ID)
		}
		return out
	}
	// The ResNet-50 CG: 3 MB of compute DMA and 7 queues on one container.
	dma, err := dialPlugin(t, h, nr1.ComputeDMAMemory).Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids(nr1.ComputeDMAMemory, 3)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := dma.ContainerResponses[0]
	if c.Envs["NR1_COMPUTE_DMA_MEMORY_MB"] != "3" || c.Annotations["nr1.neureality.ai/compute_dma_memory"] != "3" {
		t.Errorf("compute DMA env/annotations: %v %v", c.Envs, c.Annotations)
	}
	if len(c.Mounts) != 1 || c.Mounts[0].HostPath != h.files[nr1.ComputeDMAMemory][0].Path ||
		c.Mounts[0].ContainerPath != "/dev/nr1/compute_dma" || len(c.Devices) != 0 {
		t.Errorf("compute DMA file as mount: mounts %v devices %v", c.Mounts, c.Devices)
	}

	q, err := dialPlugin(t, h, nr1.HypervisorQueue).Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{
			{DevicesIds: ids(nr1.HypervisorQueue, 7)},
			{DevicesIds: ids(nr1.HypervisorQueue, 2)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(q.ContainerResponses) != 2 {
		t.Fatalf("%d container responses, want 2", len(q.ContainerResponses))
	}
	c = q.ContainerResponses[0]
	if c.Envs["NR1_AI_HYPERVISOR_QUEUES"] != "7" || c.Annotations["nr1.neureality.ai/ai_hypervisor_queue"] != "7" {
		t.Errorf("queue env/annotations: %v %v", c.Envs, c.Annotations)
	}
	if q.ContainerResponses[1].Envs["NR1_AI_HYPERVISOR_QUEUES"] != "2" {
		t.Errorf("second container: %v", q.ContainerResponses[1].Envs)
	}
	if len(c.Devices) != 1 || c.Devices[0].HostPath != "/dev/null" || c.Devices[0].ContainerPath != "/dev/null" ||
		c.Devices[0].Permissions != "rw" || len(c.Mounts) != 0 {
		t.Errorf("queue char device as device spec: devices %v mounts %v", c.Devices, c.Mounts)
	}

	_, err = dialPlugin(t, h, nr1.CPUDMAMemory).Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"0", "zz9"}}},
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("unknown device ID: err %v, want InvalidArgument", err)
	}

	if err := os.Remove(h.files[nr1.ComputeDMAMemory][0].Path); err != nil {
		t.Fatal(err)
	}
	_, err = dialPlugin(t, h, nr1.ComputeDMAMemory).Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"0"}}},
	})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("missing device file: err %v, want Unavailable", err)
	}
}

func TestReregistersWhenKubeletRestarts(t *testing.T) {
	h := startManager(t)
	k := startStubKubelet(t, h.dir)
	k.waitFor(5*time.Second, "four registrations", func() bool { return len(k.requests) == 4 })
	k.stop()

	restarted := time.Now()
	k2 := startStubKubelet(t, h.dir)
	// The resync never comes (the test does not step the clock): only the filesystem
	// event can register again. The bound leaves room for a loaded machine (the latency
	// is measured, not judged).
	k2.waitFor(10*time.Second, "four registrations with the new kubelet", func() bool {
		names := k2.registeredNames()
		sort.Strings(names)
		return slices.Equal(names, allNames())
	})
	t.Logf("re-registered all four %v after kubelet.sock was recreated", time.Since(restarted))
	k2.waitFor(10*time.Second, "lists from the new kubelet", func() bool { return len(k2.lists) == 4 })
}

func TestReservesRemovedPluginSocket(t *testing.T) {
	h := startManager(t)
	k := startStubKubelet(t, h.dir)
	k.waitFor(5*time.Second, "four registrations", func() bool { return len(k.requests) == 4 })

	socket := h.manager.Socket(nr1.HypervisorQueue)
	removed := time.Now()
	if err := os.Remove(socket); err != nil {
		t.Fatal(err)
	}
	// The resync never comes (the test does not step the clock): only the removal's
	// event can serve and register the plugin again. The bound leaves room for a loaded
	// machine (the latency is measured, not judged).
	k.waitFor(10*time.Second, "queue plugin registered again", func() bool {
		return len(k.requests) == 5 && k.requests[4].ResourceName == nr1.HypervisorQueue.Name()
	})
	t.Logf("served and registered again %v after its socket was removed", time.Since(removed))
	if now := h.manager.Socket(nr1.HypervisorQueue); now == socket {
		t.Fatalf("served again on the same path %s", now)
	} else if _, err := os.Stat(now); err != nil {
		t.Fatalf("socket not served again: %v", err)
	}
	k.waitFor(10*time.Second, "a list over the new socket", func() bool { return len(k.lists[nr1.HypervisorQueue.Name()]) >= 2 })
}

func TestStopRemovesSockets(t *testing.T) {
	h := startManager(t)
	k := startStubKubelet(t, h.dir)
	k.waitFor(5*time.Second, "four lists", func() bool { return len(k.lists) == 4 })
	h.stop()
	if left, _ := filepath.Glob(filepath.Join(h.dir, "nr1-*.sock")); len(left) != 0 {
		t.Errorf("sockets left after stop: %v", left)
	}
	if h.manager.Registered(nr1.ComputeDMAMemory) {
		t.Error("still reported registered after stop")
	}
	if _, err := os.Stat(filepath.Join(h.dir, KubeletSocketName)); err != nil {
		t.Errorf("the kubelet's socket must be left alone: %v", err)
	}
}

// TestChmodOfKubeletSocketIsNotARestart: a kubelet that changes its socket's mode (the
// change time moves) is the same kubelet; registering again would be refused by a
// kubelet already connected to the plugin.
func TestChmodOfKubeletSocketIsNotARestart(t *testing.T) {
	h := startManager(t)
	k := startStubKubelet(t, h.dir)
	k.waitFor(5*time.Second, "four registrations", func() bool { return len(k.requests) == 4 })
	before, next := h.manager.Passes()
	if err := os.Chmod(filepath.Join(h.dir, KubeletSocketName), 0o600); err != nil {
		t.Fatal(err)
	}
	// The chmod's event wakes the manager (the resync never comes): once a pass after it
	// has finished, the manager has judged the chmod.
	for passes := before; passes == before; passes, next = h.manager.Passes() {
		select {
		case <-next:
		case <-time.After(5 * time.Second):
			t.Fatal("no reconcile pass after the chmod's event")
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.requests) != 4 {
		t.Errorf("%d registrations after a chmod of kubelet.sock, want still 4", len(k.requests))
	}
}

// TestRefusedRegistrationIsRetried: a registration the kubelet refuses is asked again,
// with no event nor resync to prompt it, after a wait that doubles at every refusal and
// starts afresh once the plugin is registered.
func TestRefusedRegistrationIsRetried(t *testing.T) {
	h := startManager(t)
	// Once the manager has taken the events of its own four sockets, events can prompt
	// two of the four registrations asked below at most: retries ask the others.
	for range 4 {
		h.clk.Next(t, clocktest.Timer, 5*time.Second)
	}
	queue := nr1.HypervisorQueue.Name()
	k := startRefusingKubelet(t, h.dir, map[string]int{queue: 3})
	k.waitFor(5*time.Second, "four registrations", func() bool { return len(k.requests) == 4 })
	h.settled(t)
	want := []time.Duration{retryMin, 2 * retryMin, 4 * retryMin}
	if got := h.clk.Waits(clocktest.After); !slices.Equal(got, want) {
		t.Errorf("waits before the retries %v, want %v", got, want)
	}
	k.mu.Lock()
	if k.attempts[queue] != 4 {
		t.Errorf("%d registrations of %s asked, want 3 refused and 1 taken", k.attempts[queue], queue)
	}
	k.mu.Unlock()

	k.stop()
	k2 := startRefusingKubelet(t, h.dir, map[string]int{queue: 1})
	k2.waitFor(5*time.Second, "four registrations with the new kubelet", func() bool { return len(k2.requests) == 4 })
	h.settled(t)
	want = append(want, retryMin)
	if got := h.clk.Waits(clocktest.After); !slices.Equal(got, want) {
		t.Errorf("waits before the retries %v, want %v: a registered plugin's next refusal waits the least", got, want)
	}
}

// TestServesAgainAfterItsListenerFails: a plugin's server whose listener fails while
// its socket stays (the kubelet's calls then find nobody) is logged, replaced after a
// backoff on the manager's clock by a plugin on a new socket, and registered again;
// nor event nor resync prompts it.
func TestServesAgainAfterItsListenerFails(t *testing.T) {
	logged := &syncbuf.Buffer{}
	var mu sync.Mutex
	listeners := map[string]net.Listener{}
	h := startManager(t, func(m *Manager) {
		m.log = slog.New(slog.NewTextHandler(logged, nil))
		m.listen = func(network, address string) (net.Listener, error) {
			l, err := net.Listen(network, address)
			if err == nil {
				mu.Lock()
				listeners[address] = l
				mu.Unlock()
			}
			return l, err
		}
	})
	k := startStubKubelet(t, h.dir)
	k.waitFor(5*time.Second, "four registrations", func() bool { return len(k.requests) == 4 })

	socket := h.manager.Socket(nr1.HypervisorQueue)
	mu.Lock()
	failing, _ := listeners[socket].(*net.UnixListener)
	mu.Unlock()
	// Closed, the socket left in place: no filesystem event tells of it.
	failing.SetUnlinkOnClose(false)
	if err := failing.Close(); err != nil {
		t.Fatal(err)
	}
	k.waitFor(10*time.Second, "queue plugin registered again", func() bool {
		return len(k.requests) == 5 && k.requests[4].ResourceName == nr1.HypervisorQueue.Name()
	})
	if now := h.manager.Socket(nr1.HypervisorQueue); now == socket {
		t.Fatalf("served again on the same path %s", now)
	} else if _, err := os.Stat(now); err != nil {
		t.Fatalf("socket not served again: %v", err)
	}
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Errorf("the failed server's socket left: %v", err)
	}
	k.waitFor(10*time.Second, "a list over the new socket", func() bool { return len(k.lists[nr1.HypervisorQueue.Name()]) >= 2 })
	if want := `level=ERROR msg="device plugin socket of ` + nr1.HypervisorQueue.Name() + ` served anew" socket=` + socket + ` why="its listener failed`; !strings.Contains(logged.String(), want) ||
		!strings.Contains(logged.String(), "use of closed network connection") {
		t.Errorf("log lacks %q and the listener's error:\n%s", want, logged.String())
	}
	if !slices.Contains(h.clk.Waits(clocktest.After), served.Backoff.Duration) {
		t.Errorf("no backoff of %v waited before serving again: %v", served.Backoff.Duration, h.clk.Waits(clocktest.After))
	}
}

// resolved is f as nr1/device resolves it at the agent's start.
func resolved(t testing.TB, r nr1.Resource, f device.File) device.ResolvedFile {
	t.Helper()
	id, err := device.Identify(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	return device.ResolvedFile{File: f, Resource: r, Local: f.Path, Identity: id}
}

// A plugin told to act before containers start registers as requiring PreStartContainer,
// says so when asked, and runs the action at each call, before it answers; the others
// do not require it.
func TestPreStartRunsBeforeTheAnswer(t *testing.T) {
	var ran atomic.Int32
	h := startManager(t, func(m *Manager) {
		m.OnPreStart(nr1.HypervisorQueue, func(context.Context) { ran.Add(1) })
	})
	k := startStubKubelet(t, h.dir)
	k.waitFor(5*time.Second, "four registrations", func() bool { return len(k.requests) == 4 })
	k.mu.Lock()
	for _, req := range k.requests {
		want := req.ResourceName == nr1.HypervisorQueue.Name()
		if req.GetOptions().GetPreStartRequired() != want {
			t.Errorf("%s registered with PreStartRequired %v, want %v", req.ResourceName, req.GetOptions().GetPreStartRequired(), want)
		}
	}
	k.mu.Unlock()
	ctx := context.Background()
	for _, r := range []nr1.Resource{nr1.HypervisorQueue, nr1.ComputeDMAMemory} {
		opts, err := dialPlugin(t, h, r).GetDevicePluginOptions(ctx, &pluginapi.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		if opts.GetPreStartRequired() != (r == nr1.HypervisorQueue) {
			t.Errorf("%s options: PreStartRequired %v", r.Name(), opts.GetPreStartRequired())
		}
	}
	if _, err := dialPlugin(t, h, nr1.HypervisorQueue).PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: []string{"0"}}); err != nil {
		t.Fatal(err)
	}
	if ran.Load() != 1 {
		t.Errorf("the action ran %d times by the answer, want 1", ran.Load())
	}
}
