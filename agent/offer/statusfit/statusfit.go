// SPDX-License-Identifier: Apache-2.0

package statusfit

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// MaxRequestBytes is the API server's limit on a request's body: a status update past
// it is refused ("Request entity too large").
const MaxRequestBytes = 3 << 20

// Budget is what the entries may take of a status update: the rest of it (conditions,
// the containers' states, the patch's own keys) takes a few KiB, and a CG told of too
// soon is better than one not told.
const Budget = MaxRequestBytes - 64<<10

// Sizes of the kubelet's status entries, as JSON: a device's is at most
// {"resourceID":"abc","health":"Unhealthy"}, and a comma (the device plugin's IDs have at
// most three characters; a device that turns unhealthy makes its entry two bytes
// longer); a resource's is {"name":"…","resources":[]}, and a comma.
const (
	deviceBytes   = len(`{"resourceID":"abc","health":"Unhealthy"},`)
	resourceBytes = len(`{"name":"","resources":[]},`)
)

// Reason is the Event's reason.
const Reason = "NR1StatusTooLarge"

// StatusBytes is the most the kubelet's entries for a CG's device-plugin units take in
// its pod status: one per unit of each container the kubelet lists (its regular
// containers and sidecars).
func StatusBytes(cg *view.CG) int64 {
	var n int64
	for _, c := range cg.Containers {
		if c.AllocationSource != view.FromPodResources {
			continue
		}
		for _, r := range nr1.All {
			if u := int64(c.Allocation[r]); u > 0 {
				n += int64(resourceBytes+len(r.Name())) + u*int64(deviceBytes)
			}
		}
	}
	return n
}

// Gates says whether the kubelet writes resource health into pod statuses, and why it
// is thought so; err is why it is not known (on is then the default).
type Gates func(ctx context.Context) (on bool, why string, err error)

// Events records an Event on a pod.
type Events interface {
	Event(namespace, pod, uid, eventType, reason, message string)
}

// gatesMaxAge is how long the kubelet's gates read are trusted: they change only with a
// kubelet restart.
const gatesMaxAge = time.Minute

// gatesTimeout bounds a reading of the gates: one that does not end in time is unknown,
// and no later reading starts while it runs, so nothing read can hold the checker or the
// agent's stop.
const gatesTimeout = 5 * time.Second

// Checker checks each CG once.
type Checker struct {
	gates   Gates
	events  Events // nil: only logged
	log     *slog.Logger
	gauge   prometheus.Gauge
	health  prometheus.Gauge
	unknown prometheus.Gauge
	now     func() time.Time

	reading atomic.Bool // a reading of the gates under way

	mu      sync.Mutex
	checked map[string]bool // CG UID → its status cannot be written
	read    time.Time       // when the gates were last read
	on      bool            // what they said, and why
	why     string
	failed  string // why the last reading failed, "" when it did not
}

// New returns a checker; events may be nil.
func New(gates Gates, events Events, log *slog.Logger) *Checker {
	return &Checker{gates: gates, events: events, log: log, checked: map[string]bool{}, now: time.Now,
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nr1_cgs_status_too_large",
			Help: "CGs on the node whose NR1 device-plugin booking makes a pod status the kubelet cannot write (its resource health on, an entry per unit): their pods show no status",
		}),
		health: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nr1_kubelet_resource_health",
			Help: "1 when the kubelet writes resource health into pod statuses (its ResourceHealthStatus feature gate on, or not set or not known: its default since 1.36), an entry per NR1 device-plugin unit; 0 when it is off",
		}),
		unknown: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nr1_kubelet_gates_unknown",
			Help: "1 when the kubelet's feature gates could not be read (the agent's log says why): its resource health is then taken to be on, its default",
		}),
	}
}

// Collectors are the gauges of CGs whose status cannot be written, of the kubelet's
// resource health, and of its gates unknown.
func (c *Checker) Collectors() []prometheus.Collector {
	return []prometheus.Collector{c.gauge, c.health, c.unknown}
}

// Samples gives the latest sample and a channel closed at the next.
type Samples interface {
	Load() (*view.Sample, <-chan struct{})
}

// Run checks the CGs of every new sample until ctx ends.
func (c *Checker) Run(ctx context.Context, samples Samples) {
	var last *view.Sample
	for {
		snap, changed := samples.Load()
		if snap != nil && snap != last {
			last = snap
			cgs := make([]*view.CG, len(snap.CGs))
			for i, cg := range snap.CGs {
				cgs[i] = cg.CG
			}
			c.Check(ctx, cgs)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// Check checks the CGs not checked yet whose allocation is known, and forgets those gone.
// The gates are read with no lock held.
func (c *Checker) Check(ctx context.Context, cgs []*view.CG) {
	c.mu.Lock()
	stale := c.read.IsZero() || c.now().Sub(c.read) >= gatesMaxAge
	c.mu.Unlock()
	if stale {
		c.readGates(ctx)
	}
	var past []*view.CG
	c.mu.Lock()
	present := make(map[string]bool, len(cgs))
	for _, cg := range cgs {
		present[cg.UID] = true
		if _, done := c.checked[cg.UID]; done || !cg.AllocationKnown {
			continue
		}
		if StatusBytes(cg) > Budget {
			past = append(past, cg)
			continue
		}
		c.checked[cg.UID] = false
	}
	c.mu.Unlock()
	// Read afresh for a CG past the budget (rare): the kubelet may have been restarted
	// with other gates since the last reading.
	if len(past) > 0 {
		c.readGates(ctx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cg := range past {
		c.checked[cg.UID] = c.check(cg)
	}
	over := 0
	for uid, tooLarge := range c.checked {
		switch {
		case !present[uid]:
			delete(c.checked, uid)
		case tooLarge:
			over++
		}
	}
	c.gauge.Set(float64(over))
}

// readGates reads the kubelet's gates into the gauges and the checker, within
// gatesTimeout; it is called with no lock held.
func (c *Checker) readGates(ctx context.Context) {
	type reading struct {
		on  bool
		why string
		err error
	}
	if !c.reading.CompareAndSwap(false, true) {
		c.store(true, "", fmt.Errorf("a reading of the kubelet's feature gates started earlier has not ended"))
		return
	}
	done := make(chan reading, 1)
	go func() {
		on, why, err := c.gates(ctx)
		// Cleared before the result is handed over, so a Check that follows the one
		// waiting here never finds this reading still under way.
		c.reading.Store(false)
		done <- reading{on, why, err}
	}()
	timer := time.NewTimer(gatesTimeout)
	defer timer.Stop()
	select {
	case r := <-done:
		c.store(r.on, r.why, r.err)
	case <-timer.C:
		c.store(true, "", fmt.Errorf("the kubelet's feature gates were not read within %s", gatesTimeout))
	case <-ctx.Done():
	}
}

// store keeps a reading of the gates; err says why they are not known, on then the
// default.
func (c *Checker) store(on bool, why string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if why == "" {
			why = fmt.Sprintf("the kubelet's feature gates could not be read (%v), and %s is on by default since Kubernetes 1.36", err, "ResourceHealthStatus")
		}
		if err.Error() != c.failed {
			c.log.Warn("the kubelet's feature gates are unknown: its resource health is taken to be on, its default", "err", err)
		}
		c.failed = err.Error()
	} else {
		c.failed = ""
	}
	if on && (c.read.IsZero() || !c.on) {
		c.log.Warn("the kubelet writes a pod status entry per NR1 unit: a CG booking most of the node gets no status, and a kubelet restart with the node booked stalls its device manager; turn its resource health off (README, Big CGs) or use DRA mode", "gates", why)
	}
	c.read, c.on, c.why = c.now(), on, why
	c.health.Set(map[bool]float64{true: 1, false: 0}[on])
	c.unknown.Set(map[bool]float64{true: 1, false: 0}[err != nil])
}

// check tells of a CG past the budget, unless the kubelet's resource health is off; it
// is called with c.mu held.
func (c *Checker) check(cg *view.CG) bool {
	size := StatusBytes(cg)
	if !c.on {
		return false
	}
	msg := fmt.Sprintf("this pod books %s through the device plugin, one device per unit: the kubelet's resource health is on (%s), "+
		"so its status would carry an entry per device, about %.2f MiB, more than fits the API server's %d MiB limit on a status update; the pod will show no status and cannot be deleted cleanly. "+
		"Turn the kubelet's feature gates ResourceHealthStatus and ResourceHealthStatusMessage off, or offer the NR1 through DRA (mode: dra)",
		booking(cg.Allocation), c.why, float64(size)/(1<<20), MaxRequestBytes>>20)
	c.log.Warn("a CG's pod status cannot be written", "namespace", cg.Namespace, "pod", cg.Name, "statusBytes", size, "gates", c.why)
	if c.events != nil {
		c.events.Event(cg.Namespace, cg.Name, cg.UID, "Warning", Reason, msg)
	}
	return true
}

// booking names what a CG books, e.g. "100000 MB of compute_dma_memory, 1 queue of ai_hypervisor_queue".
func booking(a nr1.Amounts) string {
	var parts []string
	for _, r := range nr1.All {
		if a[r] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s of %s", a[r], r.Unit(), r.Short()))
		}
	}
	return strings.Join(parts, ", ")
}
