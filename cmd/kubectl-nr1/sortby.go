// SPDX-License-Identifier: Apache-2.0

package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/neureality-sdk/nr1-agent/cli/agents"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// sortKey is one order of top's CGs: --sort-by names it by its column, lowercased,
// without its unit.
type sortKey struct {
	name, help string
	// compare orders two CGs, before ties are broken by namespace and pod. Figures go
	// largest first, names in alphabetical order; what is unknown goes last.
	compare func(a, b *agents.CG) int
}

// defaultSort is top's order without --sort-by: the CGs most over first.
const defaultSort = "max_ratio"

// sortKeys are the keys --sort-by takes, in the order the help lists them.
var sortKeys = func() []sortKey {
	keys := []sortKey{
		{"namespace", "namespace, then pod", func(a, b *agents.CG) int { return strings.Compare(a.Namespace, b.Namespace) }},
		{"pod", "pod name, then namespace", func(a, b *agents.CG) int { return strings.Compare(a.Pod, b.Pod) }},
		{"node", "node name", func(a, b *agents.CG) int { return strings.Compare(a.Node, b.Node) }},
		{defaultSort, "largest ratio of any resource first (the default)", func(a, b *agents.CG) int {
			x, _ := a.Max()
			y, _ := b.Max()
			return largestFirst(float64(x), float64(y))
		}},
	}
	for _, r := range nr1.All {
		col, unit := columnName(r), "queues"
		if r.Unit() == "MB" {
			unit = "MB"
		}
		keys = append(keys,
			sortKey{col, "most " + r.Short() + " held first (" + unit + ")", func(a, b *agents.CG) int {
				return largestFirst(held(a, r), held(b, r))
			}},
			sortKey{col + "_ratio", "largest " + r.Short() + " ratio first", func(a, b *agents.CG) int {
				return largestFirst(float64(a.Ratio[r]), float64(b.Ratio[r]))
			}})
	}
	return keys
}()

// sortKeyNamed is the key --sort-by names, the default order's for "".
func sortKeyNamed(name string) (sortKey, error) {
	if name == "" {
		name = defaultSort
	}
	for _, k := range sortKeys {
		if k.name == name {
			return k, nil
		}
	}
	return sortKey{}, fmt.Errorf("--sort-by %q: want one of %s", name, strings.Join(sortKeyNames(), ", "))
}

func sortKeyNames() []string {
	names := make([]string, len(sortKeys))
	for i, k := range sortKeys {
		names[i] = k.name
	}
	return names
}

// sortKeysHelp lists the keys with what each does, for top's help.
func sortKeysHelp() string {
	var b strings.Builder
	for _, k := range sortKeys {
		fmt.Fprintf(&b, "  %-24s %s\n", k.name, k.help)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// sort orders cgs by k; ties by namespace and pod, so that the order never depends
// on the order the agents were read in.
func (k sortKey) sort(cgs []*agents.CG) {
	slices.SortStableFunc(cgs, func(a, b *agents.CG) int {
		return cmp.Or(k.compare(a, b), strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Pod, b.Pod))
	})
}

// largestFirst compares two figures, the larger first and an unknown (NaN) last.
func largestFirst(x, y float64) int {
	xn, yn := math.IsNaN(x), math.IsNaN(y)
	switch {
	case xn && yn:
		return 0
	case xn:
		return 1
	case yn:
		return -1
	}
	return cmp.Compare(y, x)
}

// held is what the CG holds of r, NaN when unknown.
func held(c *agents.CG, r nr1.Resource) float64 {
	if q := c.Usage[r]; q != nil && !c.UsageUncertain && !c.AllocationUnknown {
		return *q
	}
	return math.NaN()
}
