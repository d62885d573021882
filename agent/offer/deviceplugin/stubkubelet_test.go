// SPDX-License-Identifier: Apache-2.0

package deviceplugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// stubKubelet plays the kubelet's side of the device-plugin API over a real socket: it
// takes registrations and, like the kubelet, then opens ListAndWatch on the plugin.
type stubKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	t      *testing.T
	dir    string
	server *grpc.Server

	mu       sync.Mutex
	refuse   map[string]int // registrations to refuse, by resource name
	attempts map[string]int // registrations asked for, refused ones included
	requests []*pluginapi.RegisterRequest
	lists    map[string][]*pluginapi.ListAndWatchResponse
	conns    []*grpc.ClientConn
	changed  chan struct{}
}

func startStubKubelet(t *testing.T, dir string) *stubKubelet {
	t.Helper()
	return startRefusingKubelet(t, dir, nil)
}

// startRefusingKubelet starts a stub kubelet that refuses the first refuse[name]
// registrations of the resource name.
func startRefusingKubelet(t *testing.T, dir string, refuse map[string]int) *stubKubelet {
	t.Helper()
	k := &stubKubelet{t: t, dir: dir, refuse: refuse, attempts: map[string]int{},
		lists: map[string][]*pluginapi.ListAndWatchResponse{}, changed: make(chan struct{})}
	// The socket is made aside and renamed into place already listening: a real
	// kubelet's appears a moment before it accepts, and a registration caught in between
	// is refused, which a test asks for with refuse instead.
	aside := filepath.Join(filepath.Dir(dir), KubeletSocketName+".new")
	lis, err := net.Listen("unix", aside)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Rename(aside, filepath.Join(dir, KubeletSocketName)); err != nil {
		t.Fatal(err)
	}
	k.server = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(k.server, k)
	go func() { _ = k.server.Serve(lis) }()
	t.Cleanup(k.stop)
	return k
}

// stop is what a kubelet restart does first: its socket goes away.
func (k *stubKubelet) stop() {
	k.server.Stop()
	_ = os.Remove(filepath.Join(k.dir, KubeletSocketName))
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.conns {
		_ = c.Close()
	}
	k.conns = nil
}

func (k *stubKubelet) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.mu.Lock()
	k.attempts[req.ResourceName]++
	refused := k.attempts[req.ResourceName] <= k.refuse[req.ResourceName]
	k.mu.Unlock()
	if refused {
		return nil, status.Errorf(codes.Unavailable, "registration of %s refused by the test", req.ResourceName)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	client := pluginapi.NewDevicePluginClient(conn)
	stream, err := client.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	k.mu.Lock()
	k.requests = append(k.requests, req)
	k.conns = append(k.conns, conn)
	k.notifyLocked()
	k.mu.Unlock()
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			k.mu.Lock()
			k.lists[req.ResourceName] = append(k.lists[req.ResourceName], resp)
			k.notifyLocked()
			k.mu.Unlock()
		}
	}()
	return &pluginapi.Empty{}, nil
}

func (k *stubKubelet) notifyLocked() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// waitFor waits until cond, evaluated under the stub's lock after each change, holds.
func (k *stubKubelet) waitFor(timeout time.Duration, what string, cond func() bool) {
	k.t.Helper()
	deadline := time.After(timeout)
	for {
		k.mu.Lock()
		ok, changed := cond(), k.changed
		k.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			k.t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

// registeredNames lists the resource names registered so far, in order.
func (k *stubKubelet) registeredNames() []string {
	names := make([]string, 0, len(k.requests))
	for _, r := range k.requests {
		names = append(names, r.ResourceName)
	}
	return names
}

func (k *stubKubelet) lastList(resource string) *pluginapi.ListAndWatchResponse {
	l := k.lists[resource]
	if len(l) == 0 {
		return nil
	}
	return l[len(l)-1]
}
