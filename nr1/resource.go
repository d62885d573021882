// SPDX-License-Identifier: Apache-2.0

package nr1

import "fmt"

// Resource is one of the four counted NR1 resources.
type Resource int

// The four NR1 resources, in the order used by Amounts.
const (
	ComputeDMAMemory Resource = iota
	CPUDMAMemory
	DockerPartition
	HypervisorQueue
	// NumResources is the number of NR1 resources.
	NumResources = 4
)

// Domain is the extended-resource domain of every NR1 resource name.
const Domain = "neureality.ai"

// DRADriver is the name of the NR1's DRA driver (the agent in DRA mode), which its
// DeviceClass selects and the kubelet's pod-resources answer names for DRA claims.
const DRADriver = "nr1.neureality.ai"

// CDIKind is the CDI vendor and class of the DRA driver's claim shares: a container the
// kubelet gave a CDI device "neureality.ai/nr1=…" holds a share of the NR1.
const CDIKind = Domain + "/nr1"

// AnnotationPrefix prefixes the annotations the device plugin's Allocate puts on a
// container, one per resource: nr1.neureality.ai/<short-name>: "<units>".
const AnnotationPrefix = "nr1.neureality.ai/"

// Annotation is the Allocate annotation key of r.
func (r Resource) Annotation() string { return AnnotationPrefix + r.Short() }

// All lists the resources in their canonical order.
var All = [NumResources]Resource{ComputeDMAMemory, CPUDMAMemory, DockerPartition, HypervisorQueue}

type resourceInfo struct {
	name   string // the Kubernetes extended-resource name
	short  string // the metric label and configuration key
	unit   string
	base   string // what Base counts, as a metric name ends
	envVar string // set by Allocate to the number of units granted
}

var info = [NumResources]resourceInfo{
	{Domain + "/compute_dma_memory_in_mb", "compute_dma_memory", "MB", "bytes", "NR1_COMPUTE_DMA_MEMORY_MB"},
	{Domain + "/cpu_dma_memory_in_mb", "cpu_dma_memory", "MB", "bytes", "NR1_CPU_DMA_MEMORY_MB"},
	{Domain + "/docker_partition_in_mb", "docker_partition", "MB", "bytes", "NR1_DOCKER_PARTITION_MB"},
	{Domain + "/ai_hypervisor_queue", "ai_hypervisor_queue", "queue", "queues", "NR1_AI_HYPERVISOR_QUEUES"},
}

// Valid reports whether r is one of the four resources.
func (r Resource) Valid() bool { return r >= 0 && r < NumResources }

// Name is the full Kubernetes resource name, e.g. neureality.ai/compute_dma_memory_in_mb.
func (r Resource) Name() string { return r.info().name }

// Short is the short name used in metric labels and configuration, e.g. compute_dma_memory.
func (r Resource) Short() string { return r.info().short }

// Unit is what one unit of the resource is: "MB" or "queue".
func (r Resource) Unit() string { return r.info().unit }

// BaseUnit is what r's base amounts count, plural, as Prometheus ends a metric's name
// with its unit: "bytes" for the DMA memories and the docker partition, "queues" for the
// queues. Resources of one base unit share a metric family; no family mixes units.
func (r Resource) BaseUnit() string { return r.info().base }

// EnvVar is the environment variable through which Allocate tells a container its budget.
func (r Resource) EnvVar() string { return r.info().envVar }

// UnitBytes is the size of one unit in bytes, or 1 for counted resources.
func (r Resource) UnitBytes() int64 {
	if r.info().unit == "MB" {
		return 1 << 20
	}
	return 1
}

// String returns the short name.
func (r Resource) String() string {
	if !r.Valid() {
		return fmt.Sprintf("Resource(%d)", int(r))
	}
	return r.Short()
}

func (r Resource) info() resourceInfo {
	if !r.Valid() {
		panic(fmt.Sprintf("nr1: invalid resource %d", int(r)))
	}
	return info[r]
}

// ParseResource accepts a full resource name or a short name.
func ParseResource(s string) (Resource, error) {
	for _, r := range All {
		if s == r.Name() || s == r.Short() {
			return r, nil
		}
	}
	return 0, fmt.Errorf("unknown NR1 resource %q (want one of %s, %s, %s, %s)",
		s, info[0].name, info[1].name, info[2].name, info[3].name)
}
