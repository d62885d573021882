// SPDX-License-Identifier: Apache-2.0

package deviceplugin

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

type fakeDevices struct {
	health     device.Health
	registered map[nr1.Resource]bool
}

func (f *fakeDevices) Capacity() nr1.Amounts          { return nr1.Amounts{116244, 512, 13417, 65536} }
func (f *fakeDevices) Health() device.Health          { return f.health }
func (f *fakeDevices) Registered(r nr1.Resource) bool { return f.registered[r] }
func (f *fakeDevices) Registrations() int             { return 8 }

func TestDeviceMetricsAtScrapeTime(t *testing.T) {
	state := &fakeDevices{registered: map[nr1.Resource]bool{nr1.ComputeDMAMemory: true}}
	state.health[nr1.HypervisorQueue].Healthy = true
	state.health[nr1.CPUDMAMemory].Healthy = true
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(state))
	want := `
# HELP nr1_kubelet_registrations_total Device-plugin registrations with the kubelet.
# TYPE nr1_kubelet_registrations_total counter
nr1_kubelet_registrations_total 8
# HELP nr1_allocatable_bytes NR1 capacity the node offers as allocatable, in bytes (compute_dma_memory, cpu_dma_memory, docker_partition): all of it while healthy, else 0.
# TYPE nr1_allocatable_bytes gauge
nr1_allocatable_bytes{resource="compute_dma_memory"} 0
nr1_allocatable_bytes{resource="cpu_dma_memory"} 5.36870912e+08
nr1_allocatable_bytes{resource="docker_partition"} 0
# HELP nr1_allocatable_queues NR1 capacity the node offers as allocatable, in queues (ai_hypervisor_queue): all of it while healthy, else 0.
# TYPE nr1_allocatable_queues gauge
nr1_allocatable_queues{resource="ai_hypervisor_queue"} 65536
# HELP nr1_capacity_bytes NR1 capacity of the node, in bytes (compute_dma_memory, cpu_dma_memory, docker_partition).
# TYPE nr1_capacity_bytes gauge
nr1_capacity_bytes{resource="compute_dma_memory"} 1.21890668544e+11
nr1_capacity_bytes{resource="cpu_dma_memory"} 5.36870912e+08
nr1_capacity_bytes{resource="docker_partition"} 1.4068744192e+10
# HELP nr1_capacity_queues NR1 capacity of the node, in queues (ai_hypervisor_queue).
# TYPE nr1_capacity_queues gauge
nr1_capacity_queues{resource="ai_hypervisor_queue"} 65536
# HELP nr1_device_healthy 1 when the NR1 resource is healthy.
# TYPE nr1_device_healthy gauge
nr1_device_healthy{resource="ai_hypervisor_queue"} 1
nr1_device_healthy{resource="compute_dma_memory"} 0
nr1_device_healthy{resource="cpu_dma_memory"} 1
nr1_device_healthy{resource="docker_partition"} 0
# HELP nr1_device_plugin_registered 1 when the resource's device plugin is registered with the kubelet.
# TYPE nr1_device_plugin_registered gauge
nr1_device_plugin_registered{resource="ai_hypervisor_queue"} 0
nr1_device_plugin_registered{resource="compute_dma_memory"} 1
nr1_device_plugin_registered{resource="cpu_dma_memory"} 0
nr1_device_plugin_registered{resource="docker_partition"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	// A change shows at the next scrape, with nothing to update in between.
	state.registered[nr1.HypervisorQueue] = true
	want = `
# HELP nr1_device_plugin_registered 1 when the resource's device plugin is registered with the kubelet.
# TYPE nr1_device_plugin_registered gauge
nr1_device_plugin_registered{resource="ai_hypervisor_queue"} 1
nr1_device_plugin_registered{resource="compute_dma_memory"} 1
nr1_device_plugin_registered{resource="cpu_dma_memory"} 0
nr1_device_plugin_registered{resource="docker_partition"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "nr1_device_plugin_registered"); err != nil {
		t.Fatal(err)
	}
}

// The capacity families hold one unit each, the one their name ends with: a resource
// counted in MB is in the bytes family, its capacity times the bytes of one.
func TestCapacityInBaseUnits(t *testing.T) {
	state := &fakeDevices{}
	for r := range state.health {
		state.health[r].Healthy = true
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(state))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, mf := range mfs {
		for _, family := range []string{"nr1_capacity", "nr1_allocatable"} {
			unit, ok := strings.CutPrefix(mf.GetName(), family+"_")
			if !ok {
				continue
			}
			for _, m := range mf.GetMetric() {
				res := m.GetLabel()[0].GetValue()
				r, err := nr1.ParseResource(res)
				if err != nil || r.BaseUnit() != unit {
					t.Errorf("%s holds a series of resource %q: %v", mf.GetName(), res, err)
					continue
				}
				if got, want := m.GetGauge().GetValue(), float64(state.Capacity()[r])*float64(r.UnitBytes()); got != want {
					t.Errorf("%s{resource=%q} = %v, want %v", mf.GetName(), res, got, want)
				}
				seen++
			}
		}
	}
	if seen != 2*nr1.NumResources {
		t.Errorf("%d capacity and allocatable series, want one of each per resource", seen)
	}
}
