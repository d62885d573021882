// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Amount is an NR1 amount of every resource, exported as one gauge family per base unit:
// <name>_bytes (the DMA memories and the docker partition) and <name>_queues. A family
// holding MB of one resource and queues of another would have no unit for its name, and
// a sum over its resources would add them up. Each series keeps its resource label, so
// that it joins with the other families by resource.
type Amount struct {
	family [nr1.NumResources]*prometheus.Desc // each resource's; one per base unit
}

// NewAmount describes the families of name. help is a format whose one verb reads the
// family's unit and resources, e.g. "bytes (compute_dma_memory, cpu_dma_memory,
// docker_partition)". The series are labelled labels, then resource.
func NewAmount(name, help string, labels ...string) *Amount {
	labels = append(slices.Clip(labels), "resource")
	resources := map[string][]string{}
	for _, r := range nr1.All {
		resources[r.BaseUnit()] = append(resources[r.BaseUnit()], r.Short())
	}
	descs := map[string]*prometheus.Desc{}
	a := &Amount{}
	for _, r := range nr1.All {
		unit := r.BaseUnit()
		if descs[unit] == nil {
			descs[unit] = prometheus.NewDesc(name+"_"+unit, fmt.Sprintf(help, unit+" ("+strings.Join(resources[unit], ", ")+")"), labels, nil)
		}
		a.family[r] = descs[unit]
	}
	return a
}

// Describe sends each family once.
func (a *Amount) Describe(ch chan<- *prometheus.Desc) {
	for i, d := range a.family {
		if !slices.Contains(a.family[:i], d) {
			ch <- d
		}
	}
}

// Metric is r's series of v, in r's base unit, labelled labelValues (as NewAmount was
// given labels) and r.
func (a *Amount) Metric(r nr1.Resource, v nr1.Base, labelValues ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(a.family[r], prometheus.GaugeValue, float64(v), append(slices.Clip(labelValues), r.Short())...)
}
