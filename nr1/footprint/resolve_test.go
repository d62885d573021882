// SPDX-License-Identifier: Apache-2.0

package footprint

import "github.com/neureality-sdk/nr1-agent/nr1/device"

// resolve identifies each spec's file, as nr1/device does at the agent's start, and
// indexes them.
func resolve(specs []TargetSpec) (*Targets, error) {
	for i := range specs {
		id, err := device.Identify(specs[i].Path)
		if err != nil {
			return nil, err
		}
		specs[i].Identity = id
	}
	return NewTargets(specs)
}
