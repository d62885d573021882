// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"cmp"
	"slices"
)

// Normalize sorts the detail so that two scans of the same state compare equal, and
// renumbers descriptions by first appearance (their raw values are source-specific).
func (s *Scan) Normalize() {
	slices.SortFunc(s.Mappings, func(a, b Mapping) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Start, b.Start))
	})
	slices.SortFunc(s.Handles, func(a, b Handle) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.FD, b.FD))
	})
	renum := map[uint64]uint64{}
	for i := range s.Handles {
		id, ok := renum[s.Handles[i].Description]
		if !ok {
			id = uint64(len(renum) + 1)
			renum[s.Handles[i].Description] = id
		}
		s.Handles[i].Description = id
	}
}
