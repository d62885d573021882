// SPDX-License-Identifier: Apache-2.0

package allocation

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// devices is how the kubelet reports n units of resource: one entry per device ID.
func devices(resource string, first, n int) []*podresourcesapi.ContainerDevices {
	out := make([]*podresourcesapi.ContainerDevices, n)
	for i := range out {
		out[i] = &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: []string{strconv.FormatInt(int64(first+i), 36)}}
	}
	return out
}

func TestTableListsEveryPodAndContainer(t *testing.T) {
	hh := &podresourcesapi.ContainerResources{Name: "health-handler"}
	hh.Devices = append(hh.Devices, devices(nr1.ComputeDMAMemory.Name(), 0, 3)...)
	hh.Devices = append(hh.Devices, devices(nr1.HypervisorQueue.Name(), 0, 7)...)
	hh.Devices = append(hh.Devices, devices("vendor.example/gpu", 0, 1)...)
	dra := &podresourcesapi.ContainerResources{Name: "graph", DynamicResources: []*podresourcesapi.DynamicResource{
		{ClaimName: "resnet50-nr1", ClaimNamespace: "ml", ClaimResources: []*podresourcesapi.ClaimResource{{DriverName: nr1.DRADriver, PoolName: "node-a", DeviceName: "nr1-0"}}},
		{ClaimName: "resnet50-gpu", ClaimNamespace: "ml", ClaimResources: []*podresourcesapi.ClaimResource{{DriverName: "gpu.example.com", PoolName: "node-a", DeviceName: "gpu-0"}}},
	}}
	resp := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		{Namespace: "ml", Name: "resnet50", Containers: []*podresourcesapi.ContainerResources{hh, dra}},
		{Namespace: "web", Name: "nginx", Containers: []*podresourcesapi.ContainerResources{{Name: "nginx"}}},
	}}
	raw, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	table, err := decodeTable(raw)
	if err != nil {
		t.Fatal(err)
	}

	got, listed := table.Pod("ml", "resnet50")
	if !listed {
		t.Fatal("resnet50 not listed")
	}
	if want := (nr1.Amounts{3, 0, 0, 7}); got["health-handler"].Units != want || len(got["health-handler"].Claims) != 0 {
		t.Errorf("health-handler = %+v, want %v and no claims", got["health-handler"], want)
	}
	// The NR1 driver's claim, not another driver's.
	if g, ok := got["graph"]; !ok || (g.Units != nr1.Amounts{}) || !slices.Equal(g.Claims, []ClaimKey{{"ml", "resnet50-nr1"}}) {
		t.Errorf("graph = %+v (present %v), want no units and the NR1 claim", g, ok)
	}
	// A pod given nothing is listed with zero: known to hold no allocation.
	if got, listed := table.Pod("web", "nginx"); !listed || !got["nginx"].equal(Listed{}) {
		t.Errorf("nginx = %v (listed %v), want listed with nothing", got, listed)
	}
	// A pod the kubelet did not list is unknown, not zero.
	if _, listed := table.Pod("ml", "not-listed"); listed {
		t.Error("a pod the kubelet did not list reads as listed")
	}
}

type lister struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	resp *podresourcesapi.ListPodResourcesResponse
}

func (l *lister) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return l.resp, nil
}

// Get answers as the kubelet does: the pod's resources, or an error for a pod it does
// not have.
func (l *lister) Get(_ context.Context, req *podresourcesapi.GetPodResourcesRequest) (*podresourcesapi.GetPodResourcesResponse, error) {
	for _, p := range l.resp.GetPodResources() {
		if p.GetNamespace() == req.GetPodNamespace() && p.GetName() == req.GetPodName() {
			return &podresourcesapi.GetPodResourcesResponse{PodResources: p}, nil
		}
	}
	return nil, fmt.Errorf("pod %s in namespace %s not found", req.GetPodName(), req.GetPodNamespace())
}

// serve serves resp as the kubelet's pod-resources API and returns a client of it.
func serve(t testing.TB, resp *podresourcesapi.ListPodResourcesResponse, capacity nr1.Amounts) *Client {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxSendMsgSize(64 << 20))
	podresourcesapi.RegisterPodResourcesListerServer(srv, &lister{resp: resp})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	c, err := Dial(socket, capacity)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Asking about a pod succeeds while the kubelet has it and fails once it does not.
func TestAskAboutOnePod(t *testing.T) {
	capacity := nr1.Amounts{116244, 512, 13417, 65536}
	resp := fullNode(capacity, 3)
	resp.PodResources = append(resp.PodResources, &podresourcesapi.PodResources{Namespace: "kube-system", Name: "nr1-agent-x"})
	c := serve(t, resp, capacity)
	table, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pod := table.anyPod()
	if pod != (PodKey{"kube-system", "nr1-agent-x"}) {
		t.Fatalf("asked about %v, want the pod holding nothing", pod)
	}
	if err := c.Ask(context.Background(), pod); err != nil {
		t.Errorf("asking about a listed pod: %v", err)
	}
	if err := c.Ask(context.Background(), PodKey{"kube-system", "gone"}); err == nil {
		t.Error("asking about a pod the kubelet does not have succeeded")
	}
}

// Get reads one pod's allocation per container, summed over the kubelet's entries as
// List's are, and fails for a pod the kubelet does not have.
func TestGetReadsOnePod(t *testing.T) {
	capacity := nr1.Amounts{116244, 512, 13417, 65536}
	hh := &podresourcesapi.ContainerResources{Name: "health-handler"}
	hh.Devices = append(hh.Devices, devices(nr1.DockerPartition.Name(), 0, 2392)...)
	hh.Devices = append(hh.Devices, devices(nr1.HypervisorQueue.Name(), 0, 7)...)
	resp := fullNode(capacity, 3)
	resp.PodResources = append(resp.PodResources, &podresourcesapi.PodResources{Namespace: "ml", Name: "resnet50",
		Containers: []*podresourcesapi.ContainerResources{hh, {Name: "graph"}}})
	c := serve(t, resp, capacity)
	got, err := c.Get(context.Background(), PodKey{"ml", "resnet50"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (nr1.Amounts{0, 0, 2392, 7}); got["health-handler"].Units != want || len(got) != 2 {
		t.Errorf("Get = %+v, want health-handler %v and graph with nothing", got, want)
	}
	if _, err := c.Get(context.Background(), PodKey{"ml", "gone"}); err == nil {
		t.Error("Get of a pod the kubelet does not have succeeded")
	}
}

// What one read costs the agent on a node whose capacity is allocated to 100 CGs: the
// whole table (List) against a question about one pod holding nothing (Ask), over the
// same socket.
func BenchmarkPodResources(b *testing.B) {
	capacity := nr1.Amounts{116244, 512, 13417, 65536}
	resp := fullNode(capacity, 100)
	resp.PodResources = append(resp.PodResources, &podresourcesapi.PodResources{Namespace: "kube-system", Name: "nr1-agent-x"})
	c := serve(b, resp, capacity)
	b.Run("List", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.List(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Ask", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := c.Ask(context.Background(), PodKey{"kube-system", "nr1-agent-x"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// fullNode is a node on which every unit of capacity is allocated, one unit per pod
// where the resource allows, as a busy node would have it.
func fullNode(capacity nr1.Amounts, pods int) *podresourcesapi.ListPodResourcesResponse {
	resp := &podresourcesapi.ListPodResourcesResponse{}
	for p := range pods {
		ctr := &podresourcesapi.ContainerResources{Name: "health-handler"}
		for _, r := range nr1.All {
			per := int64(capacity[r]) / int64(pods)
			first := int64(p) * per
			if p == pods-1 {
				per = int64(capacity[r]) - first
			}
			ctr.Devices = append(ctr.Devices, devices(r.Name(), int(first), int(per))...)
		}
		resp.PodResources = append(resp.PodResources, &podresourcesapi.PodResources{
			Namespace: "namespace-with-a-long-name", Name: "cg-" + strconv.Itoa(p) + "-with-a-long-generated-suffix",
			Containers: []*podresourcesapi.ContainerResources{ctr, {Name: "sidecar"}},
		})
	}
	return resp
}

// The List answer of a node with all of its capacity allocated reaches the client: the
// kubelet sends one entry per device ID, and a receive limit too small would leave
// every allocation unknown on exactly the busiest nodes.
func TestFullyAllocatedNodeIsReceived(t *testing.T) {
	for _, capacity := range []nr1.Amounts{
		{116244, 512, 13417, 65536},      // a typical NR1
		{238327, 238327, 238327, 238327}, // the largest capacity with 3-character IDs
	} {
		resp := fullNode(capacity, 100)
		size := proto.Size(resp)
		if size > MaxListBytes(capacity) {
			t.Fatalf("capacity %v: a full answer is %d bytes, over the receive limit %d", capacity, size, MaxListBytes(capacity))
		}
		t.Logf("capacity %v: full answer %.1f MiB, limit %.1f MiB", capacity, float64(size)/(1<<20), float64(MaxListBytes(capacity))/(1<<20))

		c := serve(t, resp, capacity)
		// What is checked is the size, not the speed: the race detector makes decoding
		// a million entries slow.
		c.timeout = 5 * time.Minute
		table, err := c.List(context.Background())
		if err != nil {
			t.Fatalf("capacity %v: %v", capacity, err)
		}
		var total nr1.Amounts
		for _, pod := range table {
			for _, a := range pod {
				total = nr1.Add(total, a.Units)
			}
		}
		if total != capacity {
			t.Errorf("capacity %v: the table sums to %v", capacity, total)
		}
	}
}

// tableOf is the table as the generated types decode the answer: the reference the
// wire decoder (tableCodec) is checked against.
func tableOf(resp *podresourcesapi.ListPodResourcesResponse) Table {
	t := Table{}
	for _, pod := range resp.GetPodResources() {
		key := PodKey{pod.GetNamespace(), pod.GetName()}
		containers := t[key]
		if containers == nil {
			containers = make(map[string]Listed, len(pod.GetContainers()))
			t[key] = containers
		}
		for _, ctr := range pod.GetContainers() {
			prev := containers[ctr.GetName()]
			containers[ctr.GetName()] = Listed{Units: nr1.Add(prev.Units, sumDevices(ctr.GetDevices())), Claims: append(prev.Claims, claimsOf(ctr.GetDynamicResources())...)}
		}
	}
	return t
}

func sumDevices(devs []*podresourcesapi.ContainerDevices) nr1.Amounts {
	var a nr1.Amounts
	for _, d := range devs {
		r, err := nr1.ParseResource(d.GetResourceName())
		if err != nil || r.Name() != d.GetResourceName() {
			continue // another vendor's resource
		}
		a[r] += nr1.Units(len(d.GetDeviceIds()))
	}
	return a
}

func claimsOf(dyn []*podresourcesapi.DynamicResource) []ClaimKey {
	var out []ClaimKey
	for _, d := range dyn {
		for _, r := range d.GetClaimResources() {
			if r.GetDriverName() == nr1.DRADriver {
				out = append(out, ClaimKey{d.GetClaimNamespace(), d.GetClaimName()})
				break
			}
		}
	}
	return out
}

// The wire decoder reads every answer the generated types read, to the same table.
func FuzzDecodeTable(f *testing.F) {
	hh := &podresourcesapi.ContainerResources{Name: "health-handler", CpuIds: []int64{2, 3}}
	hh.Devices = append(hh.Devices, devices(nr1.ComputeDMAMemory.Name(), 0, 3)...)
	hh.Devices = append(hh.Devices, &podresourcesapi.ContainerDevices{ResourceName: nr1.HypervisorQueue.Name(), DeviceIds: []string{"a", "b"},
		Topology: &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: 1}}}})
	hh.Devices = append(hh.Devices, devices("vendor.example/gpu", 0, 1)...)
	for _, resp := range []*podresourcesapi.ListPodResourcesResponse{
		{},
		fullNode(nr1.Amounts{40, 8, 20, 30}, 3),
		{PodResources: []*podresourcesapi.PodResources{
			{Namespace: "ml", Name: "resnet50", Containers: []*podresourcesapi.ContainerResources{hh, {Name: "graph"}, hh}},
			{Namespace: "ml", Name: "resnet50", Containers: []*podresourcesapi.ContainerResources{{Name: "graph", Devices: devices(nr1.CPUDMAMemory.Name(), 0, 2)}}},
			{Namespace: "web", Name: "nginx", Containers: []*podresourcesapi.ContainerResources{{Name: "nginx",
				DynamicResources: []*podresourcesapi.DynamicResource{{ClaimName: "c", ClaimNamespace: "web"}, {ClaimName: "n", ClaimNamespace: "web",
					ClaimResources: []*podresourcesapi.ClaimResource{{DriverName: nr1.DRADriver, PoolName: "vm", DeviceName: "nr1-0"}}}}}}},
		}},
	} {
		b, err := proto.Marshal(resp)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeTable(b)
		// The codec reads the buffers gRPC received, of any size, as decodeTable reads
		// them whole.
		var viaCodec Table
		cerr := (tableCodec{}).Unmarshal(chunked(b, 1+len(b)%7), &viaCodec)
		if (err == nil) != (cerr == nil) || (err == nil && !reflect.DeepEqual(got, viaCodec)) {
			t.Fatalf("decodeTable: %v, %v; the codec on buffers of %d bytes: %v, %v", got, err, 1+len(b)%7, viaCodec, cerr)
		}
		var resp podresourcesapi.ListPodResourcesResponse
		if proto.Unmarshal(b, &resp) != nil {
			return // the decoder may be more lenient; it must only not panic
		}
		if err != nil {
			t.Fatalf("the generated types read it, the decoder refuses it: %v", err)
		}
		if want := tableOf(&resp); !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded %v, the generated types read %v", got, want)
		}
	})
}

// Decoding the List answer of a node whose capacity is booked by 100 CGs: the generated
// types then the table (as before), against the wire decoder.
func BenchmarkDecodeFullNode(b *testing.B) {
	raw, err := proto.Marshal(fullNode(nr1.Amounts{116244, 512, 13417, 65536}, 100))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("answer: %.1f MiB", float64(len(raw))/(1<<20))
	b.Run("decoder=generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var resp podresourcesapi.ListPodResourcesResponse
			if err := proto.Unmarshal(raw, &resp); err != nil {
				b.Fatal(err)
			}
			_ = tableOf(&resp)
		}
	})
	b.Run("decoder=wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeTable(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	// As gRPC hands the answer over: in buffers of 16 KiB read from the socket.
	b.Run("decoder=codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var t Table
			if err := (tableCodec{}).Unmarshal(chunked(raw, 16<<10), &t); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// chunked is b in buffers of n bytes, as gRPC receives a message.
func chunked(b []byte, n int) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		k := min(n, len(b))
		s = append(s, mem.SliceBuffer(b[:k]))
		b = b[k:]
	}
	return s
}
