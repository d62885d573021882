// SPDX-License-Identifier: Apache-2.0

package sampler

import (
	"fmt"
	"slices"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// shareClaims groups the CGs (of a known allocation) that share a claim, directly or
// through another, and returns each group of two or more.
func shareClaims(cgs []*view.Measured) []*view.Shared {
	parent := make([]int, len(cgs))
	for i := range parent {
		parent[i] = i
	}
	root := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	holders := map[string][]int{}
	for i, cg := range cgs {
		if !cg.AllocationKnown {
			continue
		}
		for _, c := range cg.Claims {
			k := c.Namespace + "/" + c.Name
			if h := holders[k]; len(h) > 0 {
				parent[root(i)] = root(h[0])
			}
			holders[k] = append(holders[k], i)
		}
	}
	byRoot := map[int]*view.Shared{}
	var groups []*view.Shared
	for i, cg := range cgs {
		if !cg.AllocationKnown || len(cg.Claims) == 0 {
			continue
		}
		s := byRoot[root(i)]
		if s == nil {
			s = &view.Shared{}
			byRoot[root(i)] = s
			groups = append(groups, s)
		}
		s.Members = append(s.Members, cg)
	}
	groups = slices.DeleteFunc(groups, func(s *view.Shared) bool { return len(s.Members) < 2 })
	for _, s := range groups {
		given := map[string]bool{}
		for _, cg := range s.Members {
			s.Pods = append(s.Pods, cg.Namespace+"/"+cg.Name)
			// What the pod was given besides its claims (a device-plugin resource) is its
			// own; each claim counts once.
			own := cg.Allocation
			for _, c := range cg.Claims {
				for _, r := range nr1.All {
					own[r] = max(own[r]-c.Amounts[r], 0)
				}
				k := c.Namespace + "/" + c.Name
				if !given[k] {
					given[k] = true
					s.Allocation = nr1.Add(s.Allocation, c.Amounts)
					if len(holders[k]) > 1 {
						s.Claims = append(s.Claims, k)
					}
				}
			}
			s.Allocation = nr1.Add(s.Allocation, own)
			if cg.UsageUncertain != "" && s.Uncertain == "" {
				s.Uncertain = fmt.Sprintf("%s/%s: %s", cg.Namespace, cg.Name, cg.UsageUncertain)
			}
		}
		slices.Sort(s.Claims)
	}
	return groups
}

// settle computes the group's ratios once its usage is summed. Its docker partition
// is not judged together (see view.Shared).
func settle(s *view.Shared) {
	s.Usage[nr1.DockerPartition] = 0
	s.Ratio = view.Ratios(s.Usage, s.Allocation)
	s.Ratio[nr1.DockerPartition] = 0
}
