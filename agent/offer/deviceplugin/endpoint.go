// SPDX-License-Identifier: Apache-2.0

package deviceplugin

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// endpoint is one serve of a plugin: its gRPC server on one socket in the kubelet's
// device-plugins dir (internal/served keeps it served). A socket served anew gets a new
// endpoint.
type endpoint struct {
	pluginapi.UnimplementedDevicePluginServer
	plugin *Plugin
	socket string
	stop   chan struct{} // ends the ListAndWatch streams
	// streams counts open ListAndWatch streams: a kubelet connected to this endpoint.
	streams atomic.Int32
}

// newEndpoint makes the server of p on socket.
func newEndpoint(p *Plugin, socket string) (*endpoint, *grpc.Server) {
	// Allocate requests carry one ID per unit (about 250 KB for 50000 units): a receive
	// window that takes one in a single flight saves flow-control round trips.
	srv := grpc.NewServer(grpc.InitialWindowSize(1<<20), grpc.InitialConnWindowSize(1<<20), grpc.ForceServerCodec(codec{}))
	e := &endpoint{plugin: p, socket: socket, stop: make(chan struct{})}
	pluginapi.RegisterDevicePluginServer(srv, e)
	return e, srv
}

// end ends the ListAndWatch streams, before the server stops.
func (e *endpoint) end() { close(e.stop) }

// register tells the kubelet listening on kubeletSocket about this endpoint.
func (e *endpoint) register(ctx context.Context, kubeletSocket string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to kubelet at %s: %w", kubeletSocket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(e.socket),
		ResourceName: e.plugin.Resource().Name(),
		Options:      e.plugin.options(),
	})
	if err != nil {
		// A kubelet (1.37) refuses a second registration at a socket path it is already
		// connected to. When it is connected to this very endpoint, the plugin is
		// registered; otherwise its old connection ends soon and a retry goes through.
		if strings.Contains(err.Error(), "already connected") && e.connected() {
			return nil
		}
		return fmt.Errorf("registering %s with kubelet at %s: %w", e.plugin.Resource().Name(), kubeletSocket, err)
	}
	return nil
}

func (e *endpoint) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return e.plugin.options(), nil
}

func (e *endpoint) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	e.streams.Add(1)
	defer e.streams.Add(-1)
	return e.plugin.ListAndWatch(stream, e.stop)
}

// connected reports whether a kubelet is reading this endpoint's device list.
func (e *endpoint) connected() bool { return e.streams.Load() > 0 }

func (e *endpoint) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return e.plugin.Allocate(req)
}

func (e *endpoint) PreStartContainer(ctx context.Context, _ *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	e.plugin.PreStart(ctx)
	return &pluginapi.PreStartContainerResponse{}, nil
}
