// SPDX-License-Identifier: Apache-2.0

package deviceplugin

import (
	"github.com/prometheus/client_golang/prometheus"

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

// Collector exports capacity, health and device-plugin registration per resource.
type Collector struct {
	state                                            State
	capacity, allocatable, healthy, registered, regs *prometheus.Desc
}

// NewCollector collects from state.
func NewCollector(state State) *Collector {
	return &Collector{
		state:       state,
		regs:        prometheus.NewDesc("nr1_kubelet_registrations_total", "Device-plugin registrations with the kubelet.", nil, nil),
		capacity:    prometheus.NewDesc("nr1_capacity", "NR1 capacity of the node, in the resource's units (MB or queues).", []string{"resource"}, nil),
		allocatable: prometheus.NewDesc("nr1_allocatable", "NR1 units the device plugin advertises as allocatable: the capacity while healthy, else 0.", []string{"resource"}, nil),
		healthy:     prometheus.NewDesc("nr1_device_healthy", "1 when the NR1 resource is healthy.", []string{"resource"}, nil),
		registered:  prometheus.NewDesc("nr1_device_plugin_registered", "1 when the resource's device plugin is registered with the kubelet.", []string{"resource"}, nil),
	}
}

// Describe sends the descriptors.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.regs
	ch <- c.capacity
	ch <- c.allocatable
	ch <- c.healthy
	ch <- c.registered
}

// Collect builds the series from the state now.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.regs, prometheus.CounterValue, float64(c.state.Registrations()))
	capacity, health := c.state.Capacity(), c.state.Health()
	for _, r := range nr1.All {
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(capacity[r]), r.Short())
		ch <- prometheus.MustNewConstMetric(c.allocatable, prometheus.GaugeValue, boolValue(health[r].Healthy)*float64(capacity[r]), r.Short())
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
