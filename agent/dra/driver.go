package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
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

	helper atomic.Pointer[kubeletplugin.Helper]
}

// New returns the driver of node's NR1, of capacity, described by attributes.
func New(node string, capacity nr1.Amounts, attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, cdi CDI, store *Store, health HealthSource, log *slog.Logger) *Driver {
	return &Driver{node: node, capacity: capacity, attributes: attributes, cdi: cdi, store: store, health: health, log: log}
}

// Run registers the plugin with the kubelet under kubeletDir and publishes the node's
// ResourceSlice, again whenever the NR1's health changes (an unhealthy NR1 is tainted),
// until ctx ends.
func (d *Driver) Run(ctx context.Context, kube kubernetes.Interface, kubeletDir string) error {
	dataDir := filepath.Join(kubeletDir, "plugins", DriverName)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return fmt.Errorf("DRA kubelet plugin %s: %w", DriverName, err)
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(DriverName), kubeletplugin.KubeClient(kube), kubeletplugin.NodeName(d.node),
		kubeletplugin.RegistrarDirectoryPath(filepath.Join(kubeletDir, "plugins_registry")),
		kubeletplugin.PluginDataDirectoryPath(dataDir))
	if err != nil {
		return fmt.Errorf("DRA kubelet plugin %s: %w", DriverName, err)
	}
	d.helper.Store(helper)
	defer helper.Stop()
	for {
		h, changed := d.health.Load()
		if err := helper.PublishResources(ctx, d.Resources(h)); err != nil {
			d.log.Error("publishing the NR1's ResourceSlice", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// Registered says whether the kubelet has registered the plugin.
func (d *Driver) Registered() bool {
	h := d.helper.Load()
	return h != nil && h.RegistrationStatus() != nil && h.RegistrationStatus().PluginRegistered
}

// Resources is the node's pool: one slice, the NR1.
func (d *Driver) Resources(h device.Health) resourceslice.DriverResources {
	healthy, reason := overall(h)
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.node: {Slices: []resourceslice.Slice{{Devices: []resourceapi.Device{Device(d.capacity, d.attributes, healthy, reason)}}}},
	}}
}

// overall is the NR1's health: healthy when every resource is.
func overall(h device.Health) (bool, string) {
	for _, r := range nr1.All {
		if !h[r].Healthy {
			return false, r.Short() + ": " + h[r].Reason
		}
	}
	return true, ""
}

// PrepareResourceClaims prepares each claim's shares of the NR1: idempotent, a claim
// prepared already (before a kubelet or agent restart) is answered as it was.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, rc := range claims {
		c, ok := d.store.Get(rc.UID)
		if ok {
			// The checkpoint outlives a reboot, the CDI directory (a tmpfs) may not: the
			// runtime needs the spec to start the container.
			if err := d.cdi.Ensure(c); err != nil {
				out[rc.UID] = kubeletplugin.PrepareResult{Err: err}
				continue
			}
		} else {
			var err error
			if c, err = d.prepare(rc); err != nil {
				d.log.Warn("DRA claim not prepared", "namespace", rc.Namespace, "claim", rc.Name, "err", err)
				out[rc.UID] = kubeletplugin.PrepareResult{Err: err}
				continue
			}
			d.log.Info("DRA claim prepared", "namespace", rc.Namespace, "claim", rc.Name, "uid", rc.UID, "amounts", c.Amounts().String())
		}
		out[rc.UID] = result(c, d.node)
	}
	return out, nil
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
		a, err := Amounts(r.ConsumedCapacity)
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
func result(c Claim, pool string) kubeletplugin.PrepareResult {
	res := kubeletplugin.PrepareResult{Devices: make([]kubeletplugin.Device, 0, len(c.Shares))}
	for _, s := range c.Shares {
		dev := kubeletplugin.Device{Requests: []string{s.Request}, PoolName: pool, DeviceName: DeviceName, CDIDeviceIDs: []string{s.CDIDevice}}
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
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
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
	return out, nil
}

// HandleError logs what the plugin's background work met (publishing the slice).
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	d.log.Error("DRA plugin: "+msg, "err", err, "recoverable", errors.Is(err, kubeletplugin.ErrRecoverable))
}

// healthResend is how often the NR1's health is reported when it does not change: the
// kubelet takes a report older than 30 s as unknown.
const healthResend = 20 * time.Second

// WatchHealthStatus reports the NR1's health to the kubelet, which shows it in the
// status of the pods using it: at once, on every change, and every healthResend.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	tick := time.NewTicker(healthResend)
	defer tick.Stop()
	for {
		h, changed := d.health.Load()
		healthy, reason := overall(h)
		status := kubeletplugin.HealthStatusHealthy
		if !healthy {
			status = kubeletplugin.HealthStatusUnhealthy
		}
		report := kubeletplugin.DeviceHealthReport{Devices: []kubeletplugin.DeviceHealth{{
			PoolName: d.node, DeviceName: DeviceName, Health: status, Message: reason, LastUpdated: time.Now(),
		}}}
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}
