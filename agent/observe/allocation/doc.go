// SPDX-License-Identifier: Apache-2.0

// Package allocation knows what each container was given of the NR1 resources: from the
// kubelet's pod-resources API, which wins, cross-checked with the annotations the device
// plugin's Allocate put on the container.
//
// Pod-resources client (`List` decoded straight from the wire into the table, summed per
// container — one entry per device ID —, every listed pod and container kept, those
// given nothing included; receive limit sized for a node whose whole capacity is
// allocated; `Ask`, a `Get` of one pod), the tracker (`Step`, one at a time; its cadence
// the agent's, woken by its `Wakes`, the runtime's pods changing and reads starting to
// fail): the whole table at start, when a running pod is missing from it or newer than
// it (`OnDemand.Pods`: the inventory's `RunningPods`), while reads fail and every
// `sampling.allocationRefresh`, otherwise a `Get` of the pod holding least just before
// each sample (`Vouch`, which waits for it at most a gap; one not answered within the
// interval starts the allocations aging), a table like the last renewed without waking
// readers; `Needs`, the interval while the kubelet does not answer, `Unread` the reads'
// interval while a running pod is not in the table; Allocate annotations
// (`FromAnnotations`: `ParseUnits` per value, a container's annotations taken whole or
// not at all).
package allocation
