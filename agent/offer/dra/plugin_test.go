// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/neureality-sdk/nr1-agent/internal/latest"
	"github.com/neureality-sdk/nr1-agent/internal/served"
	"github.com/neureality-sdk/nr1-agent/internal/syncbuf"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

// fakeAPI is the API server as the driver sees it.
type fakeAPI struct {
	mu      sync.Mutex
	claims  map[string]*resourceapi.ResourceClaim // by namespace/name
	slices  []resourceapi.ResourceSlice
	reads   int // claims read
	writes  []string
	created int
	// drop, when set, takes from each slice stored what an API server without a
	// feature drops.
	drop   func(*resourceapi.ResourceSliceSpec)
	events []string
}

func (f *fakeAPI) store(s *resourceapi.ResourceSlice) *resourceapi.ResourceSlice {
	c := s.DeepCopy()
	if f.drop != nil {
		f.drop(&c.Spec)
	}
	return c
}

func (f *fakeAPI) NodeEvent(_ context.Context, node, eventType, reason, message string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, fmt.Sprintf("%s %s %s: %s", node, eventType, reason, message))
	return nil
}

func (f *fakeAPI) Claim(_ context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	c, ok := f.claims[namespace+"/"+name]
	if !ok {
		return nil, errors.New("not found")
	}
	return c.DeepCopy(), nil
}

func (f *fakeAPI) NodeUID(context.Context, string) (types.UID, error) { return "node-a-uid", nil }

func (f *fakeAPI) Slices(context.Context, string, string) ([]resourceapi.ResourceSlice, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]resourceapi.ResourceSlice, len(f.slices))
	for i := range f.slices {
		f.slices[i].DeepCopyInto(&out[i])
	}
	return out, nil
}

func (f *fakeAPI) CreateSlice(_ context.Context, s *resourceapi.ResourceSlice) (*resourceapi.ResourceSlice, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created++
	c := f.store(s)
	c.Name = fmt.Sprintf("%s%d", s.GenerateName, f.created)
	f.slices = append(f.slices, *c)
	f.writes = append(f.writes, "create "+c.Name)
	return c.DeepCopy(), nil
}

func (f *fakeAPI) UpdateSlice(_ context.Context, s *resourceapi.ResourceSlice) (*resourceapi.ResourceSlice, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.slices {
		if f.slices[i].Name == s.Name {
			f.slices[i] = *f.store(s)
			f.writes = append(f.writes, fmt.Sprintf("update %s generation %d", s.Name, s.Spec.Pool.Generation))
			return f.slices[i].DeepCopy(), nil
		}
	}
	return nil, errors.New("not found")
}

func dial(t *testing.T, path string) *grpc.ClientConn {
	t.Helper()
	var conn *grpc.ClientConn
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket %s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The socket appears (bind) a moment before the plugin accepts on it (listen): a
	// call waits for the connection rather than fail in between.
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// The kubelet's side of the plugin, over its sockets: the plugin watcher registers it,
// claims are prepared (read from the API server the first time only, a replaced or
// unknown claim refused alone), unprepared, and the NR1's health streamed, in each API
// version the plugin offers.
func TestKubeletSeesThePlugin(t *testing.T) {
	dir := t.TempDir()
	kubelet := filepath.Join(dir, "kubelet")
	if err := os.MkdirAll(filepath.Join(kubelet, "plugins_registry"), 0o750); err != nil {
		t.Fatal(err)
	}
	d := testDriver(t, dir)
	mon := latest.New(healthy())
	d.health = mon
	api := &fakeAPI{claims: map[string]*resourceapi.ResourceClaim{
		"ml/resnet50-nr1": claim("c1", "resnet50-nr1", map[resourceapi.QualifiedName]string{"computeDMA": "3Mi", "dockerPartition": "2392Mi", "hvQueues": "7"}),
		"ml/renewed":      claim("c9", "renewed", map[resourceapi.QualifiedName]string{"hvQueues": "1"}),
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, api, kubelet) }()

	reg := registerapi.NewRegistrationClient(dial(t, filepath.Join(kubelet, "plugins_registry", "nr1.neureality.ai-reg.sock")))
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	endpoint := filepath.Join(kubelet, "plugins", DriverName, "dra.sock")
	if info.Type != registerapi.DRAPlugin || info.Name != DriverName || info.Endpoint != endpoint ||
		fmt.Sprint(info.SupportedVersions) != "[v1.DRAPlugin v1beta1.DRAPlugin v1.DRAResourceHealth v1alpha1.DRAResourceHealth]" {
		t.Fatalf("plugin info %+v", info)
	}
	if d.Registered() {
		t.Fatal("registered before the kubelet said so")
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil || !d.Registered() {
		t.Fatalf("registration: %v, registered %v", err, d.Registered())
	}

	conn := dial(t, endpoint)
	plugin := drapbv1.NewDRAPluginClient(conn)
	prepare := &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{
		{Namespace: "ml", Name: "resnet50-nr1", Uid: "c1"},
		{Namespace: "ml", Name: "renewed", Uid: "c8"}, // the kubelet's is an older one
		{Namespace: "ml", Name: "gone", Uid: "c7"},
	}}
	resp, err := plugin.NodePrepareResources(ctx, prepare)
	if err != nil {
		t.Fatal(err)
	}
	c1 := resp.Claims["c1"]
	if c1.GetError() != "" || len(c1.GetDevices()) != 1 || c1.Devices[0].GetPoolName() != "node-a" || c1.Devices[0].GetDeviceName() != DeviceName ||
		c1.Devices[0].GetShareId() != "0b0dc1" || fmt.Sprint(c1.Devices[0].GetCdiDeviceIds()) != "[neureality.ai/nr1=c1-0b0dc1]" ||
		fmt.Sprint(c1.Devices[0].GetRequestNames()) != "[nr1]" {
		t.Fatalf("c1: %+v", c1)
	}
	if e := resp.Claims["c8"].GetError(); e == "" || !strings.Contains(e, "replaced") {
		t.Errorf("a replaced claim: %q", e)
	}
	if e := resp.Claims["c7"].GetError(); e == "" || !strings.Contains(e, "not found") {
		t.Errorf("an unknown claim: %q", e)
	}
	// The kubelet asks again after its restart, through the older API too: answered from
	// the checkpoint, without reading the claim.
	reads := api.reads
	old, err := drapbv1beta1.NewDRAPluginClient(conn).NodePrepareResources(ctx, &drapbv1beta1.NodePrepareResourcesRequest{Claims: []*drapbv1beta1.Claim{{Namespace: "ml", Name: "resnet50-nr1", Uid: "c1"}}})
	if err != nil || old.Claims["c1"].GetError() != "" || len(old.Claims["c1"].GetDevices()) != 1 || api.reads != reads {
		t.Fatalf("v1beta1 prepare again: %+v %v (claims read %d times, then %d)", old, err, reads, api.reads)
	}
	un, err := plugin.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{{Namespace: "ml", Name: "resnet50-nr1", Uid: "c1"}, {Uid: "never"}}})
	if err != nil || un.Claims["c1"].GetError() != "" || un.Claims["never"].GetError() != "" {
		t.Fatalf("unprepare %+v %v", un, err)
	}
	if _, ok := d.store.Get("c1"); ok {
		t.Error("unprepared claim still prepared")
	}

	// Health, through v1 at once and on a fault, and through v1alpha1 (the same reports
	// converted by the kubelet's API package).
	v1, err := drahealthv1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := v1.Recv()
	if err != nil {
		t.Fatal(err)
	}
	dev := first.GetDevices()[0]
	if dev.GetHealth() != drahealthv1.HealthStatus_HEALTHY || dev.GetDevice().GetPoolName() != "node-a" || dev.GetDevice().GetDeviceName() != DeviceName || dev.GetHealthCheckTimeoutSeconds() <= 20 {
		t.Errorf("first health report %v", dev)
	}
	sick := healthy()
	sick[nr1.HypervisorQueue] = device.Status{Reason: "queue device gone"}
	mon.Publish(time.Now(), sick)
	next, err := v1.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if dev := next.GetDevices()[0]; dev.GetHealth() != drahealthv1.HealthStatus_UNHEALTHY || !strings.Contains(dev.GetMessage(), "queue device gone") {
		t.Errorf("after the fault %v", dev)
	}
	alpha, err := drahealthv1alpha1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealthv1alpha1.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := alpha.Recv(); err != nil || r.GetDevices()[0].GetHealth() != drahealthv1alpha1.HealthStatus_UNHEALTHY {
		t.Errorf("v1alpha1 health report %v %v", r, err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Gone with the plugin: the kubelet sees it deregistered.
	if _, err := os.Stat(filepath.Join(kubelet, "plugins_registry", "nr1.neureality.ai-reg.sock")); !os.IsNotExist(err) {
		t.Errorf("registration socket left: %v", err)
	}
}

// The node's slice is created once, owned by the node; left alone while the NR1 is
// what it says; updated, tainted, when the NR1 fails; and a slice left beside it by an
// interrupted run is outdated by a newer pool generation.
func TestSliceFollowsTheNR1(t *testing.T) {
	d := testDriver(t, t.TempDir())
	api := &fakeAPI{}
	ctx := context.Background()
	ok := healthy()
	for range 2 {
		if err := d.ensureSlice(ctx, api, ok); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(api.writes) != "[create node-a-nr1.neureality.ai-1]" {
		t.Fatalf("writes %v", api.writes)
	}
	s := api.slices[0]
	if s.Spec.NodeName == nil || *s.Spec.NodeName != "node-a" || s.Spec.Pool.Name != "node-a" || s.Spec.Pool.ResourceSliceCount != 1 ||
		len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "node-a-uid" || s.OwnerReferences[0].Kind != "Node" || len(s.Spec.Devices[0].Taints) != 0 {
		t.Fatalf("slice %+v", s)
	}
	sick := healthy()
	sick[nr1.HypervisorQueue] = device.Status{Reason: "queue device gone"}
	if err := d.ensureSlice(ctx, api, sick); err != nil {
		t.Fatal(err)
	}
	if len(api.slices[0].Spec.Devices[0].Taints) != 1 || fmt.Sprint(api.writes[1:]) != "[update node-a-nr1.neureality.ai-1 generation 1]" {
		t.Fatalf("after the fault: writes %v, taints %+v", api.writes, api.slices[0].Spec.Devices[0].Taints)
	}
	stale := api.slices[0].DeepCopy()
	stale.Name, stale.Spec.Pool.Generation = "left-behind", 4
	api.slices = append(api.slices, *stale)
	if err := d.ensureSlice(ctx, api, ok); err != nil {
		t.Fatal(err)
	}
	if got := api.writes[len(api.writes)-1]; got != "update left-behind generation 4" && got != "update node-a-nr1.neureality.ai-1 generation 5" {
		t.Fatalf("with a slice left behind: %v", api.writes)
	}
	writes := len(api.writes)
	if err := d.ensureSlice(ctx, api, ok); err != nil || len(api.writes) != writes {
		t.Errorf("a pool made whole again was written again: %v %v", api.writes, err)
	}
}

// publish retries a failing API server and keeps the slice current on health changes.
func TestPublishFollowsHealth(t *testing.T) {
	d := testDriver(t, t.TempDir())
	mon := latest.New(healthy())
	d.health = mon
	api := &fakeAPI{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.publish(ctx, api); close(done) }()
	waitFor(t, func() bool { api.mu.Lock(); defer api.mu.Unlock(); return len(api.writes) == 1 })
	sick := healthy()
	sick[nr1.CPUDMAMemory] = device.Status{Reason: "cpu dma gone"}
	mon.Publish(time.Now(), sick)
	waitFor(t, func() bool { api.mu.Lock(); defer api.mu.Unlock(); return len(api.writes) == 2 })
	cancel()
	<-done
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("not within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The API server stamps the taint of an unhealthy NR1 with the time it was added: the
// next check while the NR1 is still unhealthy finds the slice as it should be, and
// leaves it alone.
func TestSliceKeepsTheTaintsTime(t *testing.T) {
	d := testDriver(t, t.TempDir())
	api := &fakeAPI{}
	ctx := context.Background()
	sick := healthy()
	sick[nr1.HypervisorQueue] = device.Status{Reason: "queue device gone"}
	if err := d.ensureSlice(ctx, api, sick); err != nil {
		t.Fatal(err)
	}
	added := metav1.NewTime(time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC))
	api.slices[0].Spec.Devices[0].Taints[0].TimeAdded = &added
	writes := len(api.writes)
	if err := d.ensureSlice(ctx, api, sick); err != nil {
		t.Fatal(err)
	}
	if len(api.writes) != writes {
		t.Errorf("the slice written again for the taint's time alone: %v", api.writes[writes:])
	}
	// A device changed otherwise is written with its taint's time kept: the taint is the
	// same one.
	d.capacity[nr1.HypervisorQueue]--
	if err := d.ensureSlice(ctx, api, sick); err != nil {
		t.Fatal(err)
	}
	if len(api.writes) != writes+1 {
		t.Fatalf("a changed device not written: %v", api.writes)
	}
	if got := api.slices[0].Spec.Devices[0].Taints[0].TimeAdded; got == nil || !got.Equal(&added) {
		t.Errorf("the taint's time after an update: %v, want %v", got, added)
	}
}

// dropConsumableCapacity is what an API server without DRAConsumableCapacity stores.
func dropConsumableCapacity(s *resourceapi.ResourceSliceSpec) {
	for i := range s.Devices {
		s.Devices[i].AllowMultipleAllocations = nil
		for k, c := range s.Devices[i].Capacity {
			c.RequestPolicy = nil
			s.Devices[i].Capacity[k] = c
		}
	}
}

// An API server without consumable capacity stores the slice without the fields that
// make the NR1 shareable: the driver says so, in its log, on the Node and in its
// stage's health, once while it lasts, and what to do about it; and recovers once the
// slice is stored whole.
func TestSliceFieldsDroppedAreReported(t *testing.T) {
	d := testDriver(t, t.TempDir())
	var logged strings.Builder
	d.log = slog.New(slog.NewTextHandler(&logged, nil))
	api := &fakeAPI{drop: dropConsumableCapacity}
	ctx := context.Background()
	if err := d.SliceHealth(); err != nil {
		t.Fatalf("health before any slice: %v", err)
	}
	if err := d.ensureSlice(ctx, api, healthy()); err != nil {
		t.Fatal(err)
	}
	err := d.SliceHealth()
	if err == nil {
		t.Fatal("the stage is healthy with the NR1 stored unshareable")
	}
	for _, want := range []string{"spec.devices[0].allowMultipleAllocations", "spec.devices[0].capacity.computeDMA.requestPolicy",
		"spec.devices[0].capacity.hvQueues.requestPolicy", "DRAConsumableCapacity feature gate on the API server and the scheduler", "mode: devicePlugin"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "attributes") || strings.Contains(err.Error(), ".value") {
		t.Errorf("fields kept reported dropped: %v", err)
	}
	if len(api.events) != 1 || !strings.HasPrefix(api.events[0], "node-a Warning "+ReasonFieldsDropped+": ") || !strings.Contains(api.events[0], "DRAConsumableCapacity") {
		t.Errorf("events %q", api.events)
	}
	if !strings.Contains(logged.String(), "level=ERROR") || !strings.Contains(logged.String(), "allowMultipleAllocations") {
		t.Errorf("log %s", logged.String())
	}
	// The next check writes the slice again and it is dropped again: nothing new to say.
	if err := d.ensureSlice(ctx, api, healthy()); err != nil {
		t.Fatal(err)
	}
	if len(api.events) != 1 || d.SliceHealth() == nil {
		t.Errorf("after a second check: events %q, health %v", api.events, d.SliceHealth())
	}
	// The feature turned on: the slice is stored whole, and the stage is healthy again.
	api.drop = nil
	if err := d.ensureSlice(ctx, api, healthy()); err != nil {
		t.Fatal(err)
	}
	if err := d.SliceHealth(); err != nil {
		t.Errorf("with the slice stored whole: %v", err)
	}
	if err := d.ensureSlice(ctx, api, healthy()); err != nil || d.SliceHealth() != nil {
		t.Errorf("with the slice left as it is: %v %v", err, d.SliceHealth())
	}

	// An API server without device taints drops an unhealthy NR1's taint.
	api.drop = func(s *resourceapi.ResourceSliceSpec) { s.Devices[0].Taints = nil }
	sick := healthy()
	sick[nr1.HypervisorQueue] = device.Status{Reason: "queue device gone"}
	if err := d.ensureSlice(ctx, api, sick); err != nil {
		t.Fatal(err)
	}
	if err := d.SliceHealth(); err == nil || !strings.Contains(err.Error(), "spec.devices[0].taints") || !strings.Contains(err.Error(), "DRADeviceTaints") {
		t.Errorf("a dropped taint: %v", err)
	}
}

// A socket whose listener fails under its server while the driver runs is logged,
// then served again after a backoff on the driver's clock: the kubelet's plugin watcher
// finds the registration socket anew, and its client of the DRA socket reconnects.
func TestSocketServedAgain(t *testing.T) {
	dir := t.TempDir()
	kubelet := filepath.Join(dir, "kubelet")
	if err := os.MkdirAll(filepath.Join(kubelet, "plugins_registry"), 0o750); err != nil {
		t.Fatal(err)
	}
	d := testDriver(t, dir)
	logged := &syncbuf.Buffer{}
	d.log = slog.New(slog.NewTextHandler(logged, nil))
	clk := testingclock.NewFakeClock(time.Now())
	d.clock = clk
	var mu sync.Mutex
	listeners := map[string]net.Listener{}
	d.listen = func(path string) (net.Listener, error) {
		l, err := net.Listen("unix", path)
		if err == nil {
			mu.Lock()
			listeners[path] = l
			mu.Unlock()
		}
		return l, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, &fakeAPI{}, kubelet) }()

	regPath := filepath.Join(kubelet, "plugins_registry", "nr1.neureality.ai-reg.sock")
	draPath := filepath.Join(kubelet, "plugins", DriverName, "dra.sock")
	reg := registerapi.NewRegistrationClient(dial(t, regPath))
	if _, err := reg.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		t.Fatal(err)
	}
	plugin := drapbv1.NewDRAPluginClient(dial(t, draPath))
	unprepare := &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{{Uid: "never"}}}
	if _, err := plugin.NodeUnprepareResources(ctx, unprepare); err != nil {
		t.Fatal(err)
	}

	for _, path := range []string{regPath, draPath} {
		mu.Lock()
		failing := listeners[path]
		mu.Unlock()
		if err := failing.Close(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			return strings.Contains(logged.String(), "level=ERROR msg=\"DRA plugin socket served anew\" socket="+path+" why=\"its listener failed")
		})
		// Not before the backoff: the socket closed with its listener is not there.
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("%s served again before the backoff: %v", path, err)
		}
		// The backoff is waited on the driver's clock: stepped until it is served again.
		waitFor(t, func() bool {
			clk.Step(served.Backoff.Duration)
			return strings.Contains(logged.String(), "DRA plugin socket served again\" socket="+path)
		})
	}
	if !strings.Contains(logged.String(), "use of closed network connection") {
		t.Errorf("the listener's error not logged: %s", logged.String())
	}
	// The kubelet's clients, on the same paths.
	if _, err := registerapi.NewRegistrationClient(dial(t, regPath)).GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		t.Errorf("registration served again: %v", err)
	}
	if _, err := plugin.NodeUnprepareResources(ctx, unprepare); err != nil {
		t.Errorf("DRA service served again, through the kubelet's connection: %v", err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{regPath, draPath} {
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("socket %s left: %v", path, err)
		}
	}
}

// A prepare step tells what the claims consumed for the one pod they are all reserved
// for; claims shared by pods, a claim not prepared, or claims prepared before, tell
// nothing, since the pod's whole booking is not certain from them.
func TestPrepareTellsThePodsBooking(t *testing.T) {
	reserved := func(rc *resourceapi.ResourceClaim, pods ...string) *resourceapi.ResourceClaim {
		for _, p := range pods {
			rc.Status.ReservedFor = append(rc.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID(p)})
		}
		return rc
	}
	q := func(n string) map[resourceapi.QualifiedName]string {
		return map[resourceapi.QualifiedName]string{"computeDMA": "3Mi", "hvQueues": n}
	}
	for _, tc := range []struct {
		name   string
		claims []*resourceapi.ResourceClaim
		want   string
	}{
		{"one claim, one pod", []*resourceapi.ResourceClaim{reserved(claim("c1", "a", q("7")), "pa")}, "pa: 3/0/0/7"},
		{"two claims of one pod, one shared", []*resourceapi.ResourceClaim{reserved(claim("c1", "a", q("7")), "pa", "pb"), reserved(claim("c2", "b", q("2")), "pa")}, "pa: 6/0/0/9"},
		{"a claim shared by two pods only", []*resourceapi.ResourceClaim{reserved(claim("c1", "a", q("7")), "pa", "pb")}, ""},
		{"a claim not allocated", []*resourceapi.ResourceClaim{reserved(claim("c1", "a", q("7")), "pa"), reserved(&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{UID: "c3", Namespace: "ml", Name: "c"}}, "pa")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := testDriver(t, t.TempDir())
			var told []string
			d.OnPrepared(func(pod types.UID, a nr1.Amounts) {
				told = append(told, fmt.Sprintf("%s: %d/%d/%d/%d", pod, a[0], a[1], a[2], a[3]))
			})
			api := &fakeAPI{claims: map[string]*resourceapi.ResourceClaim{}}
			req := &drapbv1.NodePrepareResourcesRequest{}
			for _, rc := range tc.claims {
				api.claims[rc.Namespace+"/"+rc.Name] = rc
				req.Claims = append(req.Claims, &drapbv1.Claim{Namespace: rc.Namespace, Name: rc.Name, Uid: string(rc.UID)})
			}
			s := &draService{d: d, api: api}
			if _, err := s.NodePrepareResources(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(told, ","); got != tc.want {
				t.Fatalf("told %q, want %q", got, tc.want)
			}
			told = nil
			if _, err := s.NodePrepareResources(context.Background(), req); err != nil || len(told) != 0 {
				t.Fatalf("prepared again: told %q (%v), want nothing", told, err)
			}
		})
	}
}
