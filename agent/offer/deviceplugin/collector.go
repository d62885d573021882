// SPDX-License-Identifier: Apache-2.0

package deviceplugin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/neureality-sdk/nr1-agent/metrics"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

// State is what the device side of the agent knows at scrape time.
type State interface {
	Capacity() nr1.Amounts
	Health() device.Health
	Registered(r nr1.Resource) bool
	Registrations() int
}

// Collector exports capacity, health and device-plugin registration per resource; the
// capacities in bytes and queues, as the samples' amounts are.
type Collector struct {
	state                     State
	capacity, allocatable     *metrics.Amount
	healthy, registered, regs *prometheus.Desc
}

// NewCollector collects from state.
func NewCollector(state State) *Collector {
	return &Collector{
		state:       state,
		regs:        prometheus.NewDesc("nr1_kubelet_registrations_total", "Device-plugin registrations with the kubelet.", nil, nil),
		capacity:    metrics.NewAmount("nr1_capacity", "NR1 capacity of the node, in %s."),
		allocatable: metrics.NewAmount("nr1_allocatable", "NR1 capacity the node offers as allocatable, in %s: all of it while healthy, else 0."),
		healthy:     prometheus.NewDesc("nr1_device_healthy", "1 when the NR1 resource is healthy.", []string{"resource"}, nil),
		registered:  prometheus.NewDesc("nr1_device_plugin_registered", "1 when the resource's device plugin is registered with the kubelet.", []string{"resource"}, nil),
	}
}

// Describe sends the descriptors.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.regs
	c.capacity.Describe(ch)
	c.allocatable.Describe(ch)
	ch <- c.healthy
	ch <- c.registered
}

// Collect builds the series from the state now.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.regs, prometheus.CounterValue, float64(c.state.Registrations()))
	capacity, health := c.state.Capacity(), c.state.Health()
	for _, r := range nr1.All {
		ch <- c.capacity.Metric(r, r.InBase(capacity[r]))
		var allocatable nr1.Base
		if health[r].Healthy {
			allocatable = r.InBase(capacity[r])
		}
		ch <- c.allocatable.Metric(r, allocatable)
		ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, boolValue(health[r].Healthy), r.Short())
		ch <- prometheus.MustNewConstMetric(c.registered, prometheus.GaugeValue, boolValue(c.state.Registered(r)), r.Short())
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
