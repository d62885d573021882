// SPDX-License-Identifier: Apache-2.0

// Package inventory joins what the runtime, the kubelet and the kernel say about each
// pod into one view: per compute graph (a pod), its containers with their cgroups and
// processes, and the NR1 allocation the CG was given.
//
// Each mode tells what a container was given, on its own: the device plugin's
// (pluginBooks, deviceplugin.go: the kubelet's figure for a container it lists, the
// Allocate annotations for one it does not, the two cross-checked) and DRA's
// (claimBooks, dra.go: what the claims the kubelet lists consumed, and the claims whose
// shares a container holds as CDI devices or marks). allocate combines them per pod.
//
// Joins runtime + pod-resources + cgroups + namespace labels: per CG (pod) its
// containers, cgroup paths and ids (a container's child cgroups included; its processes
// read only when asked, `inventory.Processes`), the pod's cgroup and every cgroup below
// it no container's (`PodCgroupIDs`: what their processes hold is the CG's, whatever the
// runtime says; one walk of the pod's cgroup, `cgroup.Tree`, reads them, its containers'
// cgroups and their child cgroups, ids from the directory entries, with no stat per
// cgroup: `BenchmarkPodCgroup100`, `BenchmarkTree`; walked again only once a cgroup was
// made or removed on the node, as `CgroupChanges`, the kernel's cgroup tracepoints,
// count them, so that a build at rest walks none), a running container the runtime did
// not describe (its status unread) given its cgroup found below the pod's by its ID and
// allocation (sum over listed containers — the device plugin's units, and in DRA mode
// what each claim of the NR1's driver consumed, as the driver prepared it, a claim
// shared by containers counted once —, or the largest init container's when more: its
// Allocate annotations, or the claims whose shares the kubelet gave it as CDI devices
// (as the runtime says them, else as the shares' marks mounted into it,
// `nr1.ShareOfMount`, a mark counted only as the agent wrote it: of a share of a claim
// its driver prepared, or unprepared in the last two minutes (the kubelet unprepares a
// pod's claims once its containers stopped, and the agent's view of them may lag), in
// the pod's namespace; any other ignored, noted in `IgnoredMarks` and reported by an
// Event `NR1IgnoredShareMark`, never making the allocation unknown), which also stand in
// for claim information missing from the kubelet's answer; a running container holding a
// share of no claim the driver prepared leaves the CG unknown; one whose runtime details
// were not read (`Unread`) holds no share as far as the agent can tell, the CG judged
// with the pod's booking as the kubelet lists it (never unknown: that would make it
// untouchable by its own doing); the claims of the NR1's driver it holds, each with what
// it consumed); a pod with a successor of its name on the node (the table speaks for the
// successor, allocated in part while the kubelet admits it; of two seen at once, the
// runtime's later sandbox succeeds), a pod the kubelet does not list, first seen by the
// agent after the table was read (the API names pods, not UIDs; ordered on the agent's
// monotonic clock, never by the runtime's creation time), the latest instance of one of
// whose containers, running or exited (a booking container waiting to restart), has
// Allocate annotations disagreeing with it, whose UID is no pod UID, or one of whose
// running containers has a refused cgroupsPath, has an *unknown* allocation with the
// reason; disagreements and refusals logged once, disagreements counted; the agent's
// labels on the pod's namespace, or why they are unknown.
package inventory
