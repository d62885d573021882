// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// API is what the driver asks of the API server: the claims the kubelet prepares, the
// node's ResourceSlice, and an Event on the node when the slice is not stored whole.
type API interface {
	Claim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)
	NodeUID(ctx context.Context, name string) (types.UID, error)
	Slices(ctx context.Context, node, driver string) ([]resourceapi.ResourceSlice, error)
	CreateSlice(ctx context.Context, s *resourceapi.ResourceSlice) (*resourceapi.ResourceSlice, error)
	UpdateSlice(ctx context.Context, s *resourceapi.ResourceSlice) (*resourceapi.ResourceSlice, error)
	NodeEvent(ctx context.Context, node, eventType, reason, message string) error
}

// Sockets of the plugin: the registration socket the kubelet's plugin watcher finds in
// plugins_registry, and the DRA socket in the plugin's data directory it then dials.
const (
	registrationSocket = DriverName + "-reg.sock"
	draSocket          = "dra.sock"
)

// Run serves the kubelet (registration, the DRA and health services) on sockets under
// kubeletDir and publishes the node's ResourceSlice, again whenever the NR1's health
// changes (an unhealthy NR1 is tainted) and every sliceResync, until ctx ends. It is
// the kubelet plugin API of k8s.io/kubelet served directly: the DRA helper library
// would bring a full clientset and its informers, a third of the agent's binary, for a
// driver with one device in one slice.
func (d *Driver) Run(ctx context.Context, api API, kubeletDir string) error {
	dataDir := filepath.Join(kubeletDir, "plugins", DriverName)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return fmt.Errorf("DRA kubelet plugin %s: %w", DriverName, err)
	}
	endpoint := filepath.Join(dataDir, draSocket)
	dra, err := d.serve(ctx, endpoint, func(s *grpc.Server) {
		svc := &draService{d: d, api: api}
		drapbv1.RegisterDRAPluginServer(s, svc)
		drapbv1beta1.RegisterDRAPluginServer(s, drapbv1beta1.V1ServerWrapper{DRAPluginServer: svc})
		health := &healthService{d: d}
		drahealthv1.RegisterDRAResourceHealthServer(s, health)
		drahealthv1alpha1.RegisterDRAResourceHealthServer(s, drahealthv1.V1ServerWrapper{Server: health})
	})
	if err != nil {
		return err
	}
	defer dra.Stop()
	// The registration socket last: the kubelet dials the DRA socket once it finds it.
	reg, err := d.serve(ctx, filepath.Join(kubeletDir, "plugins_registry", registrationSocket), func(s *grpc.Server) {
		registerapi.RegisterRegistrationServer(s, &registration{d: d, endpoint: endpoint})
	}, d.unregistered)
	if err != nil {
		return err
	}
	// Removing the socket tells the kubelet the plugin is gone; the next agent's is
	// registered anew.
	defer reg.Stop()
	d.publish(ctx, api)
	return nil
}

// registration answers the kubelet's plugin watcher.
type registration struct {
	registerapi.UnsafeRegistrationServer
	d        *Driver
	endpoint string
}

// services are the gRPC services the plugin offers, newest first; the kubelet picks
// the newest it knows.
var services = []string{drapbv1.DRAPluginService, drapbv1beta1.DRAPluginService, drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: DriverName, Endpoint: r.endpoint, SupportedVersions: services}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.d.registered.Store(st.PluginRegistered)
	if !st.PluginRegistered {
		r.d.log.Error("the kubelet refused the DRA plugin's registration", "err", st.Error)
		return nil, fmt.Errorf("registration refused: %s", st.Error)
	}
	r.d.log.Info("DRA plugin registered with the kubelet", "driver", DriverName)
	return &registerapi.RegistrationStatusResponse{}, nil
}

// draService is the DRA gRPC service the kubelet calls to prepare and unprepare claims.
type draService struct {
	drapbv1.UnsafeDRAPluginServer
	d   *Driver
	api API
}

// claimTimeout bounds reading a claim from the API server.
const claimTimeout = 10 * time.Second

// NodePrepareResources prepares each claim; a claim that fails has its error in the
// answer, the others are prepared. A claim prepared already is answered from the
// checkpoint: a kubelet restarting while the API server is away still starts its pods.
func (s *draService) NodePrepareResources(ctx context.Context, req *drapbv1.NodePrepareResourcesRequest) (*drapbv1.NodePrepareResourcesResponse, error) {
	resp := &drapbv1.NodePrepareResourcesResponse{Claims: make(map[string]*drapbv1.NodePrepareResourceResponse, len(req.GetClaims()))}
	var claims []*resourceapi.ResourceClaim
	for _, c := range req.GetClaims() {
		res, ok := s.d.Prepared(types.UID(c.GetUid()))
		if !ok {
			if rc, err := s.claim(ctx, c); err != nil {
				res = &drapbv1.NodePrepareResourceResponse{Error: err.Error()}
			} else if res = s.d.Prepare(rc); res.Error == "" {
				claims = append(claims, rc)
			}
		}
		resp.Claims[c.GetUid()] = res
	}
	if len(claims) == len(req.GetClaims()) {
		s.d.tellBooked(claims)
	}
	return resp, nil
}

// tellBooked tells what the claims of one prepare step consumed for the pod they are all
// reserved for, when there is one only: the kubelet prepares one pod's claims at a time,
// but a claim shared by pods names them all, and a pod whose booking is not certain is
// left to the samples.
func (d *Driver) tellBooked(claims []*resourceapi.ResourceClaim) {
	book := d.booked.Load()
	if book == nil {
		return
	}
	var sum nr1.Amounts
	common := map[types.UID]int{}
	for _, rc := range claims {
		for _, ref := range rc.Status.ReservedFor {
			if ref.Resource == "pods" && ref.APIGroup == "" {
				common[ref.UID]++
			}
		}
		c, ok := d.store.Get(rc.UID)
		if !ok {
			return
		}
		a := c.Amounts()
		for _, r := range nr1.All {
			sum[r] += a[r]
		}
	}
	var pod types.UID
	for uid, n := range common {
		if n != len(claims) {
			continue
		}
		if pod != "" {
			return // more than one pod holds every claim
		}
		pod = uid
	}
	if pod != "" {
		(*book)(pod, sum)
	}
}

// claim reads the claim the kubelet names, and checks it is that one; prepare checks
// its allocation.
func (s *draService) claim(ctx context.Context, c *drapbv1.Claim) (*resourceapi.ResourceClaim, error) {
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	rc, err := s.api.Claim(ctx, c.GetNamespace(), c.GetName())
	switch {
	case err != nil:
		return nil, fmt.Errorf("claim %s/%s: %w", c.GetNamespace(), c.GetName(), err)
	case rc.UID != types.UID(c.GetUid()):
		return nil, fmt.Errorf("claim %s/%s is %s, not %s: replaced", c.GetNamespace(), c.GetName(), rc.UID, c.GetUid())
	}
	return rc, nil
}

// NodeUnprepareResources unprepares each claim; one never prepared is no error.
func (s *draService) NodeUnprepareResources(_ context.Context, req *drapbv1.NodeUnprepareResourcesRequest) (*drapbv1.NodeUnprepareResourcesResponse, error) {
	resp := &drapbv1.NodeUnprepareResourcesResponse{Claims: make(map[string]*drapbv1.NodeUnprepareResourceResponse, len(req.GetClaims()))}
	for _, c := range req.GetClaims() {
		a := &drapbv1.NodeUnprepareResourceResponse{}
		if err := s.d.Unprepare(types.UID(c.GetUid())); err != nil {
			a.Error = err.Error()
		}
		resp.Claims[c.GetUid()] = a
	}
	return resp, nil
}

// healthService streams the NR1's health to the kubelet.
type healthService struct {
	drahealthv1.UnsafeDRAResourceHealthServer
	d *Driver
}

// healthTimeout is how long the kubelet may keep a report before it takes the device's
// health as unknown: past the resend, with room for a late one.
const healthTimeout = 3 * healthResend

// NodeWatchResources reports the NR1's health to the kubelet, which shows it in the
// status of the pods using it: at once, on every change, and every healthResend.
func (h *healthService) NodeWatchResources(_ *drahealthv1.NodeWatchResourcesRequest, stream grpc.ServerStreamingServer[drahealthv1.NodeWatchResourcesResponse]) error {
	tick := h.d.clock.NewTicker(healthResend)
	defer tick.Stop()
	for {
		health, changed := h.d.health.Load()
		healthy, reason := overall(health)
		status := drahealthv1.HealthStatus_HEALTHY
		if !healthy {
			status = drahealthv1.HealthStatus_UNHEALTHY
		}
		err := stream.Send(&drahealthv1.NodeWatchResourcesResponse{Devices: []*drahealthv1.DeviceHealth{{
			Device:                    &drahealthv1.DeviceIdentifier{PoolName: h.d.node, DeviceName: DeviceName},
			Health:                    status,
			LastUpdatedTime:           time.Now().Unix(),
			HealthCheckTimeoutSeconds: int64(healthTimeout / time.Second),
			Message:                   reason,
		}}})
		if err != nil {
			return fmt.Errorf("NR1 health to the kubelet: %w", err)
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		case <-tick.C():
		}
	}
}
