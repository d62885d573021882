// SPDX-License-Identifier: Apache-2.0

package deviceplugin

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

// BenchmarkListAndWatchEncode builds and encodes the compute-DMA list at node capacity,
// as a health change does, and reports its encoded size.
func BenchmarkListAndWatchEncode(b *testing.B) {
	capacity := int64(nodeCapacity[nr1.ComputeDMAMemory])
	var size int
	for b.Loop() {
		buf, err := proto.Marshal(buildList(capacity, true))
		if err != nil {
			b.Fatal(err)
		}
		size = len(buf)
	}
	b.ReportMetric(float64(size)/(1<<20), "MiB/list")
	b.ReportMetric(float64(ListSize(capacity, false))/(1<<20), "MiB/unhealthy-list")
}

func allocateRequest(n int) *pluginapi.AllocateRequest {
	ids := make([]string, n)
	var buf []byte
	for i := range ids {
		buf = appendID(buf[:0], int64(i))
		ids[i] = string(buf)
	}
	return &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}
}

// BenchmarkAllocate answers a 50000-unit compute-DMA request, in process and over the
// plugin's real gRPC socket as the kubelet calls it.
func BenchmarkAllocate(b *testing.B) {
	p := NewPlugin(nr1.ComputeDMAMemory, nodeCapacity[nr1.ComputeDMAMemory],
		[]device.ResolvedFile{resolved(b, nr1.ComputeDMAMemory, device.File{Path: "/dev/null"})}, device.NewMonitor(fixedProber{healthy()}, time.Hour, clock.RealClock{}, discard()))
	req := allocateRequest(50000)
	b.Run("in-process", func(b *testing.B) {
		for b.Loop() {
			if _, err := p.Allocate(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("grpc", func(b *testing.B) {
		socket := filepath.Join(b.TempDir(), "p.sock")
		l, err := net.Listen("unix", socket)
		if err != nil {
			b.Fatal(err)
		}
		_, srv := newEndpoint(p, socket)
		go func() { _ = srv.Serve(l) }()
		defer srv.Stop()
		conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", socket)
			}))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		client := pluginapi.NewDevicePluginClient(conn)
		for b.Loop() {
			if _, err := client.Allocate(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAllocateRequestDecode decodes a container's request for 100000 units, near the
// node's compute-DMA capacity, with the plugin's codec and with the generated protobuf.
func BenchmarkAllocateRequestDecode(b *testing.B) {
	wire, err := proto.Marshal(allocateRequest(100000))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req pluginapi.AllocateRequest
			if err := (codec{}).Unmarshal(wire, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req pluginapi.AllocateRequest
			if err := proto.Unmarshal(wire, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
