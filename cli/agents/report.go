// SPDX-License-Identifier: Apache-2.0

package agents

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Quantity is an amount in the resource's units (MB or queues), as the NR1 toolchain
// books it, or unknown (nil). The agents export amounts in bytes and queues.
type Quantity = *float64

// Node is one NR1 node as its agent reports it. When the agent could not be read, Error
// says why and nothing else is known.
type Node struct {
	Name  string `json:"node"`
	Agent string `json:"agent"`
	Error string `json:"error,omitempty"`
	// Mode is the enforcement mode: enforce or dry-run.
	Mode        string                    `json:"mode,omitempty"`
	Capacity    nr1.PerResource[Quantity] `json:"capacity"`
	Allocatable nr1.PerResource[Quantity] `json:"allocatable"`
	// Allocated sums the allocations of the CGs whose allocation is known; Used sums
	// what they hold and what processes outside every container hold (Unattributed).
	// Either is unknown when a CG's allocation or usage is.
	Allocated    nr1.PerResource[Quantity] `json:"allocated"`
	Used         nr1.PerResource[Quantity] `json:"used"`
	Unattributed nr1.PerResource[Quantity] `json:"unattributed"`
	CGs          []*CG                     `json:"cgs"`
}

// CG is one compute graph (pod) on the node.
type CG struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Node      string `json:"node"`
	// AllocationUnknown: the agent does not know what the CG was given, so it neither
	// measures it against an allocation nor acts on it.
	AllocationUnknown bool `json:"allocationUnknown,omitempty"`
	// UsageUncertain: the last scan could not read all of the CG's processes; what it
	// holds is not reported.
	UsageUncertain bool                      `json:"usageUncertain,omitempty"`
	Allocation     nr1.PerResource[Quantity] `json:"allocation"`
	Usage          nr1.PerResource[Quantity] `json:"usage"`
	Ratio          nr1.PerResource[Ratio]    `json:"ratio"`
	Containers     []Container               `json:"containers,omitempty"`
	// Enforcement lists the ladders under way for pods of this name: one, or for a
	// moment two when the pod was re-created while its predecessor's throttle is lifted.
	Enforcement []*Enforcement `json:"enforcement,omitempty"`
	// Gate is the budget gate's count of the CG's queues; nil where the gate does not
	// book it (prevention off, or the CG not booked yet).
	Gate *Gate `json:"gate,omitempty"`
}

// Gate is what the budget gate holds a CG to, counts it holding, and refused it.
type Gate struct {
	Booked  float64 `json:"booked"`
	Held    float64 `json:"held"`
	Refused float64 `json:"refused"`
}

// EnforcementOf is the ladder of the pod with uid, nil when none is under way.
func (c *CG) EnforcementOf(uid string) *Enforcement {
	for _, e := range c.Enforcement {
		if e.UID == uid {
			return e
		}
	}
	return nil
}

// Container is what one of a CG's containers was given and holds.
type Container struct {
	Name       string                    `json:"name"`
	Allocation nr1.PerResource[Quantity] `json:"allocation"`
	Usage      nr1.PerResource[Quantity] `json:"usage"`
}

// Enforcement is where a CG's ladders stand, when one is under way.
type Enforcement struct {
	UID       string                `json:"uid"`
	Throttled bool                  `json:"throttled,omitempty"`
	Ended     time.Time             `json:"ended,omitzero"`
	Rungs     nr1.PerResource[Rung] `json:"rungs"`
}

// Rung is one resource's ladder: over since Over, Steps taken, Next due at NextAt if
// the CG stays over, reset at ResetAt if it stays back under.
type Rung struct {
	Over    time.Time `json:"over,omitzero"`
	Steps   int       `json:"steps,omitempty"`
	Next    string    `json:"next,omitempty"`
	NextAt  time.Time `json:"nextAt,omitzero"`
	ResetAt time.Time `json:"resetAt,omitzero"`
}

// Ratio is usage over allocation; +Inf for usage with no allocation, NaN when unknown.
type Ratio float64

// MarshalJSON writes +Inf as the string "+Inf" and unknown as null: JSON has neither.
func (r Ratio) MarshalJSON() ([]byte, error) {
	switch f := float64(r); {
	case math.IsNaN(f):
		return []byte("null"), nil
	case math.IsInf(f, 1):
		return []byte(`"+Inf"`), nil
	default:
		return json.Marshal(f) //nolint:wrapcheck // a float always marshals
	}
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *Ratio) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "null":
		*r = Ratio(math.NaN())
		return nil
	case `"+Inf"`:
		*r = Ratio(math.Inf(1))
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("ratio %s: %w", b, err)
	}
	*r = Ratio(f)
	return nil
}

// Max is the CG's largest known ratio and its resource; NaN when none is known.
func (c *CG) Max() (Ratio, nr1.Resource) {
	best, at := Ratio(math.NaN()), nr1.Resource(0)
	for _, r := range nr1.All {
		if v := c.Ratio[r]; !math.IsNaN(float64(v)) && (math.IsNaN(float64(best)) || v > best) {
			best, at = v, r
		}
	}
	return best, at
}

// Parse reads one agent's metrics (the Prometheus text format) into its node's report.
func Parse(node, agent string, in io.Reader) (*Node, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(in)
	if err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", agent, err)
	}
	if fams["nr1_build_info"] == nil {
		return nil, fmt.Errorf("metrics of %s: no nr1_build_info: not an nr1-agent", agent)
	}
	n := &Node{Name: node, Agent: agent}
	cgs := map[[2]string]*CG{}
	// sampled marks the CGs of the agent's latest sample; a ladder's series alone
	// (a deleted pod whose throttle is being lifted) make no CG.
	sampled := map[*CG]bool{}
	seen := func(c *CG) *CG { sampled[c] = true; return c }
	cg := func(m *dto.Metric) *CG {
		k := [2]string{label(m, "namespace"), label(m, "pod")}
		c := cgs[k]
		if c == nil {
			c = &CG{Namespace: k[0], Pod: k[1], Node: node}
			for _, r := range nr1.All {
				c.Ratio[r] = Ratio(math.NaN())
			}
			cgs[k] = c
		}
		return c
	}
	amounts(fams, "nr1_capacity", func(_ *dto.Metric, r nr1.Resource, q Quantity) { n.Capacity[r] = q })
	amounts(fams, "nr1_allocatable", func(_ *dto.Metric, r nr1.Resource, q Quantity) { n.Allocatable[r] = q })
	amounts(fams, "nr1_unattributed_usage", func(_ *dto.Metric, r nr1.Resource, q Quantity) { n.Unattributed[r] = q })
	for _, m := range metrics(fams, "nr1_allocation_unknown") {
		seen(cg(m)).AllocationUnknown = true
	}
	for _, m := range metrics(fams, "nr1_usage_uncertain") {
		seen(cg(m)).UsageUncertain = true
	}
	for _, m := range metrics(fams, "nr1_enforcement_mode") {
		n.Mode = label(m, "mode")
	}
	amounts(fams, "nr1_cg_usage", func(m *dto.Metric, r nr1.Resource, q Quantity) { seen(cg(m)).Usage[r] = q })
	each(fams, "nr1_usage_ratio", func(m *dto.Metric, r nr1.Resource) { seen(cg(m)).Ratio[r] = Ratio(number(m)) })
	// A CG's allocation is the agent's own figure (a claim its containers share counted
	// once); an agent that exports none (older than nr1_cg_allocated) gives the sum of
	// its containers'.
	cgAllocated := map[*CG]bool{}
	amounts(fams, "nr1_cg_allocated", func(m *dto.Metric, r nr1.Resource, q Quantity) {
		c := seen(cg(m))
		cgAllocated[c] = true
		c.Allocation[r] = q
	})
	amounts(fams, "nr1_allocated", func(m *dto.Metric, r nr1.Resource, q Quantity) {
		c := seen(cg(m))
		container(c, label(m, "container")).Allocation[r] = q
		if !cgAllocated[c] {
			c.Allocation[r] = add(c.Allocation[r], q)
		}
	})
	amounts(fams, "nr1_usage", func(m *dto.Metric, r nr1.Resource, q Quantity) {
		container(seen(cg(m)), label(m, "container")).Usage[r] = q
	})
	enforcement := func(m *dto.Metric) *Enforcement {
		c, uid := cg(m), label(m, "uid")
		e := c.EnforcementOf(uid)
		if e == nil {
			e = &Enforcement{UID: uid}
			c.Enforcement = append(c.Enforcement, e)
		}
		return e
	}
	for _, m := range metrics(fams, "nr1_throttled") {
		enforcement(m).Throttled = true
	}
	for _, m := range metrics(fams, "nr1_enforcement_ended_timestamp_seconds") {
		enforcement(m).Ended = timestamp(m)
	}
	each(fams, "nr1_enforcement_over_since_timestamp_seconds", func(m *dto.Metric, r nr1.Resource) { enforcement(m).Rungs[r].Over = timestamp(m) })
	each(fams, "nr1_enforcement_steps_taken", func(m *dto.Metric, r nr1.Resource) {
		enforcement(m).Rungs[r].Steps = int(number(m))
	})
	each(fams, "nr1_enforcement_next_step_timestamp_seconds", func(m *dto.Metric, r nr1.Resource) {
		g := &enforcement(m).Rungs[r]
		g.Next, g.NextAt = label(m, "action"), timestamp(m)
	})
	each(fams, "nr1_enforcement_reset_timestamp_seconds", func(m *dto.Metric, r nr1.Resource) { enforcement(m).Rungs[r].ResetAt = timestamp(m) })
	gate := func(m *dto.Metric) *Gate {
		c := cg(m)
		if c.Gate == nil {
			c.Gate = &Gate{}
		}
		return c.Gate
	}
	for _, m := range metrics(fams, "nr1_gate_booked") {
		gate(m).Booked = number(m)
	}
	for _, m := range metrics(fams, "nr1_gate_held") {
		gate(m).Held = number(m)
	}
	for _, m := range metrics(fams, "nr1_gate_refused_total") {
		gate(m).Refused = number(m)
	}

	// The node's sums are unknown, never smaller, while any part of them is.
	var allocKnown, usedKnown nr1.PerResource[bool]
	for _, r := range nr1.All {
		n.Allocated[r], n.Used[r] = zero(), n.Unattributed[r]
		allocKnown[r], usedKnown[r] = true, n.Unattributed[r] != nil
	}
	for c := range sampled {
		n.CGs = append(n.CGs, c)
		if c.AllocationUnknown || c.UsageUncertain {
			// The agent exports neither figure for such a CG.
			allocKnown, usedKnown = nr1.PerResource[bool]{}, nr1.PerResource[bool]{}
			continue
		}
		for _, r := range nr1.All {
			// A container given nothing has no allocation series: known, and zero.
			c.Allocation[r] = add(zero(), c.Allocation[r])
			for i := range c.Containers {
				c.Containers[i].Allocation[r] = add(zero(), c.Containers[i].Allocation[r])
			}
			usedKnown[r] = usedKnown[r] && c.Usage[r] != nil
			n.Allocated[r] = add(n.Allocated[r], c.Allocation[r])
			n.Used[r] = add(n.Used[r], c.Usage[r])
		}
	}
	for _, r := range nr1.All {
		if !allocKnown[r] {
			n.Allocated[r] = nil
		}
		if !usedKnown[r] {
			n.Used[r] = nil
		}
	}
	sort.Slice(n.CGs, func(i, j int) bool {
		a, b := n.CGs[i], n.CGs[j]
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Pod < b.Pod
	})
	return n, nil
}

func metrics(fams map[string]*dto.MetricFamily, name string) []*dto.Metric {
	if f := fams[name]; f != nil {
		return f.GetMetric()
	}
	return nil
}

// each calls fn for every series of name whose resource label names an NR1 resource;
// a resource this version does not know is skipped.
func each(fams map[string]*dto.MetricFamily, name string, fn func(*dto.Metric, nr1.Resource)) {
	for _, m := range metrics(fams, name) {
		for _, r := range nr1.All {
			if r.Short() == label(m, "resource") {
				fn(m, r)
			}
		}
	}
}

// amounts calls fn for every series of the NR1 amount name with its value in the
// resource's units: the agent exports name_bytes and name_queues, each of the resources
// its unit counts, and kubectl nr1 shows MB and queues as the toolchain books them.
func amounts(fams map[string]*dto.MetricFamily, name string, fn func(*dto.Metric, nr1.Resource, Quantity)) {
	var units []string
	for _, r := range nr1.All {
		if !slices.Contains(units, r.BaseUnit()) {
			units = append(units, r.BaseUnit())
		}
	}
	for _, unit := range units {
		each(fams, name+"_"+unit, func(m *dto.Metric, r nr1.Resource) {
			if r.BaseUnit() == unit {
				v := number(m) / float64(r.UnitBytes())
				fn(m, r, &v)
			}
		})
	}
}

func container(c *CG, name string) *Container {
	for i := range c.Containers {
		if c.Containers[i].Name == name {
			return &c.Containers[i]
		}
	}
	c.Containers = append(c.Containers, Container{Name: name})
	return &c.Containers[len(c.Containers)-1]
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// number is a series' value, whatever its type: a gauge here, but untyped in a text
// that omits its TYPE line.
func number(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return m.GetUntyped().GetValue()
}

func timestamp(m *dto.Metric) time.Time {
	s := number(m)
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(math.Round(frac*1e9))).UTC()
}

func zero() Quantity { v := 0.0; return &v }

func add(a, b Quantity) Quantity {
	if b == nil {
		return a
	}
	if a == nil {
		v := *b
		return &v
	}
	v := *a + *b
	return &v
}
