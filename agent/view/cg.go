// SPDX-License-Identifier: Apache-2.0

package view

import (
	"time"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// CG is a compute graph: one pod, whose allocation is the sum over its containers.
type CG struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	QoS       string `json:"qos"`
	// Ready is false for a sandbox the runtime keeps after its pod ended; a pod recreated
	// under the same name has a new, ready one.
	Ready bool `json:"ready"`
	// Allocation is what the kubelet allocated to the pod: the sum over its listed
	// containers, or its largest init container's when that is more (init containers
	// run before the others and the kubelet hands their devices on).
	Allocation nr1.Amounts `json:"allocation"`
	// AllocationKnown is true when the kubelet listed the pod in a pod-resources answer
	// and the Allocate annotations of its running containers agree with it. Nothing is
	// done to a CG whose allocation is not known.
	AllocationKnown bool `json:"allocationKnown"`
	// AllocationUnknown says why the allocation is not known.
	AllocationUnknown string `json:"allocationUnknown,omitempty"`
	// Claims are the DRA claims of the NR1's driver the CG holds (known with its
	// allocation), each with what it consumed: pods sharing a claim are held to it
	// together.
	Claims []Claim `json:"claims,omitempty"`
	// Annotations are the pod's, for the exemption a namespace may let it ask for; never
	// shown (they are the pod owner's, and may hold anything).
	Annotations map[string]string `json:"-"`
	// NamespaceLabels are the agent's labels (nr1.neureality.ai/…) on the pod's
	// namespace, which exempt it or let its pods exempt themselves. NamespaceUnknown says
	// why they are not known (the API server not answering, the namespace not seen yet);
	// an exemption that hangs on them cannot be decided then.
	NamespaceLabels  map[string]string `json:"namespaceLabels,omitempty"`
	NamespaceUnknown string            `json:"namespaceUnknown,omitempty"`
	Containers       []*Container      `json:"containers"`
	// PodCgroup is the pod's v2 cgroup directory, where the kubelet puts every process of
	// the pod; PodCgroupIDs are its id and those of the cgroups below it that are no
	// known container's: what their processes hold is the CG's, whatever the runtime
	// says of its containers.
	PodCgroup string `json:"podCgroup,omitempty"`
	// IgnoredMarks are the DRA shares' marks mounted into its containers that the agent
	// did not write (of no claim it prepared, or of another namespace's): ignored, and
	// reported on the pod.
	IgnoredMarks []string `json:"ignoredMarks,omitempty"`
	PodCgroupIDs []uint64 `json:"-"`
}

// Container is one container of a CG.
type Container struct {
	ID        string         `json:"id"`
	Name      string         `json:"name"`
	Image     string         `json:"image"`
	ImageRef  string         `json:"imageRef"`
	State     ContainerState `json:"state"`
	StartedAt time.Time      `json:"startedAt,omitzero"`
	Cgroup    Cgroup         `json:"cgroup"`
	// CgroupID is the v2 cgroup id (0 on legacy hosts or when the cgroup is gone).
	CgroupID uint64 `json:"cgroupID,omitempty"`
	// ChildCgroupIDs are the v2 ids of cgroups the container made below its own: what
	// their processes hold is the container's.
	ChildCgroupIDs []uint64 `json:"childCgroupIDs,omitempty"`
	// PIDs are its processes where /debug/cgs read them; empty in a sample.
	PIDs []int `json:"pids,omitempty"`
	// Allocation is what this container was given, from AllocationSource.
	Allocation nr1.Amounts `json:"allocation"`
	// AllocationSource is "pod-resources" for a container the kubelet lists and, for
	// one it does not (init containers), "annotations" (its Allocate annotations) or
	// "cdi-devices" (the DRA claim shares the kubelet gave it as CDI devices); empty
	// when nothing says anything.
	AllocationSource string `json:"allocationSource,omitempty"`
}

// Claim is a DRA claim a CG holds and what it consumed of the NR1.
type Claim struct {
	Namespace string      `json:"namespace"`
	Name      string      `json:"name"`
	Amounts   nr1.Amounts `json:"amounts"`
}

// The sources of a container's allocation.
const (
	FromPodResources = "pod-resources"
	FromAnnotations  = "annotations"
	FromCDIDevices   = "cdi-devices"
)

// ContainerState is a container's state as the runtime reported it.
type ContainerState string

// The CRI container states.
const (
	Created ContainerState = "created"
	Running ContainerState = "running"
	Exited  ContainerState = "exited"
	Unknown ContainerState = "unknown"
)

// Cgroup is where a container's processes are: its directory in each hierarchy.
type Cgroup struct {
	// V2 is the directory in the v2 tree; empty on legacy hosts.
	V2 string `json:"v2,omitempty"`
	// V1 maps a v1 controller (memory, freezer, devices, ...) to its directory. Read
	// only: the snapshots that meet one cgroupsPath share it.
	V1 map[string]string `json:"v1,omitempty"`
}
