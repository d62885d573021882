package sampler

import (
	"fmt"
	"slices"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Shared is what the pods sharing DRA claims hold together, against what they were
// given together. Each pod's own allocation counts a shared claim whole, since any
// one of them may use all of it; together they may not use it more than once. The
// docker partition is left to each pod's own judgement: pods running one image hold
// it once, which a sum of their measurements cannot tell.
type Shared struct {
	// Claims are the claims held by more than one of the pods, "namespace/name".
	Claims []string `json:"claims"`
	// Pods are the pods, "namespace/name", in the inventory's order.
	Pods []string `json:"pods"`
	// Allocation is each claim of theirs once, and what else each pod was given.
	Allocation nr1.Amounts `json:"allocation"`
	// Usage is the union of what their containers hold, in base units.
	Usage nr1.Usage `json:"usage"`
	Ratio Ratio     `json:"ratio"`
	// Uncertain says why Usage is only a lower bound: one of the pods' usage is.
	Uncertain string `json:"uncertain,omitempty"`
	// Members are the pods' samples, in the inventory's order.
	Members []*CG `json:"-"`
}

// shareClaims groups the CGs (of a known allocation) that share a claim, directly or
// through another, and returns each group of two or more.
func shareClaims(cgs []*CG) []*Shared {
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
	byRoot := map[int]*Shared{}
	var groups []*Shared
	for i, cg := range cgs {
		if !cg.AllocationKnown || len(cg.Claims) == 0 {
			continue
		}
		s := byRoot[root(i)]
		if s == nil {
			s = &Shared{}
			byRoot[root(i)] = s
			groups = append(groups, s)
		}
		s.Members = append(s.Members, cg)
	}
	groups = slices.DeleteFunc(groups, func(s *Shared) bool { return len(s.Members) < 2 })
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
// is not judged together (see Shared).
func (s *Shared) settle() {
	s.Usage[nr1.DockerPartition] = 0
	s.Ratio = Ratios(s.Usage, s.Allocation)
	s.Ratio[nr1.DockerPartition] = 0
}
