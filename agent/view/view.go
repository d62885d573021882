// SPDX-License-Identifier: Apache-2.0

// Package view is the node's compute graphs as the agent knows them: who each CG is and
// what it was given (the inventory builds it), what it holds (the sampler measures it),
// and how certain both are; what the policy judges. It does no I/O and imports nothing
// that talks to the kernel, the runtime or the kubelet, so that the policy does not.
package view

import "time"

// Inputs say how certain a view of the node is; every view built on the inventory
// carries them on unchanged.
type Inputs struct {
	// RuntimeConnected is false while the runtime cannot be reached: its pods are the
	// last ones seen.
	RuntimeConnected bool `json:"runtimeConnected"`
	// AllocationRead is when the pod-resources API was last read; zero means allocations
	// are not known yet.
	AllocationRead time.Time `json:"allocationRead,omitzero"`
}
