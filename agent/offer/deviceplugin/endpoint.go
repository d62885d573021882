// SPDX-License-Identifier: Apache-2.0

package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// endpoint is one plugin's gRPC server on its socket in the kubelet's device-plugins dir.
// A served endpoint is never restarted: a new one replaces it.
type endpoint struct {
	pluginapi.UnimplementedDevicePluginServer
	plugin *Plugin
	socket string
	server *grpc.Server
	id     fileID        // the socket this endpoint created
	stop   chan struct{} // ends the ListAndWatch streams
	// streams counts open ListAndWatch streams: a kubelet connected to this endpoint.
	streams atomic.Int32
	// ended is closed when the server stops serving, serveErr then why: nil when closed,
	// the listener's failure otherwise.
	ended    chan struct{}
	serveErr error
}

// serve listens on socket with listen, replacing a stale file left there. A server
// whose listener fails says so on ended, when there is room: the manager then serves
// the plugin anew.
func serve(p *Plugin, socket string, listen func(network, address string) (net.Listener, error), ended chan<- struct{}) (*endpoint, error) {
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing stale socket %s: %w", socket, err)
	}
	lis, err := listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", socket, err)
	}
	id, err := identify(socket)
	if err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("socket %s: %w", socket, err)
	}
	// Allocate requests carry one ID per unit (about 250 KB for 50000 units): a receive
	// window that takes one in a single flight saves flow-control round trips.
	srv := grpc.NewServer(grpc.InitialWindowSize(1<<20), grpc.InitialConnWindowSize(1<<20), grpc.ForceServerCodec(codec{}))
	e := &endpoint{plugin: p, socket: socket, server: srv, id: id, stop: make(chan struct{}), ended: make(chan struct{})}
	pluginapi.RegisterDevicePluginServer(e.server, e)
	go func() {
		// Serve returns nil once the endpoint is closed, and an error only when its
		// listener fails: the socket may still be there, and nobody answers on it.
		e.serveErr = e.server.Serve(lis)
		close(e.ended)
		if e.serveErr != nil {
			select {
			case ended <- struct{}{}:
			default:
			}
		}
	}()
	return e, nil
}

// failed is why the server stopped serving while the endpoint was open; nil while it
// serves, or once it is closed.
func (e *endpoint) failed() error {
	select {
	case <-e.ended:
		return e.serveErr
	default:
		return nil
	}
}

// present reports whether the socket this endpoint created is still in place.
func (e *endpoint) present() bool {
	id, err := identify(e.socket)
	return err == nil && id == e.id
}

// close ends the streams and the server, and removes the socket if it is still ours.
func (e *endpoint) close() {
	close(e.stop)
	done := make(chan struct{})
	go func() { e.server.GracefulStop(); close(done) }()
	// Real time, not the manager's clock: this bounds how long a real gRPC server takes
	// to finish the RPCs in flight, which a test's clock cannot hurry.
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		e.server.Stop()
	}
	if e.present() {
		_ = os.Remove(e.socket)
	}
}

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
		Options:      &pluginapi.DevicePluginOptions{},
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
	return &pluginapi.DevicePluginOptions{}, nil
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

func (e *endpoint) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// fileID tells a file from the one that replaced it at the same path. The inode alone
// does not (a file system may give a new socket the inode of the one just removed), and
// the change time changes with a chmod: the birth time is what stays.
type fileID struct {
	ino   uint64
	btime unix.StatxTimestamp
}

func identify(path string) (fileID, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_INO|unix.STATX_BTIME, &st); err != nil {
		return fileID{}, fmt.Errorf("identifying %s: %w", path, err)
	}
	id := fileID{ino: st.Ino}
	if st.Mask&unix.STATX_BTIME != 0 {
		id.btime = st.Btime
	}
	return id, nil
}
