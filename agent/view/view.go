// SPDX-License-Identifier: Apache-2.0

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
