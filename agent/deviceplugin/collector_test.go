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
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(state))
	want := `
# HELP nr1_kubelet_registrations_total Device-plugin registrations with the kubelet.
# TYPE nr1_kubelet_registrations_total counter
nr1_kubelet_registrations_total 8
# HELP nr1_allocatable NR1 units the device plugin advertises as allocatable: the capacity while healthy, else 0.
# TYPE nr1_allocatable gauge
nr1_allocatable{resource="ai_hypervisor_queue"} 65536
nr1_allocatable{resource="compute_dma_memory"} 0
nr1_allocatable{resource="cpu_dma_memory"} 0
nr1_allocatable{resource="docker_partition"} 0
# HELP nr1_capacity NR1 capacity of the node, in the resource's units (MB or queues).
# TYPE nr1_capacity gauge
nr1_capacity{resource="ai_hypervisor_queue"} 65536
nr1_capacity{resource="compute_dma_memory"} 116244
nr1_capacity{resource="cpu_dma_memory"} 512
nr1_capacity{resource="docker_partition"} 13417
# HELP nr1_device_healthy 1 when the NR1 resource is healthy.
# TYPE nr1_device_healthy gauge
nr1_device_healthy{resource="ai_hypervisor_queue"} 1
nr1_device_healthy{resource="compute_dma_memory"} 0
nr1_device_healthy{resource="cpu_dma_memory"} 0
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
