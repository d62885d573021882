package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

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

	// mu serializes preparing and unpreparing: the checkpoint and the CDI specs are
	// written one claim at a time.
	mu         sync.Mutex
	registered atomic.Bool
}

// New returns the driver of node's NR1, of capacity, described by attributes.
func New(node string, capacity nr1.Amounts, attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, cdi CDI, store *Store, health HealthSource, log *slog.Logger) *Driver {
	return &Driver{node: node, capacity: capacity, attributes: attributes, cdi: cdi, store: store, health: health, log: log}
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

// PrepareResult is a claim's answer to the kubelet: a CDI device per share, or why the
// claim was not prepared.
type PrepareResult struct {
	Devices []PreparedDevice
	Err     error
}

// PreparedDevice is one share of the NR1 prepared for a claim's request.
type PreparedDevice struct {
	Requests             []string
	PoolName, DeviceName string
	CDIDeviceIDs         []string
	ShareID              *types.UID
}

// ClaimRef names a claim the kubelet unprepares.
type ClaimRef struct {
	UID             types.UID
	Namespace, Name string
}

// Prepared answers a claim prepared already (before a kubelet or agent restart) from
// the checkpoint, without asking the API server; ok is false for any other.
func (d *Driver) Prepared(uid types.UID) (PrepareResult, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.store.Get(uid)
	if !ok {
		return PrepareResult{}, false
	}
	// The checkpoint outlives a reboot, the CDI directory (a tmpfs) may not: the runtime
	// needs the spec to start the container.
	if err := d.cdi.Ensure(c); err != nil {
		return PrepareResult{Err: err}, true
	}
	return result(c, d.node), true
}

// PrepareResourceClaims prepares each claim's shares of the NR1: idempotent, a claim
// prepared already is answered as it was.
func (d *Driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) map[types.UID]PrepareResult {
	out := make(map[types.UID]PrepareResult, len(claims))
	for _, rc := range claims {
		if res, ok := d.Prepared(rc.UID); ok {
			out[rc.UID] = res
			continue
		}
		d.mu.Lock()
		c, err := d.prepare(rc)
		d.mu.Unlock()
		if err != nil {
			d.log.Warn("DRA claim not prepared", "namespace", rc.Namespace, "claim", rc.Name, "err", err)
			out[rc.UID] = PrepareResult{Err: err}
			continue
		}
		d.log.Info("DRA claim prepared", "namespace", rc.Namespace, "claim", rc.Name, "uid", rc.UID, "amounts", c.Amounts().String())
		out[rc.UID] = result(c, d.node)
	}
	return out
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

// result is the claim's answer to the kubelet: per share, its CDI device.
func result(c Claim, pool string) PrepareResult {
	res := PrepareResult{Devices: make([]PreparedDevice, 0, len(c.Shares))}
	for _, s := range c.Shares {
		dev := PreparedDevice{Requests: []string{s.Request}, PoolName: pool, DeviceName: DeviceName, CDIDeviceIDs: []string{s.CDIDevice}}
		if s.ShareID != "" {
			id := types.UID(s.ShareID)
			dev.ShareID = &id
		}
		res.Devices = append(res.Devices, dev)
	}
	return res
}

// UnprepareResourceClaims removes each claim's CDI spec and forgets it; a claim not
// prepared (again, or never) is no error.
func (d *Driver) UnprepareResourceClaims(_ context.Context, claims []ClaimRef) map[types.UID]error {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]error, len(claims))
	for _, o := range claims {
		c, ok := d.store.Get(o.UID)
		if !ok {
			out[o.UID] = nil
			continue
		}
		if err := d.cdi.Remove(c); err != nil {
			out[o.UID] = err
			continue
		}
		out[o.UID] = d.store.Remove(o.UID)
		d.log.Info("DRA claim unprepared", "namespace", c.Namespace, "claim", c.Name, "uid", c.UID)
	}
	return out
}

// healthResend is how often the NR1's health is reported when it does not change: the
// kubelet takes a report older than 30 s as unknown.
const healthResend = 20 * time.Second

// HealthReport is the NR1's health as the kubelet hears it.
type HealthReport struct {
	Healthy     bool
	Message     string
	LastUpdated time.Time
}

// WatchHealthStatus reports the NR1's health to the kubelet, which shows it in the
// status of the pods using it: at once, on every change, and every healthResend.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- HealthReport) error {
	tick := time.NewTicker(healthResend)
	defer tick.Stop()
	for {
		h, changed := d.health.Load()
		healthy, reason := overall(h)
		select {
		case <-ctx.Done():
			return nil
		case reports <- HealthReport{Healthy: healthy, Message: reason, LastUpdated: time.Now()}:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}
