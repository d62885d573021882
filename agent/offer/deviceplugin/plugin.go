// SPDX-License-Identifier: Apache-2.0

package deviceplugin

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

// HealthSource gives the NR1's health and a channel closed when it next changes.
type HealthSource interface {
	Load() (device.Health, <-chan struct{})
}

// Plugin is the resource logic of one device plugin, apart from its transport.
type Plugin struct {
	resource nr1.Resource
	capacity int64
	files    []device.ResolvedFile
	health   HealthSource
	// preStart, when set, is run before each container given the resource starts.
	preStart atomic.Pointer[func(ctx context.Context)]
}

// NewPlugin returns the plugin advertising capacity units of r, giving containers r's
// files among the NR1 files.
func NewPlugin(r nr1.Resource, capacity nr1.Units, files []device.ResolvedFile, health HealthSource) *Plugin {
	p := &Plugin{resource: r, capacity: int64(capacity), health: health}
	for _, f := range files {
		if f.Resource == r {
			p.files = append(p.files, f)
		}
	}
	return p
}

// OnPreStart has do run before each container given the resource starts: the kubelet
// then waits for it (PreStartContainer). Set before the plugin registers, since the
// kubelet reads that it is required at registration.
func (p *Plugin) OnPreStart(do func(ctx context.Context)) { p.preStart.Store(&do) }

// options are the plugin's options as the kubelet reads them.
func (p *Plugin) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{PreStartRequired: p.preStart.Load() != nil}
}

// PreStart runs what OnPreStart set, if anything. It never fails the container: what
// it does is best done before the container starts, never a reason not to start it.
func (p *Plugin) PreStart(ctx context.Context) {
	if do := p.preStart.Load(); do != nil {
		(*do)(ctx)
	}
}

// Resource is the resource the plugin advertises.
func (p *Plugin) Resource() nr1.Resource { return p.resource }

// List builds the ListAndWatch answer: one device per unit, all with the same health.
func (p *Plugin) List(healthy bool) *pluginapi.ListAndWatchResponse {
	return buildList(p.capacity, healthy)
}

func buildList(capacity int64, healthy bool) *pluginapi.ListAndWatchResponse {
	health := pluginapi.Unhealthy
	if healthy {
		health = pluginapi.Healthy
	}
	// One backing array for the IDs and one for the devices: a list is built only when
	// health changes, but it is large.
	ids := make([]byte, 0, capacity*3)
	ends := make([]int, capacity)
	for i := int64(0); i < capacity; i++ {
		ids = appendID(ids, i)
		ends[i] = len(ids)
	}
	all := string(ids)
	devs := make([]pluginapi.Device, capacity)
	ptrs := make([]*pluginapi.Device, capacity)
	start := 0
	for i := range devs {
		devs[i].ID = all[start:ends[i]]
		devs[i].Health = health
		ptrs[i] = &devs[i]
		start = ends[i]
	}
	return &pluginapi.ListAndWatchResponse{Devices: ptrs}
}

// Stream is the sending side of a ListAndWatch call.
type Stream interface {
	Send(*pluginapi.ListAndWatchResponse) error
	Context() context.Context
}

// ListAndWatch sends the device list, then a new one whenever the resource's health
// flips, until the stream ends or stop is closed.
func (p *Plugin) ListAndWatch(stream Stream, stop <-chan struct{}) error {
	sent := false
	var last bool
	for {
		h, changed := p.health.Load()
		healthy := h[p.resource].Healthy
		if !sent || healthy != last {
			if err := stream.Send(p.List(healthy)); err != nil {
				return fmt.Errorf("sending %s devices: %w", p.resource.Name(), err)
			}
			sent, last = true, healthy
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		case <-stop:
			return nil
		}
	}
}

// Allocate answers for each container with its budget in an environment variable and an
// annotation, and the resource's device files.
func (p *Plugin) Allocate(req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, 0, len(req.ContainerRequests))}
	for _, creq := range req.ContainerRequests {
		for _, id := range creq.DevicesIds {
			if _, ok := idIndex(id, p.capacity); !ok {
				return nil, status.Errorf(codes.InvalidArgument, "%s: unknown device ID %q", p.resource.Name(), id)
			}
		}
		units := strconv.Itoa(len(creq.DevicesIds))
		cresp := &pluginapi.ContainerAllocateResponse{
			Envs:        map[string]string{p.resource.EnvVar(): units},
			Annotations: map[string]string{p.resource.Annotation(): units},
		}
		if err := p.addFiles(cresp); err != nil {
			return nil, err
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	return resp, nil
}

// addFiles passes character devices as devices, which the runtime admits to the
// container's device cgroup, and regular files as bind mounts. A file gone or replaced
// since it was resolved fails the allocation: health reports it only at its next probe.
func (p *Plugin) addFiles(cresp *pluginapi.ContainerAllocateResponse) error {
	for _, f := range p.files {
		if id, err := device.Identify(f.Local); err != nil || id != f.Identity {
			return status.Errorf(codes.Unavailable, "%s: device file %s is not the file resolved at start (%v)", p.resource.Name(), f.Path, err)
		}
		if f.Char {
			cresp.Devices = append(cresp.Devices, &pluginapi.DeviceSpec{
				HostPath: f.Path, ContainerPath: f.InContainer(), Permissions: "rw",
			})
			continue
		}
		cresp.Mounts = append(cresp.Mounts, &pluginapi.Mount{HostPath: f.Path, ContainerPath: f.InContainer()})
	}
	return nil
}
