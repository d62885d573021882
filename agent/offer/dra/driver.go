// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
	"github.com/neureality-sdk/nr1-agent/nr1/manifest"
)

// HealthSource is the NR1's health as the device monitor publishes it.
type HealthSource interface {
	Load() (device.Health, <-chan struct{})
}

// Driver is the DRA kubelet plugin.
type Driver struct {
	node       string
	capacity   nr1.Amounts
	attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	cdi        CDI
	store      *Store
	health     HealthSource
	log        *slog.Logger
	// clock times the ResourceSlice's checks, the health resends and the restarts of a
	// failed server; listen makes its sockets.
	clock  clock.WithTicker
	listen func(path string) (net.Listener, error)
	// checkEvery is how often a served socket's path is checked; registrationGrace how
	// long the registration socket waits for the kubelet before it is served anew.
	checkEvery, registrationGrace time.Duration

	// mu serializes preparing and unpreparing: the checkpoint and the CDI specs are
	// written one claim at a time.
	mu         sync.Mutex
	registered atomic.Bool

	// booked hears of a pod's claims as they are prepared, before its containers run.
	booked atomic.Pointer[func(pod types.UID, a nr1.Amounts)]

	// sliceMu guards what the API server last dropped from the node's slice.
	sliceMu  sync.Mutex
	dropped  []string
	sliceErr error
}

// Options describe the node's NR1 as the driver offers it.
type Options struct {
	Node       string
	Capacity   nr1.Amounts
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	CDI        CDI
	// Store holds the prepared claims across the agent's restarts.
	Store  *Store
	Health HealthSource
	Log    *slog.Logger
}

// New returns the driver of the node's NR1; nothing is served until Run.
func New(o Options) *Driver {
	return &Driver{node: o.Node, capacity: o.Capacity, attributes: o.Attributes, cdi: o.CDI, store: o.Store, health: o.Health, log: o.Log,
		clock: clock.RealClock{}, checkEvery: defaultCheckEvery, registrationGrace: defaultRegistrationGrace}
}

// Registered says whether the kubelet has registered the plugin.
func (d *Driver) Registered() bool { return d.registered.Load() }

// overall is the NR1's health: healthy when every resource is.
func overall(h device.Health) (bool, string) {
	for _, r := range nr1.All {
		if !h[r].Healthy {
			return false, r.Short() + ": " + h[r].Reason
		}
	}
	return true, ""
}

// Prepare prepares the claim's shares of the NR1 and answers the kubelet with a CDI
// device per share, or why it was not prepared. It is idempotent: a claim prepared
// already is answered as it was.
func (d *Driver) Prepare(rc *resourceapi.ResourceClaim) *drapbv1.NodePrepareResourceResponse {
	d.mu.Lock()
	defer d.mu.Unlock()
	if res, ok := d.prepared(rc.UID); ok {
		return res
	}
	c, err := d.prepare(rc)
	if err != nil {
		d.log.Warn("DRA claim not prepared", "namespace", rc.Namespace, "claim", rc.Name, "err", err)
		return &drapbv1.NodePrepareResourceResponse{Error: err.Error()}
	}
	d.log.Info("DRA claim prepared", "namespace", rc.Namespace, "claim", rc.Name, "uid", rc.UID, "amounts", c.Amounts().String())
	return answer(c, d.node)
}

// OnPrepared has book told, at each prepare step that prepares claims of one pod only,
// what the pod's claims of the NR1 consumed, before the kubelet starts its containers.
func (d *Driver) OnPrepared(book func(pod types.UID, a nr1.Amounts)) { d.booked.Store(&book) }

// Prepared answers a claim prepared already (before a kubelet or agent restart) from
// the checkpoint, without the claim itself; ok is false for any other.
func (d *Driver) Prepared(uid types.UID) (res *drapbv1.NodePrepareResourceResponse, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.prepared(uid)
}

func (d *Driver) prepared(uid types.UID) (*drapbv1.NodePrepareResourceResponse, bool) {
	c, ok := d.store.Get(uid)
	if !ok {
		return nil, false
	}
	// The checkpoint outlives a reboot, the CDI directory (a tmpfs) may not: the runtime
	// needs the spec to start the container.
	if err := d.cdi.Ensure(c); err != nil {
		return &drapbv1.NodePrepareResourceResponse{Error: err.Error()}, true
	}
	return answer(c, d.node), true
}

// prepare reads the claim's allocation of this node's NR1, writes its CDI spec and
// records it.
func (d *Driver) prepare(rc *resourceapi.ResourceClaim) (Claim, error) {
	c := Claim{UID: rc.UID, Namespace: rc.Namespace, Name: rc.Name}
	if rc.Status.Allocation == nil {
		return Claim{}, errors.New("claim not allocated")
	}
	for _, r := range rc.Status.Allocation.Devices.Results {
		if r.Driver != DriverName {
			continue
		}
		if r.Pool != d.node || r.Device != DeviceName {
			return Claim{}, fmt.Errorf("request %s allocated %s/%s, not this node's NR1 %s/%s", r.Request, r.Pool, r.Device, d.node, DeviceName)
		}
		if r.ConsumedCapacity == nil {
			return Claim{}, fmt.Errorf("request %s: the allocation names no consumed capacity (the scheduler's DRAConsumableCapacity is off?): the whole NR1 is no CG's to take", r.Request)
		}
		a, err := manifest.Amounts(r.ConsumedCapacity)
		if err != nil {
			return Claim{}, fmt.Errorf("request %s: %w", r.Request, err)
		}
		s := Share{Request: r.Request, Amounts: a}
		if r.ShareID != nil {
			s.ShareID = string(*r.ShareID)
		}
		c.Shares = append(c.Shares, s)
	}
	if err := d.cdi.Write(&c); err != nil {
		return Claim{}, err
	}
	if err := d.store.Put(c); err != nil {
		_ = d.cdi.Remove(c)
		return Claim{}, err
	}
	return c, nil
}

// answer is a prepared claim's answer to the kubelet: per share, its CDI device.
func answer(c Claim, pool string) *drapbv1.NodePrepareResourceResponse {
	out := &drapbv1.NodePrepareResourceResponse{Devices: make([]*drapbv1.Device, 0, len(c.Shares))}
	for _, s := range c.Shares {
		// A subrequest ("nr1/small") is reported under its request.
		request, _, _ := strings.Cut(s.Request, "/")
		dev := &drapbv1.Device{RequestNames: []string{request}, PoolName: pool, DeviceName: DeviceName, CdiDeviceIds: []string{s.CDIDevice}}
		if s.ShareID != "" {
			dev.ShareId = &s.ShareID
		}
		out.Devices = append(out.Devices, dev)
	}
	return out
}

// Unprepare removes the claim's CDI spec and forgets it; a claim not prepared (again,
// or never) is no error.
func (d *Driver) Unprepare(uid types.UID) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.store.Get(uid)
	if !ok {
		return nil
	}
	if err := d.cdi.Remove(c); err != nil {
		return err
	}
	if err := d.store.Remove(uid); err != nil {
		return err
	}
	d.log.Info("DRA claim unprepared", "namespace", c.Namespace, "claim", c.Name, "uid", c.UID)
	return nil
}

// healthResend is how often the NR1's health is reported when it does not change,
// well within the timeout each report gives the kubelet.
const healthResend = 20 * time.Second
