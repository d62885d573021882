// SPDX-License-Identifier: Apache-2.0

package inventory

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/agent/observe/allocation"
	"github.com/neureality-sdk/nr1-agent/agent/observe/cgroup"
	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime"
	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime/fakecri"
	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// fakeKubelet serves the pod-resources API as the kubelet does: one ContainerDevices
// entry per device ID.
type fakeKubelet struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	mu   sync.Mutex
	pods []*podresourcesapi.PodResources
}

func (k *fakeKubelet) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return &podresourcesapi.ListPodResourcesResponse{PodResources: k.pods}, nil
}

// devices is how the kubelet reports n units of resource: one entry per ID.
func devices(resource string, n int) []*podresourcesapi.ContainerDevices {
	out := make([]*podresourcesapi.ContainerDevices, n)
	for i := range out {
		out[i] = &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: []string{fmt.Sprint(i)}}
	}
	return out
}

// podUID is the example pod's UID, as the API server gives one.
const podUID = "5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b11"

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type world struct {
	cri        *fakecri.Server
	kubelet    *fakeKubelet
	namespaces *fakeNamespaces
	cgroups    cgroup.Hierarchy
	builder    *Builder
	watcher    *runtime.Watcher
	tracker    *allocation.Tracker
}

// fakeNamespaces knows the labels of the namespaces in labels, and answers err for the
// others.
type fakeNamespaces struct {
	mu     sync.Mutex
	labels map[string]map[string]string
	err    error
}

func (f *fakeNamespaces) Labels(namespace string, _ time.Time) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l, ok := f.labels[namespace]; ok {
		return l, nil
	}
	return nil, f.err
}

// cgroupDir makes a fake v2 cgroup directory holding pids.
func cgroupDir(t *testing.T, h cgroup.Hierarchy, cgroupsPath string, pids ...int) string {
	t.Helper()
	p, err := h.Resolve(cgroupsPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(p.V2, 0o755); err != nil {
		t.Fatal(err)
	}
	var b []byte
	for _, pid := range pids {
		b = fmt.Appendf(b, "%d\n", pid)
	}
	if err := os.WriteFile(filepath.Join(p.V2, "cgroup.procs"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p.V2
}

// options are what the world's builder is made with: another builder of the same world
// (an agent started anew) is made with them too.
func (w *world) options() Options {
	return Options{Runtime: w.watcher, Allocations: w.tracker, Namespaces: w.namespaces, Cgroups: w.cgroups, MaxAllocationAge: 5 * time.Second, Log: discard()}
}

func newWorld(t *testing.T) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{cri: fakecri.New(filepath.Join(dir, "cri.sock")), kubelet: &fakeKubelet{},
		namespaces: &fakeNamespaces{labels: map[string]map[string]string{"default": nil}}}
	w.cgroups = cgroup.Hierarchy{Root: filepath.Join(dir, "cgroup"), Mode: cgroup.Unified, V2: filepath.Join(dir, "cgroup")}

	w.cri.PutSandbox(fakecri.Sandbox{ID: "sb1", UID: podUID, Namespace: "default", Name: "resnet50"}, true)
	w.cri.PutContainer(fakecri.Container{ID: "c-hh", SandboxID: "sb1", Name: "health-handler", PID: 101,
		CgroupsPath: "/kubepods/besteffort/poduid-1/c-hh",
		Annotations: map[string]string{"nr1.neureality.ai/compute_dma_memory": "3", "nr1.neureality.ai/docker_partition": "2392", "nr1.neureality.ai/ai_hypervisor_queue": "7"}}, true)
	w.cri.PutContainer(fakecri.Container{ID: "c-g", SandboxID: "sb1", Name: "graph", PID: 102, CgroupsPath: "/kubepods/besteffort/poduid-1/c-g"}, true)
	cgroupDir(t, w.cgroups, "/kubepods/besteffort/poduid-1/c-hh", 101, 110)
	cgroupDir(t, w.cgroups, "/kubepods/besteffort/poduid-1/c-g", 102)
	if err := w.cri.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.cri.Stop)

	hh := &podresourcesapi.ContainerResources{Name: "health-handler"}
	hh.Devices = append(hh.Devices, devices("neureality.ai/compute_dma_memory_in_mb", 3)...)
	hh.Devices = append(hh.Devices, devices("neureality.ai/docker_partition_in_mb", 2392)...)
	hh.Devices = append(hh.Devices, devices("neureality.ai/ai_hypervisor_queue", 7)...)
	hh.Devices = append(hh.Devices, devices("vendor.example/gpu", 1)...)
	w.kubelet.pods = []*podresourcesapi.PodResources{{Name: "resnet50", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{hh, {Name: "graph"}}}}
	socket := filepath.Join(dir, "pod-resources.sock")
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, w.kubelet)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	client, err := allocation.Dial(socket, nr1.Amounts{116244, 512, 13417, 65536})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	w.tracker = allocation.NewTracker(allocation.Options{Lister: client, Interval: time.Hour, Clock: clock.RealClock{}, Log: discard()})
	w.watcher = runtime.NewWatcher(runtime.NewClient("unix://"+w.cri.Socket), runtime.Options{Resync: time.Hour}, discard())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.watcher.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	w.builder = NewBuilder(w.options())
	w.watched(t, "watcher never connected", func(s *runtime.Snapshot) bool { return s.Connected })
	// The tests' changes reach the watcher by events alone (the resync is an hour).
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	if err := w.cri.WaitStream(sctx); err != nil {
		t.Fatal(err)
	}
	return w
}

// watched waits until the watcher publishes a snapshot for which cond holds.
func (w *world) watched(t *testing.T, failure string, cond func(*runtime.Snapshot) bool) {
	t.Helper()
	deadline := time.After(2 * time.Second)
	for {
		s, changed := w.watcher.Load()
		if cond(s) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal(failure)
		}
	}
}

func inode(t *testing.T, dir string) uint64 {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestCGAllocationIsTheSumOverContainers(t *testing.T) {
	w := newWorld(t)
	before := w.builder.Build(time.Now()).CG(podUID)
	if before == nil || before.AllocationKnown {
		t.Fatalf("before the kubelet answers, allocation must be unknown: %+v", before)
	}
	w.tracker.Refresh(context.Background())
	s := w.builder.Build(time.Now())
	cg := s.CG(podUID)
	if !cg.AllocationKnown || cg.Allocation != (nr1.Amounts{3, 0, 2392, 7}) || cg.QoS != "BestEffort" {
		t.Fatalf("CG %+v", cg)
	}
	if len(cg.Containers) != 2 || cg.Containers[0].Name != "graph" || cg.Containers[1].Name != "health-handler" {
		t.Fatalf("containers %+v", cg.Containers)
	}
	hh := cg.Containers[1]
	if hh.Allocation != (nr1.Amounts{3, 0, 2392, 7}) || (cg.Containers[0].Allocation != nr1.Amounts{}) {
		t.Errorf("per-container allocation: hh %v graph %v", hh.Allocation, cg.Containers[0].Allocation)
	}
	wantDir := filepath.Join(w.cgroups.V2, "kubepods/besteffort/poduid-1/c-hh")
	pids, err := Processes(hh)
	if hh.Cgroup.V2 != wantDir || hh.CgroupID != inode(t, wantDir) || len(hh.PIDs) != 0 || err != nil || !slices.Equal(pids, []int{101, 110}) {
		t.Errorf("health-handler cgroup %+v id %d pids %v (read in the sample: %v) %v", hh.Cgroup, hh.CgroupID, pids, hh.PIDs, err)
	}
	if w.builder.Mismatches() != 0 {
		t.Errorf("%d mismatches for agreeing annotations", w.builder.Mismatches())
	}
}

// putContainers replaces the fake runtime's containers of the example pod and waits for
// the watcher to see them.
func (w *world) putContainers(t *testing.T, ctrs ...fakecri.Container) {
	t.Helper()
	for _, c := range ctrs {
		w.cri.PutContainer(c, false)
	}
	w.watched(t, "events not applied", func(s *runtime.Snapshot) bool {
		p := s.Pod(podUID)
		return p != nil && seenAll(p, ctrs)
	})
}

// sameShareMounts: the container's marks are those of the fake's mounts.
func sameShareMounts(got []runtime.Mount, mounts map[string]string) bool {
	want := map[string]string{}
	for dst, src := range mounts {
		if strings.HasPrefix(dst, nr1.ShareDir+"/") {
			want[dst] = src
		}
	}
	have := map[string]string{}
	for _, m := range got {
		have[m.Destination] = m.Source
	}
	return maps.Equal(have, want)
}

// seenAll: the pod holds each container as given, so that a container replaced under
// the same ID is waited for too.
func seenAll(p *runtime.Pod, ctrs []fakecri.Container) bool {
	for _, want := range ctrs {
		found := false
		for _, c := range p.Containers {
			exited := want.State == runtimeapi.ContainerState_CONTAINER_EXITED
			// A fake answering its own info, or none, gives none of the details asked.
			described := want.Info == "" && !want.NoInfo
			if c.ID == want.ID && maps.Equal(c.Annotations, want.Annotations) && exited == (c.State == view.Exited) &&
				(!described || c.CgroupsPath == want.CgroupsPath && slices.Equal(c.CDIDevices, want.CDIDevices) && sameShareMounts(c.ShareMounts, want.Mounts)) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func (w *world) setPods(pods ...*podresourcesapi.PodResources) {
	w.kubelet.mu.Lock()
	defer w.kubelet.mu.Unlock()
	w.kubelet.pods = pods
}

func TestDisagreementLeavesTheAllocationUnknown(t *testing.T) {
	w := newWorld(t)
	w.putContainers(t, fakecri.Container{ID: "c-hh", SandboxID: "sb1", Name: "health-handler", PID: 101,
		CgroupsPath: "/kubepods/besteffort/poduid-1/c-hh",
		Annotations: map[string]string{"nr1.neureality.ai/compute_dma_memory": "30", "nr1.neureality.ai/ai_hypervisor_queue": "7"}})
	w.tracker.Refresh(context.Background())
	cg := w.builder.Build(time.Now()).CG(podUID)
	if cg.AllocationKnown || !strings.Contains(cg.AllocationUnknown, "annotations say") {
		t.Errorf("known %v (%q): when the two sources disagree nothing may be assumed", cg.AllocationKnown, cg.AllocationUnknown)
	}
	if got := w.builder.Mismatches(); got != 1 {
		t.Errorf("mismatches %d, want 1", got)
	}
	w.builder.Build(time.Now())
	if got := w.builder.Mismatches(); got != 1 {
		t.Errorf("the same disagreement counted again: %d", got)
	}
}

func TestMalformedAnnotationIsCountedAndKubeletWins(t *testing.T) {
	w := newWorld(t)
	w.putContainers(t, fakecri.Container{ID: "c-g", SandboxID: "sb1", Name: "graph", PID: 102,
		CgroupsPath: "/kubepods/besteffort/poduid-1/c-g", Annotations: map[string]string{"nr1.neureality.ai/ai_hypervisor_queue": "many"}})
	w.tracker.Refresh(context.Background())
	cg := w.builder.Build(time.Now()).CG(podUID)
	if !cg.AllocationKnown || cg.Allocation != (nr1.Amounts{3, 0, 2392, 7}) {
		t.Errorf("allocation %v known %v (%s): the pod-resources figure must stand", cg.Allocation, cg.AllocationKnown, cg.AllocationUnknown)
	}
	if got := w.builder.Mismatches(); got != 1 {
		t.Errorf("mismatches %d, want 1", got)
	}
}

// A restarting kubelet answers before it has read its pods again: the pod is missing,
// or listed without its devices. Neither reads as "allocated nothing".
func TestRestartingKubeletLeavesTheAllocationUnknown(t *testing.T) {
	w := newWorld(t)
	w.setPods()
	w.tracker.Refresh(context.Background())
	cg := w.builder.Build(time.Now()).CG(podUID)
	if cg.AllocationKnown || (cg.Allocation != nr1.Amounts{}) || !strings.Contains(cg.AllocationUnknown, "not in the kubelet's") {
		t.Errorf("pod missing from the answer: known %v allocation %v (%q)", cg.AllocationKnown, cg.Allocation, cg.AllocationUnknown)
	}
	w.setPods(&podresourcesapi.PodResources{Name: "resnet50", Namespace: "default",
		Containers: []*podresourcesapi.ContainerResources{{Name: "health-handler"}, {Name: "graph"}}})
	w.tracker.Refresh(context.Background())
	cg = w.builder.Build(time.Now()).CG(podUID)
	if cg.AllocationKnown {
		t.Errorf("pod listed without the devices its Allocate annotations name: known with %v", cg.Allocation)
	}
}

// The kubelet does not list init containers: what Allocate gave one is on its
// annotations, and the pod's allocation is at least the largest init container's.
func TestInitContainerIsJudgedByWhatItWasGiven(t *testing.T) {
	w := newWorld(t)
	w.putContainers(t, fakecri.Container{ID: "c-init", SandboxID: "sb1", Name: "prepare", PID: 103,
		CgroupsPath: "/kubepods/besteffort/poduid-1/c-init",
		Annotations: map[string]string{"nr1.neureality.ai/compute_dma_memory": "5", "nr1.neureality.ai/ai_hypervisor_queue": "1"}})
	w.tracker.Refresh(context.Background())
	cg := w.builder.Build(time.Now()).CG(podUID)
	if !cg.AllocationKnown || cg.Allocation != (nr1.Amounts{5, 0, 2392, 7}) {
		t.Fatalf("allocation %v known %v (%s), want the larger of the init container's and the sum", cg.Allocation, cg.AllocationKnown, cg.AllocationUnknown)
	}
	for _, c := range cg.Containers {
		if c.Name == "prepare" && (c.Allocation != (nr1.Amounts{5, 0, 0, 1}) || c.AllocationSource != view.FromAnnotations) {
			t.Errorf("init container allocation %v from %q", c.Allocation, c.AllocationSource)
		}
	}
}

// An allocation table older than its age limit is unknown, for every CG.
func TestOldAllocationTableIsUnknown(t *testing.T) {
	w := newWorld(t)
	w.tracker.Refresh(context.Background())
	later := time.Now().Add(6 * time.Second)
	cg := w.builder.Build(later).CG(podUID)
	if cg.AllocationKnown || !strings.Contains(cg.AllocationUnknown, "limit 5s") {
		t.Errorf("known %v (%q) with a table 6 s old", cg.AllocationKnown, cg.AllocationUnknown)
	}
}

// The pod-resources API names pods without UIDs: a pod that takes the name of one just
// deleted is unknown until a table read after the agent saw it, which the tracker is
// told to read (Awaits); so is a running pod the table does not list. What the agent
// saw is ordered on its own clock, whatever time the runtime gives the sandbox: a clock
// stepped back (the sandbox dated before the read) or ahead changes nothing.
func TestPodNewerThanTheTableAwaitsIt(t *testing.T) {
	for _, skew := range []time.Duration{0, -time.Hour, time.Hour} {
		t.Run(fmt.Sprintf("runtime dates the sandbox %v off", skew), func(t *testing.T) { podNewerThanTheTable(t, skew) })
	}
}

func podNewerThanTheTable(t *testing.T, skew time.Duration) {
	w := newWorld(t)
	w.tracker.Refresh(context.Background())
	state, _ := w.tracker.Load()
	if (RunningPods{w.watcher}).Awaits(state) {
		t.Fatal("awaiting a table that lists every running pod")
	}
	if cg := w.builder.Build(time.Now()).CG(podUID); !cg.AllocationKnown {
		t.Fatalf("the first pod unknown: %s", cg.AllocationUnknown)
	}

	// The same name, another pod, created after the table was read.
	const reused = "22222222-3333-4444-5555-666666666666"
	w.cri.DropSandbox("sb1", false)
	w.cri.PutSandbox(fakecri.Sandbox{ID: "sb2", UID: reused, Namespace: "default", Name: "resnet50", CreatedAt: time.Now().Add(skew).UnixNano()}, false)
	w.cri.PutContainer(fakecri.Container{ID: "c-hh2", SandboxID: "sb2", Name: "health-handler", PID: 201,
		CgroupsPath: "/kubepods/besteffort/poduid-2/c-hh2"}, false)
	w.watched(t, "the second pod not seen", func(s *runtime.Snapshot) bool {
		p := s.Pod(reused)
		return p != nil && len(p.Containers) == 1 && s.Pod(podUID) == nil
	})
	if !(RunningPods{w.watcher}).Awaits(state) {
		t.Error("not awaiting a table read after the pod that took the name was created")
	}
	cg := w.builder.Build(time.Now()).CG(reused)
	if cg.AllocationKnown || !strings.Contains(cg.AllocationUnknown, "pod first seen") || !strings.Contains(cg.AllocationUnknown, "after the kubelet's pod-resources answer was read") {
		t.Errorf("a pod newer than the table: known %v with %v (%q), want unknown", cg.AllocationKnown, cg.Allocation, cg.AllocationUnknown)
	}

	w.setPods(&podresourcesapi.PodResources{Name: "resnet50", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{
		{Name: "health-handler", Devices: devices("neureality.ai/ai_hypervisor_queue", 9)}}})
	w.tracker.Refresh(context.Background())
	state, _ = w.tracker.Load()
	if (RunningPods{w.watcher}).Awaits(state) {
		t.Error("awaiting after a table read after the pod was created")
	}
	if cg := w.builder.Build(time.Now()).CG(reused); !cg.AllocationKnown || cg.Allocation != (nr1.Amounts{0, 0, 0, 9}) {
		t.Errorf("the second pod: known %v with %v (%q), want its own 9 queues", cg.AllocationKnown, cg.Allocation, cg.AllocationUnknown)
	}

	w.setPods()
	w.tracker.Refresh(context.Background())
	state, _ = w.tracker.Load()
	if !(RunningPods{w.watcher}).Awaits(state) {
		t.Error("not awaiting a table that does not list a running pod")
	}
}

// fakeClaims are the DRA driver's prepared claims.
type fakeClaims map[allocation.ClaimKey]nr1.Amounts

func (f fakeClaims) ClaimAmounts(namespace, name string) (nr1.Amounts, bool) {
	a, ok := f[allocation.ClaimKey{Namespace: namespace, Name: name}]
	return a, ok
}

// cdiShare is the CDI device of a fake claim's share.
func cdiShare(name string) string { return nr1.CDIKind + "=share-of-" + name }

func (f fakeClaims) CDIDeviceClaim(dev string) (string, string, nr1.Amounts, bool) {
	for k, a := range f {
		if dev == cdiShare(k.Name) {
			return k.Namespace, k.Name, a, true
		}
	}
	return "", "", nr1.Amounts{}, false
}

// ReleasedCDIDeviceClaim: a fake driver that unprepared nothing.
func (f fakeClaims) ReleasedCDIDeviceClaim(string) (string, string, nr1.Amounts, bool) {
	return "", "", nr1.Amounts{}, false
}

// releasedClaims are a fake driver's prepared claims and those it unprepared lately.
type releasedClaims struct {
	fakeClaims
	released fakeClaims
}

func (r releasedClaims) ReleasedCDIDeviceClaim(dev string) (string, string, nr1.Amounts, bool) {
	return r.released.CDIDeviceClaim(dev)
}

// In DRA mode a container's allocation is what its claims of the NR1's driver consumed;
// a claim two containers of the pod share is the CG's once; a claim the driver did not
// prepare, or with no driver at all, leaves the CG unknown.
func TestDRAClaimsAreTheAllocation(t *testing.T) {
	w := newWorld(t)
	claim := func(name string) []*podresourcesapi.DynamicResource {
		return []*podresourcesapi.DynamicResource{{ClaimName: name, ClaimNamespace: "default",
			ClaimResources: []*podresourcesapi.ClaimResource{{DriverName: nr1.DRADriver, PoolName: "vm", DeviceName: "nr1-0"}}}}
	}
	w.setPods(&podresourcesapi.PodResources{Name: "resnet50", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{
		{Name: "health-handler", DynamicResources: claim("resnet50-nr1")}, {Name: "graph", DynamicResources: claim("resnet50-nr1")}}})
	// The Allocate annotations of the device plugin are not there in DRA mode.
	w.putContainers(t, fakecri.Container{ID: "c-hh", SandboxID: "sb1", Name: "health-handler", PID: 101, CgroupsPath: "/kubepods/besteffort/poduid-1/c-hh"})
	w.tracker.Refresh(context.Background())

	cg := w.builder.Build(time.Now()).CG(podUID)
	if cg.AllocationKnown || !strings.Contains(cg.AllocationUnknown, "runs no DRA driver") {
		t.Errorf("a DRA claim without the driver: known %v (%q)", cg.AllocationKnown, cg.AllocationUnknown)
	}
	w.builder.dra.claims = fakeClaims{}
	cg = w.builder.Build(time.Now()).CG(podUID)
	if cg.AllocationKnown || !strings.Contains(cg.AllocationUnknown, "not prepared") {
		t.Errorf("a claim the driver did not prepare: known %v (%q)", cg.AllocationKnown, cg.AllocationUnknown)
	}
	resnet := nr1.Amounts{3, 0, 2392, 7}
	w.builder.dra.claims = fakeClaims{{Namespace: "default", Name: "resnet50-nr1"}: resnet}
	cg = w.builder.Build(time.Now()).CG(podUID)
	if !cg.AllocationKnown || cg.Allocation != resnet {
		t.Fatalf("CG allocation %v known %v (%q), want the claim's %v once", cg.Allocation, cg.AllocationKnown, cg.AllocationUnknown, resnet)
	}
	for _, c := range cg.Containers {
		if c.Allocation != resnet {
			t.Errorf("container %s allocation %v, want the claim it uses, %v", c.Name, c.Allocation, resnet)
		}
	}
	// The claims it holds, once each, for pods sharing one to be held to it together.
	if want := []view.Claim{{Namespace: "default", Name: "resnet50-nr1", Amounts: resnet}}; !slices.Equal(cg.Claims, want) {
		t.Errorf("claims %v, want %v", cg.Claims, want)
	}
}

// The kubelet's pod-resources answer leaves ordinary init containers out: a DRA claim
// an init container alone uses is read from the shares the kubelet gave it as CDI
// devices, never as nothing; so is a claim whose information the kubelet's answer
// lacks. A share of no claim the driver prepared leaves the CG unknown while its
// container runs.
func TestDRAClaimOfAnInitContainer(t *testing.T) {
	w := newWorld(t)
	// health-handler and graph use no NR1; the init container claims it.
	w.setPods(&podresourcesapi.PodResources{Name: "resnet50", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{
		{Name: "health-handler"}, {Name: "graph"}}})
	w.putContainers(t,
		fakecri.Container{ID: "c-hh", SandboxID: "sb1", Name: "health-handler", PID: 101, CgroupsPath: "/kubepods/besteffort/poduid-1/c-hh"},
		fakecri.Container{ID: "c-init", SandboxID: "sb1", Name: "load-model", PID: 103, CgroupsPath: "/kubepods/besteffort/poduid-1/c-init",
			CDIDevices: []string{"vendor.example/gpu=0", cdiShare("model-nr1")}})
	w.tracker.Refresh(context.Background())
	model := nr1.Amounts{40, 0, 100, 2}

	w.builder.dra.claims = fakeClaims{}
	cg := w.builder.Build(time.Now()).CG(podUID)
	if cg.AllocationKnown || !strings.Contains(cg.AllocationUnknown, "container load-model: holds the DRA share") {
		t.Errorf("a share of no prepared claim: known %v allocation %v (%q), want unknown", cg.AllocationKnown, cg.Allocation, cg.AllocationUnknown)
	}
	w.builder.dra.claims = fakeClaims{{Namespace: "default", Name: "model-nr1"}: model}
	cg = w.builder.Build(time.Now()).CG(podUID)
	if !cg.AllocationKnown || cg.Allocation != model {
		t.Fatalf("allocation %v known %v (%q), want the init container's claim %v", cg.Allocation, cg.AllocationKnown, cg.AllocationUnknown, model)
	}
	for _, c := range cg.Containers {
		if c.Name == "load-model" && (c.Allocation != model || c.AllocationSource != "cdi-devices") {
			t.Errorf("init container allocation %v from %q", c.Allocation, c.AllocationSource)
		}
	}

	// The kubelet lists health-handler without its claim; its CDI devices say it holds one.
	w.putContainers(t, fakecri.Container{ID: "c-hh", SandboxID: "sb1", Name: "health-handler", PID: 101,
		CgroupsPath: "/kubepods/besteffort/poduid-1/c-hh", CDIDevices: []string{cdiShare("main-nr1")}})
	main := nr1.Amounts{3, 0, 2392, 7}
	w.builder.dra.claims = fakeClaims{{Namespace: "default", Name: "model-nr1"}: model, {Namespace: "default", Name: "main-nr1"}: main}
	cg = w.builder.Build(time.Now()).CG(podUID)
	if want := nr1.Max(main, model); !cg.AllocationKnown || cg.Allocation != want {
		t.Errorf("with the kubelet's claim information missing: allocation %v known %v (%q), want %v", cg.Allocation, cg.AllocationKnown, cg.AllocationUnknown, want)
	}
	if want := []view.Claim{{Namespace: "default", Name: "main-nr1", Amounts: main}, {Namespace: "default", Name: "model-nr1", Amounts: model}}; !slices.Equal(cg.Claims, want) {
		t.Errorf("claims %v, want %v, the init container's included", cg.Claims, want)
	}

	// An init container that has exited holds nothing: a share the driver no longer
	// knows of does not leave the CG unknown.
	w.putContainers(t, fakecri.Container{ID: "c-init", SandboxID: "sb1", Name: "load-model", State: runtimeapi.ContainerState_CONTAINER_EXITED,
		CgroupsPath: "/kubepods/besteffort/poduid-1/c-init", CDIDevices: []string{cdiShare("model-nr1")}})
	w.builder.dra.claims = fakeClaims{{Namespace: "default", Name: "main-nr1"}: main}
	cg = w.builder.Build(time.Now()).CG(podUID)
	if !cg.AllocationKnown || cg.Allocation != main {
		t.Errorf("after the init container exited: allocation %v known %v (%q), want %v", cg.Allocation, cg.AllocationKnown, cg.AllocationUnknown, main)
	}
}

// CRI-O does not say which CDI devices the kubelet gave a container: the shares it holds
// are read from the marks the driver's CDI specs mount into each (nr1.ShareMount), and a
// mount the pod made at the same place marks nothing. A mark the agent did not write (of
// no claim its driver prepared, a copy of another namespace's) is ignored and noted:
// it never leaves the allocation unknown.
func TestDRAClaimOfAnInitContainerOnCRIO(t *testing.T) {
	w := newWorld(t)
	w.builder.dra.cdiDir = "/var/run/cdi"
	w.setPods(&podresourcesapi.PodResources{Name: "resnet50", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{
		{Name: "health-handler"}, {Name: "graph"}}})
	source, destination := nr1.ShareMount(w.builder.dra.cdiDir, "share", strings.TrimPrefix(cdiShare("model-nr1"), nr1.CDIKind+"="))
	w.putContainers(t,
		fakecri.Container{ID: "c-hh", SandboxID: "sb1", Name: "health-handler", PID: 101, CgroupsPath: "/kubepods/besteffort/poduid-1/c-hh", CRIO: true},
		fakecri.Container{ID: "c-init", SandboxID: "sb1", Name: "load-model", PID: 103, CgroupsPath: "/kubepods/besteffort/poduid-1/c-init", CRIO: true,
			Mounts: map[string]string{destination: source, "/dev/nr1_0_compute_dma": "/dev/nr1_0_compute_dma"}})
	w.tracker.Refresh(context.Background())
	model := nr1.Amounts{40, 0, 100, 2}
	w.builder.dra.claims = fakeClaims{{Namespace: "default", Name: "model-nr1"}: model}
	cg := w.builder.Build(time.Now()).CG(podUID)
	if !cg.AllocationKnown || cg.Allocation != model {
		t.Fatalf("allocation %v known %v (%q), want the init container's claim %v", cg.Allocation, cg.AllocationKnown, cg.AllocationUnknown, model)
	}
	w.builder.dra.claims = fakeClaims{}
	if cg := w.builder.Build(time.Now()).CG(podUID); !cg.AllocationKnown || cg.Allocation != (nr1.Amounts{}) ||
		len(cg.IgnoredMarks) != 1 || !strings.Contains(cg.IgnoredMarks[0], "of no claim the agent's driver prepared") {
		t.Errorf("a marked share of no prepared claim: known %v allocation %v (%q), ignored %q; want known, the mark ignored and noted", cg.AllocationKnown, cg.Allocation, cg.AllocationUnknown, cg.IgnoredMarks)
	}
	// The kubelet unprepared the claim once the pod's containers stopped, and the agent
	// still sees them running: the mark is the agent's own, counted as it was.
	w.builder.dra.claims = releasedClaims{fakeClaims{}, fakeClaims{{Namespace: "default", Name: "model-nr1"}: model}}
	if cg := w.builder.Build(time.Now()).CG(podUID); !cg.AllocationKnown || cg.Allocation != model || len(cg.IgnoredMarks) != 0 {
		t.Errorf("a mark of a claim unprepared lately: known %v allocation %v (%q), ignored %q; want the claim's %v, nothing ignored",
			cg.AllocationKnown, cg.Allocation, cg.AllocationUnknown, cg.IgnoredMarks, model)
	}
	w.builder.dra.claims = fakeClaims{{Namespace: "team-b", Name: "model-nr1"}: model}
	if cg := w.builder.Build(time.Now()).CG(podUID); !cg.AllocationKnown || cg.Allocation != (nr1.Amounts{}) ||
		len(cg.IgnoredMarks) != 1 || !strings.Contains(cg.IgnoredMarks[0], "of another namespace") {
		t.Errorf("a mark of another namespace's claim: known %v allocation %v (%q), ignored %q; want known, the mark ignored and noted", cg.AllocationKnown, cg.Allocation, cg.AllocationUnknown, cg.IgnoredMarks)
	}

	// The pod's own volume at the mark's place, from its own directory, is no share.
	w.putContainers(t, fakecri.Container{ID: "c-init", SandboxID: "sb1", Name: "load-model", PID: 103, CgroupsPath: "/kubepods/besteffort/poduid-1/c-init", CRIO: true,
		Mounts: map[string]string{destination: "/var/lib/kubelet/pods/poduid-1/volumes/kubernetes.io~empty-dir/fake/" + path.Base(source)}})
	if cg := w.builder.Build(time.Now()).CG(podUID); !cg.AllocationKnown || len(cg.Claims) != 0 {
		t.Errorf("a forged mark read as a share: known %v claims %v (%q)", cg.AllocationKnown, cg.Claims, cg.AllocationUnknown)
	}
}

// A container whose runtime details were not read (its status too large, without the
// runtime's info, refused) is judged with the pod's booking as the kubelet lists it:
// never unknown, which would make a CG untouchable by its own doing. A regular
// container's claims are the kubelet's table's; an init container's, not listed and
// not read, add nothing.
func TestDRAContainerNotReadIsJudgedWithThePodsBooking(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctr  fakecri.Container
	}{
		{"status without the runtime's info", fakecri.Container{NoInfo: true}},
		{"info unreadable", fakecri.Container{Info: `{"pid":103,"runtimeSpec":`}},
		{"info refused", fakecri.Container{Info: `{"pid":-7}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			claim := func(name string) []*podresourcesapi.DynamicResource {
				return []*podresourcesapi.DynamicResource{{ClaimName: name, ClaimNamespace: "default",
					ClaimResources: []*podresourcesapi.ClaimResource{{DriverName: nr1.DRADriver, PoolName: "node1", DeviceName: "nr1"}}}}
			}
			w.setPods(&podresourcesapi.PodResources{Name: "resnet50", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{
				{Name: "health-handler", DynamicResources: claim("main-nr1")}, {Name: "graph"}}})
			main := nr1.Amounts{3, 0, 2392, 7}
			init := tc.ctr
			init.ID, init.SandboxID, init.Name, init.PID, init.CgroupsPath = "c-init", "sb1", "load-model", 103, "/kubepods/besteffort/poduid-1/c-init"
			init.CDIDevices = []string{cdiShare("model-nr1")}
			hh := tc.ctr
			hh.ID, hh.SandboxID, hh.Name, hh.PID, hh.CgroupsPath = "c-hh", "sb1", "health-handler", 101, "/kubepods/besteffort/poduid-1/c-hh"
			hh.CDIDevices = []string{cdiShare("main-nr1")}
			w.putContainers(t, hh, init)
			w.tracker.Refresh(context.Background())
			w.builder.dra.claims = fakeClaims{{Namespace: "default", Name: "main-nr1"}: main, {Namespace: "default", Name: "model-nr1"}: {40, 0, 100, 2}}
			cg := w.builder.Build(time.Now()).CG(podUID)
			if !cg.AllocationKnown || cg.Allocation != main {
				t.Errorf("running, not read: known %v allocation %v (%q), want the pod's booking %v", cg.AllocationKnown, cg.Allocation, cg.AllocationUnknown, main)
			}

			// Exited, it holds nothing: the same.
			init.State = runtimeapi.ContainerState_CONTAINER_EXITED
			w.putContainers(t, init)
			if cg := w.builder.Build(time.Now()).CG(podUID); !cg.AllocationKnown || cg.Allocation != main {
				t.Errorf("exited, not read: known %v allocation %v (%q), want %v", cg.AllocationKnown, cg.Allocation, cg.AllocationUnknown, main)
			}
		})
	}
}

// A pod the runtime describes in a way the agent refuses is left alone: unknown, with
// the reason, and nothing read where its cgroupsPath pointed.
func TestRefusedDescriptionLeavesTheCGUnknown(t *testing.T) {
	w := newWorld(t)
	// Processes a cgroupsPath leaving the hierarchy would have the agent read.
	outside := filepath.Join(filepath.Dir(w.cgroups.V2), "outside", "ctr")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "cgroup.procs"), []byte("4242\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.putContainers(t, fakecri.Container{ID: "c-g", SandboxID: "sb1", Name: "graph", PID: 102, CgroupsPath: "/kubepods/../../outside/ctr"})
	w.tracker.Refresh(context.Background())
	cg := w.builder.Build(time.Now()).CG(podUID)
	if cg.AllocationKnown || (cg.Allocation != nr1.Amounts{}) || !strings.Contains(cg.AllocationUnknown, "container graph: cgroupsPath") {
		t.Errorf("known %v allocation %v (%q): a refused cgroupsPath must leave the CG unknown", cg.AllocationKnown, cg.Allocation, cg.AllocationUnknown)
	}
	for _, c := range cg.Containers {
		pids, err := Processes(c)
		if c.Name == "graph" && (c.Cgroup.V2 != "" || len(pids) != 0 || err != nil) {
			t.Errorf("graph read through a refused cgroupsPath: %+v: %v %v", c, pids, err)
		}
		if c.Name == "health-handler" && !slices.Equal(pids, []int{101, 110}) {
			t.Errorf("health-handler lost its processes: %v %v", pids, err)
		}
	}

	w.cri.PutSandbox(fakecri.Sandbox{ID: "sb2", UID: "../../etc", Namespace: "default", Name: "odd"}, false)
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if s, _ := w.watcher.Load(); s.Pod("../../etc") != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sandbox event not applied")
		}
	}
	w.setPods(&podresourcesapi.PodResources{Name: "odd", Namespace: "default"})
	w.tracker.Refresh(context.Background())
	odd := w.builder.Build(time.Now()).CG("../../etc")
	if odd == nil || odd.AllocationKnown || !strings.Contains(odd.AllocationUnknown, "pod UID") {
		t.Errorf("a pod whose UID is none must be unknown: %+v", odd)
	}
}

// Each CG carries its namespace's labels, or why they are not known.
func TestCGCarriesItsNamespaceLabels(t *testing.T) {
	w := newWorld(t)
	w.namespaces.labels["default"] = map[string]string{"nr1.neureality.ai/enforcement": "disabled"}
	cg := w.builder.Build(time.Now()).CG(podUID)
	if cg.NamespaceUnknown != "" || cg.NamespaceLabels["nr1.neureality.ai/enforcement"] != "disabled" {
		t.Errorf("labels %v (unknown %q), want the namespace's", cg.NamespaceLabels, cg.NamespaceUnknown)
	}
	w.namespaces.mu.Lock()
	delete(w.namespaces.labels, "default")
	w.namespaces.err = fmt.Errorf("namespaces not listed yet")
	w.namespaces.mu.Unlock()
	cg = w.builder.Build(time.Now()).CG(podUID)
	if cg.NamespaceLabels != nil || cg.NamespaceUnknown != "namespaces not listed yet" {
		t.Errorf("labels %v (unknown %q), want unknown with the reason", cg.NamespaceLabels, cg.NamespaceUnknown)
	}
}

// The kubelet's table names pods, not UIDs: while a pod's successor of the same name
// is on the node (a StatefulSet's pod re-created while its predecessor terminates), the
// table speaks for the successor, part-allocated as it may be while the kubelet admits
// it. The predecessor is unknown, never judged against its successor's allocation; of
// two seen at once, the runtime's later sandbox is the successor.
func TestPredecessorOfASameNamePodIsUnknown(t *testing.T) {
	w := newWorld(t)
	const successor = "22222222-3333-4444-5555-666666666666"
	// The predecessor terminates: its health-handler has exited, its graph not yet.
	w.putContainers(t, fakecri.Container{ID: "c-hh", SandboxID: "sb1", Name: "health-handler", State: runtimeapi.ContainerState_CONTAINER_EXITED,
		CgroupsPath: "/kubepods/besteffort/poduid-1/c-hh"})
	w.cri.PutSandbox(fakecri.Sandbox{ID: "sb2", UID: successor, Namespace: "default", Name: "resnet50", CreatedAt: time.Now().UnixNano()}, false)
	w.cri.PutContainer(fakecri.Container{ID: "c-hh2", SandboxID: "sb2", Name: "health-handler", PID: 201,
		CgroupsPath: "/kubepods/besteffort/poduid-2/c-hh2"}, false)
	w.watched(t, "the successor not seen", func(s *runtime.Snapshot) bool { return s.Pod(successor) != nil })
	// The successor admitted but for its docker partition, not allocated yet.
	w.setPods(&podresourcesapi.PodResources{Name: "resnet50", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{
		{Name: "health-handler", Devices: append(devices("neureality.ai/compute_dma_memory_in_mb", 3), devices("neureality.ai/ai_hypervisor_queue", 7)...)}}})
	w.tracker.Refresh(context.Background())
	snap := w.builder.Build(time.Now())
	if cg := snap.CG(podUID); cg.AllocationKnown || !strings.Contains(cg.AllocationUnknown, "a newer pod of its name") {
		t.Errorf("the predecessor: known %v with %v (%q), want unknown", cg.AllocationKnown, cg.Allocation, cg.AllocationUnknown)
	}
	if cg := snap.CG(successor); !cg.AllocationKnown {
		t.Errorf("the successor unknown: %s", cg.AllocationUnknown)
	}

	// Both seen at once, by an agent that just started: the runtime's creation times
	// order them.
	b := NewBuilder(Options{Runtime: runtimeView{&runtime.Snapshot{Connected: true, Pods: []*runtime.Pod{
		{UID: successor, Namespace: "default", Name: "resnet50", CreatedAt: time.Unix(200, 0)},
		{UID: podUID, Namespace: "default", Name: "resnet50", CreatedAt: time.Unix(100, 0)},
	}}}, Allocations: w.tracker, Namespaces: w.namespaces, Cgroups: w.cgroups, MaxAllocationAge: 5 * time.Second, Log: discard()})
	snap = b.Build(time.Now())
	if cg := snap.CG(podUID); cg.AllocationKnown || !strings.Contains(cg.AllocationUnknown, successor) {
		t.Errorf("the earlier sandbox: known %v (%q), want unknown, naming its successor", cg.AllocationKnown, cg.AllocationUnknown)
	}
	if cg := snap.CG(successor); !cg.AllocationKnown {
		t.Errorf("the later sandbox unknown: %s", cg.AllocationUnknown)
	}
}

// An agent that starts while a pod is re-created under its name sees the old pod, and
// its successor not yet: the kubelet admitted the successor but has not asked the
// runtime for it. The table then speaks for the successor, in part. The old pod's
// booking container waits to restart, exited: its latest instance's annotations must
// contradict the table as a running one's would.
func TestSuccessorsTableContradictedByAnExitedBookingContainer(t *testing.T) {
	full := map[string]string{"nr1.neureality.ai/compute_dma_memory": "3", "nr1.neureality.ai/docker_partition": "2392", "nr1.neureality.ai/ai_hypervisor_queue": "7"}
	other := map[string]string{"nr1.neureality.ai/compute_dma_memory": "4", "nr1.neureality.ai/docker_partition": "2392", "nr1.neureality.ai/ai_hypervisor_queue": "7"}
	partial := &podresourcesapi.PodResources{Name: "resnet50", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{
		{Name: "health-handler", Devices: append(devices("neureality.ai/compute_dma_memory_in_mb", 3), devices("neureality.ai/ai_hypervisor_queue", 7)...)},
		{Name: "graph"}}}
	exited := runtimeapi.ContainerState_CONTAINER_EXITED
	for _, tc := range []struct {
		name     string
		bookings []fakecri.Container // the booking container's instances, all exited
		partial  bool                // the table is the successor's, without its docker partition
		known    bool
	}{
		{"the latest exited instance contradicts the successor's table", []fakecri.Container{
			{ID: "c-hh", Attempt: 0, Annotations: full, CreatedAt: 100},
			{ID: "c-hh-1", Attempt: 1, Annotations: full, CreatedAt: 200},
		}, true, false},
		{"the latest exited instance agrees with the pod's own table", []fakecri.Container{
			{ID: "c-hh", Attempt: 0, Annotations: full, CreatedAt: 100},
			{ID: "c-hh-1", Attempt: 1, Annotations: full, CreatedAt: 200},
		}, false, true},
		{"an earlier instance is not the one compared", []fakecri.Container{
			{ID: "c-hh", Attempt: 0, Annotations: other, CreatedAt: 300},
			{ID: "c-hh-1", Attempt: 1, Annotations: full, CreatedAt: 200},
		}, false, true},
		{"the highest attempt is the latest, whatever the runtime's clock says", []fakecri.Container{
			{ID: "c-hh", Attempt: 0, Annotations: full, CreatedAt: 300},
			{ID: "c-hh-1", Attempt: 1, Annotations: other, CreatedAt: 200},
		}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			if tc.partial {
				w.setPods(partial)
			}
			for _, c := range tc.bookings {
				c.SandboxID, c.Name, c.State, c.CgroupsPath = "sb1", "health-handler", exited, "/kubepods/besteffort/poduid-1/"+c.ID
				w.cri.PutContainer(c, false)
			}
			w.watched(t, "the booking container's instances not seen", func(s *runtime.Snapshot) bool {
				p := s.Pod(podUID)
				if p == nil {
					return false
				}
				exitedBookings := 0
				for _, c := range p.Containers {
					if c.Name == "health-handler" && c.State == view.Exited {
						exitedBookings++
					}
				}
				return exitedBookings == len(tc.bookings)
			})
			w.tracker.Refresh(context.Background())
			cg := w.builder.Build(time.Now()).CG(podUID)
			if cg.AllocationKnown != tc.known {
				t.Fatalf("known %v with %v (%q), want known %v", cg.AllocationKnown, cg.Allocation, cg.AllocationUnknown, tc.known)
			}
			if tc.known && cg.Allocation != (nr1.Amounts{3, 0, 2392, 7}) {
				t.Errorf("allocation %v, want the table's 3/0/2392/7", cg.Allocation)
			}
			if !tc.known && !strings.Contains(cg.AllocationUnknown, "annotations say") {
				t.Errorf("unknown for another reason: %q", cg.AllocationUnknown)
			}
		})
	}
}

// runtimeView is a fixed view of the runtime.
type runtimeView struct{ s *runtime.Snapshot }

func (v runtimeView) Load() (*runtime.Snapshot, <-chan struct{}) { return v.s, nil }

// A live pod none of whose containers runs (its init containers done and the others not
// started yet, or its only container restarting) keeps its cgroup, and the cgroups left
// below it: its booking and what its processes left there are still its own. An agent
// that starts in that gap finds it in the tree.
func TestAPodBetweenItsContainersKeepsItsCgroup(t *testing.T) {
	w := newWorld(t)
	podPath := "/kubepods/besteffort/pod" + podUID
	podDir := filepath.Join(w.cgroups.V2, podPath)
	cgroupDir(t, w.cgroups, podPath+"/c-hh", 101)
	cgroupDir(t, w.cgroups, podPath+"/c-g", 102)
	left := filepath.Join(podDir, "left")
	if err := os.MkdirAll(left, 0o755); err != nil {
		t.Fatal(err)
	}
	w.putContainers(t,
		fakecri.Container{ID: "c-hh", SandboxID: "sb1", Name: "health-handler", PID: 101, CgroupsPath: podPath + "/c-hh"},
		fakecri.Container{ID: "c-g", SandboxID: "sb1", Name: "graph", PID: 102, CgroupsPath: podPath + "/c-g"})
	if cg := w.builder.Build(time.Now()).CG(podUID); cg.PodCgroup != podDir {
		t.Fatalf("running: pod cgroup %q, want %q", cg.PodCgroup, podDir)
	}
	w.cri.ExitContainer("c-hh", false)
	w.cri.ExitContainer("c-g", false)
	w.watched(t, "exits not applied", func(s *runtime.Snapshot) bool {
		p := s.Pod(podUID)
		return p != nil && !p.Running()
	})
	for _, b := range []*Builder{w.builder, NewBuilder(w.options())} {
		cg := b.Build(time.Now()).CG(podUID)
		if cg.PodCgroup != podDir {
			t.Fatalf("no container running: pod cgroup %q, want %q", cg.PodCgroup, podDir)
		}
		want := []uint64{inode(t, podDir), inode(t, left), inode(t, filepath.Join(podDir, "c-g")), inode(t, filepath.Join(podDir, "c-hh"))}
		slices.Sort(want[1:])
		got := slices.Clone(cg.PodCgroupIDs)
		slices.Sort(got[1:])
		if !slices.Equal(got, want) {
			t.Errorf("no container running: pod cgroup ids %v, want the pod's first, then every cgroup below it %v", got, want)
		}
	}
}

// A live pod with nothing running whose cgroup is not there is searched for once, and
// again only once a cgroup was made or removed on the node: a pod crash-looping on a
// node whose pods have no cgroup of their own costs no walk of the tree per sample.
func TestAPodWithoutACgroupIsSearchedAgainOnlyAfterAChange(t *testing.T) {
	w := newWorld(t)
	w.cri.ExitContainer("c-hh", false)
	w.cri.ExitContainer("c-g", false)
	w.watched(t, "exits not applied", func(s *runtime.Snapshot) bool {
		p := s.Pod(podUID)
		return p != nil && !p.Running()
	})
	var changes atomic.Uint64
	o := w.options()
	o.CgroupChanges = counted{&changes}
	b := NewBuilder(o)
	if cg := b.Build(time.Now()).CG(podUID); cg.PodCgroup != "" {
		t.Fatalf("pod cgroup %q found where there is none", cg.PodCgroup)
	}
	podDir := filepath.Join(w.cgroups.V2, "/kubepods/besteffort/pod"+podUID)
	if err := os.MkdirAll(podDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if cg := b.Build(time.Now()).CG(podUID); cg.PodCgroup != "" {
		t.Fatalf("searched again with no cgroup changed: found %q", cg.PodCgroup)
	}
	changes.Add(1)
	if cg := b.Build(time.Now()).CG(podUID); cg.PodCgroup != podDir {
		t.Fatalf("after a cgroup change: pod cgroup %q, want %q", cg.PodCgroup, podDir)
	}
}

// A running container the runtime does not describe (its status unread: no cgroupsPath)
// is found below its pod's cgroup by its ID, as either runtime names it; every other
// cgroup below the pod's is the CG's; and the pod's cgroup is found from the tree when
// no container the runtime describes tells it.
func TestUndescribedContainerIsFoundBelowItsPod(t *testing.T) {
	for _, dirName := range []string{"c-x", "crio-c-x", "cri-containerd-c-x.scope"} {
		t.Run(dirName, func(t *testing.T) {
			w := newWorld(t)
			// The example pod's containers, in a cgroup named by its UID as the kubelet names it.
			podPath := "/kubepods/besteffort/pod" + podUID
			podDir := filepath.Join(w.cgroups.V2, podPath)
			cgroupDir(t, w.cgroups, podPath+"/c-hh", 101)
			cgroupDir(t, w.cgroups, podPath+"/c-g", 102)
			xDir := cgroupDir(t, w.cgroups, podPath+"/"+dirName, 120)
			child := filepath.Join(xDir, "worker")
			stray := filepath.Join(podDir, "stray")
			conmon := filepath.Join(podDir, "crio-conmon-c-x")
			for _, d := range []string{child, stray, conmon} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			w.putContainers(t,
				fakecri.Container{ID: "c-hh", SandboxID: "sb1", Name: "health-handler", PID: 101, CgroupsPath: podPath + "/c-hh"},
				fakecri.Container{ID: "c-g", SandboxID: "sb1", Name: "graph", PID: 102, CgroupsPath: podPath + "/c-g"},
				fakecri.Container{ID: "c-x", SandboxID: "sb1", Name: "sidecar", PID: 120, NoInfo: true})
			cg := w.builder.Build(time.Now()).CG(podUID)
			var x *view.Container
			for _, c := range cg.Containers {
				if c.Name == "sidecar" {
					x = c
				}
			}
			if x == nil || x.Cgroup.V2 != xDir || x.CgroupID != inode(t, xDir) || !slices.Equal(x.ChildCgroupIDs, []uint64{inode(t, child)}) {
				t.Fatalf("the undescribed container: %+v, want its cgroup %s", x, xDir)
			}
			if cg.PodCgroup != podDir {
				t.Errorf("pod cgroup %q, want %q", cg.PodCgroup, podDir)
			}
			want := []uint64{inode(t, podDir), inode(t, conmon), inode(t, stray)}
			got := slices.Clone(cg.PodCgroupIDs)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("pod cgroup ids %v, want the pod's, the monitor's and the stray's %v (no container's)", got, want)
			}

			// No container the runtime describes (the pod's sandbox made anew, its containers'
			// statuses unread): the pod's cgroup is found in the tree.
			w.cri.DropSandbox("sb1", false)
			w.cri.PutSandbox(fakecri.Sandbox{ID: "sb2", UID: podUID, Namespace: "default", Name: "resnet50"}, false)
			w.cri.PutContainer(fakecri.Container{ID: "c-hh", SandboxID: "sb2", Name: "health-handler", PID: 101, NoInfo: true}, false)
			w.cri.PutContainer(fakecri.Container{ID: "c-x", SandboxID: "sb2", Name: "sidecar", PID: 120, NoInfo: true}, false)
			w.watched(t, "the new sandbox not seen", func(s *runtime.Snapshot) bool {
				p := s.Pod(podUID)
				return p != nil && p.SandboxID == "sb2" && len(p.Containers) == 2
			})
			cg = w.builder.Build(time.Now()).CG(podUID)
			if cg.PodCgroup != podDir {
				t.Errorf("no container described: pod cgroup %q, want %q", cg.PodCgroup, podDir)
			}
			for _, c := range cg.Containers {
				if c.CgroupID == 0 {
					t.Errorf("no container described: %s has no cgroup", c.Name)
				}
			}
			// Found once, kept while it exists; the pod gone, forgotten.
			if got := w.builder.podDirs[podUID]; got != podDir {
				t.Errorf("pod cgroup kept %q, want %q", got, podDir)
			}
			w.cri.DropSandbox("sb2", false)
			w.watched(t, "pod not removed", func(s *runtime.Snapshot) bool { return s.Pod(podUID) == nil })
			w.builder.Build(time.Now())
			if _, kept := w.builder.podDirs[podUID]; kept {
				t.Error("a pod gone keeps its cgroup's entry")
			}
		})
	}
}
