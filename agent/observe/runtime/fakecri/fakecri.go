// SPDX-License-Identifier: Apache-2.0

// Package fakecri is a CRI runtime service for tests of one package: pods and containers
// held in memory, served over real gRPC on a unix socket, with events the test controls.
package fakecri

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Container is a fake container.
type Container struct {
	ID, SandboxID, Name, Image string
	State                      runtimeapi.ContainerState
	PID                        int
	CgroupsPath                string
	Annotations                map[string]string
	CreatedAt                  int64
	// Attempt is the kubelet's restart count of the container.
	Attempt uint32
	// CDIDevices are the CDI devices the kubelet gave the container, in containerd's
	// copy of its CRI config.
	CDIDevices []string
	// Mounts are the runtime spec's mounts, destination → source.
	Mounts map[string]string
	// CRIO answers the verbose info in CRI-O's layout: no CRI config, so no CDI
	// devices, and the runtime spec with its mounts.
	CRIO bool
	// Info, when set, is the verbose info answered as is, instead of containerd's layout.
	Info string
	// NoInfo answers the verbose status without the runtime's info.
	NoInfo bool
}

// Sandbox is a fake pod sandbox.
type Sandbox struct {
	ID, UID, Namespace, Name string
	Ready                    bool
	// CreatedAt is in nanoseconds since the epoch; zero unless set.
	CreatedAt int64
}

// Server is the fake runtime.
type Server struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	Socket string
	// NoEvents makes GetContainerEvents answer Unimplemented, as containerd 1.6 does.
	NoEvents bool

	mu         sync.Mutex
	sandboxes  map[string]*Sandbox
	containers map[string]*Container
	streams    map[chan *runtimeapi.ContainerEventResponse]chan error
	grpc       *grpc.Server
	calls      map[string]int
	// removedSandboxes remembers deleted sandboxes so their events are about sandboxes.
	removedSandboxes map[string]bool
	imageSizes       map[string]uint64
	writable         map[string]uint64
	statsErr         map[string]error
	listStatsErr     error
	noWritable       map[string]bool
	unsized          map[string]bool
	sizedAt          map[string]time.Time
	// streamsChanged is closed, and replaced, when a stream opens or ends.
	streamsChanged chan struct{}
}

// New returns a fake runtime to be served on socket.
func New(socket string) *Server {
	return &Server{Socket: socket, sandboxes: map[string]*Sandbox{}, containers: map[string]*Container{},
		streams: map[chan *runtimeapi.ContainerEventResponse]chan error{}, streamsChanged: make(chan struct{}), calls: map[string]int{}, removedSandboxes: map[string]bool{},
		imageSizes: map[string]uint64{}, writable: map[string]uint64{}, statsErr: map[string]error{}, noWritable: map[string]bool{}, unsized: map[string]bool{}, sizedAt: map[string]time.Time{}}
}

// Start serves on the socket.
func (s *Server) Start() error {
	_ = os.Remove(s.Socket)
	lis, err := net.Listen("unix", s.Socket)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.grpc = grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(s.grpc, s)
	runtimeapi.RegisterImageServiceServer(s.grpc, images{s: s})
	srv := s.grpc
	s.mu.Unlock()
	go func() { _ = srv.Serve(lis) }()
	return nil
}

// Stop ends the server as a crashing runtime would: connections and streams drop.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.grpc
	s.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// Calls reports how many times method was called.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

func (s *Server) count(method string) {
	s.mu.Lock()
	s.calls[method]++
	s.mu.Unlock()
}

// PutSandbox adds a ready sandbox, emitting its event unless silent.
func (s *Server) PutSandbox(sb Sandbox, silent bool) {
	sb.Ready = true
	s.mu.Lock()
	s.sandboxes[sb.ID] = &sb
	s.mu.Unlock()
	if !silent {
		s.Emit(sb.ID, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	}
}

// DropSandbox removes a sandbox and its containers.
func (s *Server) DropSandbox(id string, silent bool) {
	s.mu.Lock()
	delete(s.sandboxes, id)
	s.removedSandboxes[id] = true
	for cid, c := range s.containers {
		if c.SandboxID == id {
			delete(s.containers, cid)
		}
	}
	s.mu.Unlock()
	if !silent {
		s.Emit(id, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	}
}

// PutContainer adds a running container, emitting CREATED and STARTED unless silent.
func (s *Server) PutContainer(c Container, silent bool) {
	if c.State == 0 {
		c.State = runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	if c.CreatedAt == 0 {
		c.CreatedAt = time.Now().UnixNano()
	}
	s.mu.Lock()
	s.containers[c.ID] = &c
	s.mu.Unlock()
	if !silent {
		s.Emit(c.ID, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
		s.Emit(c.ID, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	}
}

// ExitContainer marks a container exited.
func (s *Server) ExitContainer(id string, silent bool) {
	s.mu.Lock()
	if c, ok := s.containers[id]; ok {
		c.State = runtimeapi.ContainerState_CONTAINER_EXITED
		c.PID = 0
	}
	s.mu.Unlock()
	if !silent {
		s.Emit(id, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	}
}

// DropContainer deletes a container.
func (s *Server) DropContainer(id string, silent bool) {
	s.mu.Lock()
	delete(s.containers, id)
	s.mu.Unlock()
	if !silent {
		s.Emit(id, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	}
}

// Emit sends an event about id to every open stream.
func (s *Server) Emit(id string, typ runtimeapi.ContainerEventType) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := &runtimeapi.ContainerEventResponse{ContainerId: id, ContainerEventType: typ, CreatedAt: time.Now().UnixNano()}
	if sb, ok := s.sandboxes[id]; ok {
		ev.PodSandboxStatus = sandboxStatus(sb)
	} else if c, ok := s.containers[id]; ok {
		if sb, ok := s.sandboxes[c.SandboxID]; ok {
			ev.PodSandboxStatus = sandboxStatus(sb)
		}
	} else if s.removedSandboxes[id] {
		// A deleted sandbox's event still names it as the sandbox.
		ev.PodSandboxStatus = &runtimeapi.PodSandboxStatus{Id: id}
	}
	for ch := range s.streams {
		ch <- ev
	}
}

// WaitStream waits until an event stream is open: events emitted before then reach
// nobody.
func (s *Server) WaitStream(ctx context.Context) error {
	for {
		s.mu.Lock()
		n, changed := len(s.streams), s.streamsChanged
		s.mu.Unlock()
		if n > 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("no event stream opened: %w", ctx.Err())
		}
	}
}

func (s *Server) streamsChangedLocked() {
	close(s.streamsChanged)
	s.streamsChanged = make(chan struct{})
}

// BreakStreams ends every event stream with an error, as a runtime restart would.
func (s *Server) BreakStreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch, errc := range s.streams {
		errc <- status.Error(codes.Unavailable, "stream broken by test")
		delete(s.streams, ch)
	}
	s.streamsChangedLocked()
}

func sandboxStatus(sb *Sandbox) *runtimeapi.PodSandboxStatus {
	state := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if sb.Ready {
		state = runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return &runtimeapi.PodSandboxStatus{Id: sb.ID, State: state, CreatedAt: sb.CreatedAt,
		Metadata: &runtimeapi.PodSandboxMetadata{Uid: sb.UID, Namespace: sb.Namespace, Name: sb.Name}}
}

// Version answers as a runtime named fake.
func (s *Server) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	s.count("Version")
	return &runtimeapi.VersionResponse{RuntimeName: "fake", RuntimeVersion: "1.0", RuntimeApiVersion: "v1"}, nil
}

// ListPodSandbox lists the sandboxes.
func (s *Server) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	s.count("ListPodSandbox")
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &runtimeapi.ListPodSandboxResponse{}
	for _, sb := range s.sandboxes {
		st := sandboxStatus(sb)
		resp.Items = append(resp.Items, &runtimeapi.PodSandbox{Id: sb.ID, Metadata: st.Metadata, State: st.State, CreatedAt: st.CreatedAt})
	}
	return resp, nil
}

// ListContainers lists the containers, filtered by ID when asked.
func (s *Server) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	s.count("ListContainers")
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &runtimeapi.ListContainersResponse{}
	for _, c := range s.containers {
		if id := req.GetFilter().GetId(); id != "" && id != c.ID {
			continue
		}
		resp.Containers = append(resp.Containers, &runtimeapi.Container{
			Id: c.ID, PodSandboxId: c.SandboxID, Metadata: &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: c.Attempt},
			Image: &runtimeapi.ImageSpec{Image: c.Image}, ImageRef: c.Image, State: c.State, CreatedAt: c.CreatedAt,
		})
	}
	return resp, nil
}

// ContainerStatus answers with containerd's verbose info layout.
func (s *Server) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	s.count("ContainerStatus")
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[req.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %s not found", req.GetContainerId())
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{
		Id: c.ID, Metadata: &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: c.Attempt}, State: c.State, CreatedAt: c.CreatedAt,
		StartedAt: c.CreatedAt, Image: &runtimeapi.ImageSpec{Image: c.Image}, ImageRef: c.Image, Annotations: c.Annotations,
	}}
	if req.GetVerbose() && !c.NoInfo {
		cdi := make([]map[string]string, 0, len(c.CDIDevices))
		for _, name := range c.CDIDevices {
			cdi = append(cdi, map[string]string{"name": name})
		}
		mounts := make([]map[string]string, 0, len(c.Mounts))
		for dst, src := range c.Mounts {
			mounts = append(mounts, map[string]string{"destination": dst, "type": "bind", "source": src})
		}
		spec := map[string]any{"linux": map[string]any{"cgroupsPath": c.CgroupsPath}, "mounts": mounts}
		layout := map[string]any{"pid": c.PID, "sandboxID": c.SandboxID, "config": map[string]any{"CDI_devices": cdi}, "runtimeSpec": spec}
		if c.CRIO {
			layout = map[string]any{"pid": c.PID, "sandboxID": c.SandboxID, "runtimeSpec": spec, "privileged": false}
		}
		info, _ := json.Marshal(layout)
		resp.Info = map[string]string{"info": string(info)}
		if c.Info != "" {
			resp.Info["info"] = c.Info
		}
	}
	return resp, nil
}

// GetContainerEvents streams events until the client leaves or the test breaks it.
func (s *Server) GetContainerEvents(_ *runtimeapi.GetEventsRequest, stream grpc.ServerStreamingServer[runtimeapi.ContainerEventResponse]) error {
	s.count("GetContainerEvents")
	if s.NoEvents {
		return status.Error(codes.Unimplemented, "no events here")
	}
	ch := make(chan *runtimeapi.ContainerEventResponse, 64)
	errc := make(chan error, 1)
	s.mu.Lock()
	s.streams[ch] = errc
	s.streamsChangedLocked()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.streams, ch)
		s.streamsChangedLocked()
		s.mu.Unlock()
	}()
	for {
		select {
		case ev := <-ch:
			if err := stream.Send(ev); err != nil {
				return fmt.Errorf("sending event: %w", err)
			}
		case err := <-errc:
			return err
		case <-stream.Context().Done():
			return nil
		}
	}
}
