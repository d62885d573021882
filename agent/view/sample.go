// SPDX-License-Identifier: Apache-2.0

package view

import (
	"math"
	"strconv"
	"time"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Sample is one sample of the node.
type Sample struct {
	Taken  time.Time     `json:"taken"`
	Took   time.Duration `json:"took"`
	Source string        `json:"source"`
	// Inputs say how certain the attribution is.
	Inputs
	// PartitionRead is when the docker partition was last measured; zero until then.
	PartitionRead time.Time   `json:"partitionRead,omitzero"`
	CGs           []*Measured `json:"cgs"`
	// Unattributed is what processes outside every known container hold, in base units.
	Unattributed nr1.Usage `json:"unattributed"`
}

// Measured is one compute graph as sampled. Usage is in base units: bytes for the memory
// resources and the docker partition, handles for queues.
type Measured struct {
	*CG
	Usage nr1.Usage `json:"usage"`
	// Ratio is usage over allocation per resource; +Inf for usage with no allocation.
	Ratio        Ratio                `json:"ratio"`
	PerContainer map[string]nr1.Usage `json:"usageByContainer"`
	// UsageUncertain says why the usage is only a lower bound: the scan ran out of time
	// before it read all of the CG's processes. It is acted on only when even that
	// lower bound is over.
	UsageUncertain string `json:"usageUncertain,omitempty"`
	// UncertainCause names the cause of UsageUncertain (one of the Cause constants), and
	// UncertainOwn says whether it lies inside the CG: what it holds, how it is built,
	// what it shows the runtime. A cause of the node's (the scan's time, a cgroup or
	// namespace the agent cannot read) protects the CG; the CG's own never does.
	UncertainCause string `json:"uncertainCause,omitempty"`
	UncertainOwn   bool   `json:"uncertainOwn,omitempty"`
	// PastCap says, per resource, why the CG is over whatever it was given: a socket or
	// io_uring of it holds more distinct files of the resource than a scan counts.
	PastCap map[nr1.Resource]string `json:"pastCap,omitempty"`
	// Shared is what this pod and the others sharing a DRA claim with it hold together;
	// nil when it shares none.
	Shared *Shared `json:"shared,omitempty"`
	// PartitionUnknown says why the docker partition of this CG is not known: it was
	// not measured yet, or its measurement failed. Unknown is never zero.
	PartitionUnknown string `json:"partitionUnknown,omitempty"`
}

// Shared is what the pods sharing DRA claims hold together, against what they were
// given together. Each pod's own allocation counts a shared claim whole, since any
// one of them may use all of it; together they may not use it more than once. The
// docker partition is left to each pod's own judgement: pods running one image hold
// it once, which a sum of their measurements cannot tell.
type Shared struct {
	// Claims are the claims held by more than one of the pods, "namespace/name".
	Claims []string `json:"claims"`
	// Pods are the pods, "namespace/name", in the inventory's order.
	Pods []string `json:"pods"`
	// Allocation is each claim of theirs once, and what else each pod was given.
	Allocation nr1.Amounts `json:"allocation"`
	// Usage is the union of what their containers hold, in base units.
	Usage nr1.Usage `json:"usage"`
	Ratio Ratio     `json:"ratio"`
	// Uncertain says why Usage is only a lower bound: one of the pods' usage is.
	Uncertain string `json:"uncertain,omitempty"`
	// Members are the pods' samples, in the inventory's order.
	Members []*Measured `json:"-"`
}

var posInf = math.Inf(1)

// Fraction is usage over allocation; +Inf is usage over a zero allocation.
type Fraction float64

// MarshalJSON writes "+Inf" for usage over a zero allocation: JSON has no infinity.
func (f Fraction) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(f), 1) {
		return []byte(`"+Inf"`), nil
	}
	return strconv.AppendFloat(nil, float64(f), 'g', 6, 64), nil
}

// Ratio is usage over allocation, per resource.
type Ratio = nr1.PerResource[Fraction]

// Ratios divides usage (base units) by allocation (resource units) per resource. Usage
// with no allocation is over a zero allocation: +Inf. Except the docker partition of a
// pod given no NR1 resource at all: every pod's image sits in the partition, and only
// CGs are held to a partition budget; any other pod's is 0, not over.
func Ratios(usage nr1.Usage, allocation nr1.Amounts) Ratio {
	var r Ratio
	for _, res := range nr1.All {
		alloc := float64(res.InBase(allocation[res]))
		switch {
		case res == nr1.DockerPartition && allocation == nr1.Amounts{}:
		case alloc > 0:
			r[res] = Fraction(float64(usage[res]) / alloc)
		case usage[res] > 0:
			r[res] = Fraction(posInf)
		}
	}
	return r
}

// The causes of a CG's uncertain usage. The CG's own: handles it keeps in flight on its
// sockets past what a scan reads (CauseInFlight), io_urings holding more files than a
// scan reads (CauseRing), a process holding so many fds that walking them ran the scan
// out of time (CauseFDTable), more files removed from its writable layer and held open
// than a scan sizes (CauseUnlinked). The node's: queues held with no fd, which only the procfs
// scan, a node's fallback without BPF, cannot tell apart (CauseNoFD), the scan out of
// time (CauseScanTime, CauseInFlightTime), a cgroup (CauseNoCgroup) or network
// namespace (CauseNetNS) the agent cannot read, an io_uring of a kernel layout the
// agent does not know (CauseRingLayout).
const (
	CauseInFlight     = "in-flight"
	CauseRing         = "io-uring"
	CauseNoFD         = "no-fd"
	CauseScanTime     = "scan-time"
	CauseInFlightTime = "in-flight-time"
	CauseNoCgroup     = "no-cgroup"
	CauseNetNS        = "netns"
	CauseRingLayout   = "ring-layout"
	CauseFDTable      = "fd-table"
	CauseUnlinked     = "unlinked"
)

// OwnCause says whether a cause of uncertainty lies inside the CG.
func OwnCause(cause string) bool {
	switch cause {
	case CauseInFlight, CauseRing, CauseFDTable, CauseUnlinked:
		return true
	}
	return false
}
