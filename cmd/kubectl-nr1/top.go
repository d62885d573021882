// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/neureality-sdk/nr1-agent/cli/agents"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

func newTop(o *options) *cobra.Command {
	var node, output string
	var all bool
	cmd := &cobra.Command{
		Use:   "top [--node NODE] [-n NAMESPACE | -A] [-o json|yaml]",
		Short: "NR1 capacity, allocation and use per node, and per CG sorted by its largest ratio",
		Long: `Shows, per NR1 node, the capacity, what is allocatable, allocated and used of each
NR1 resource, and per CG (pod) what it holds of what it was given (used/allocated, MB
or queues) with its largest usage ratio, largest first. A figure the agent does not
know is shown as <unknown>, never as zero.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return usageError{fmt.Errorf("--output %q: want json or yaml", output)}
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			ns := ""
			if !all {
				if ns, err = o.namespace(); err != nil {
					return err
				}
			}
			nodes, err := o.source(c).Nodes(cmd.Context(), node)
			if err != nil {
				return err
			}
			if err := writeTop(o.out, nodes, ns, output); err != nil {
				return err
			}
			// What could not be read is shown as unknown; the exit status says so too,
			// for scripts.
			unread := 0
			for _, n := range nodes {
				if n.Error != "" {
					unread++
				}
			}
			if unread > 0 {
				return fmt.Errorf("%d of %d agents could not be read; their nodes are unknown", unread, len(nodes))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "only this node")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "CGs of every namespace")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml (default: tables)")
	return cmd
}

// topView is what top shows, and what -o json|yaml writes.
type topView struct {
	Nodes []*agents.Node `json:"nodes"`
}

// writeTop writes the nodes and, of namespace ns (every namespace when empty), the CGs
// holding or given any NR1 resource, or whose allocation or usage is unknown.
func writeTop(w io.Writer, nodes []*agents.Node, ns, output string) error {
	var cgs []*agents.CG
	for _, n := range nodes {
		kept := n.CGs[:0:0]
		for _, c := range n.CGs {
			if (ns == "" || c.Namespace == ns) && relevant(c) {
				kept = append(kept, c)
			}
		}
		n.CGs = kept
		cgs = append(cgs, kept...)
	}
	switch output {
	case "json":
		b, err := json.MarshalIndent(topView{Nodes: nodes}, "", "  ")
		if err != nil {
			return fmt.Errorf("json: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err //nolint:wrapcheck // the command's output
	case "yaml":
		b, err := json.Marshal(topView{Nodes: nodes})
		if err != nil {
			return fmt.Errorf("yaml: %w", err)
		}
		if b, err = yaml.JSONToYAML(b); err != nil {
			return fmt.Errorf("yaml: %w", err)
		}
		_, err = w.Write(b)
		return err //nolint:wrapcheck // the command's output
	}
	tw := tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRESOURCE\tCAPACITY\tALLOCATABLE\tALLOCATED\tUSED\tUNATTRIBUTED")
	for _, n := range nodes {
		if n.Error != "" {
			fmt.Fprintf(tw, "%s\t<unknown>\t\t\t\t\t\t(%s: %s)\n", n.Name, n.Agent, n.Error)
			continue
		}
		for _, r := range nr1.All {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, r.Short(), amount(n.Capacity[r]), amount(n.Allocatable[r]),
				amount(n.Allocated[r]), amount(n.Used[r]), amount(n.Unattributed[r]))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	fmt.Fprintln(w)
	if len(cgs) == 0 {
		if ns == "" {
			_, err := fmt.Fprintln(w, "No CGs found.")
			return err //nolint:wrapcheck // the command's output
		}
		_, err := fmt.Fprintf(w, "No CGs found in namespace %s.\n", ns)
		return err //nolint:wrapcheck // the command's output
	}
	sortByRatio(cgs)
	fmt.Fprint(tw, "NAMESPACE\tPOD\tNODE")
	for _, r := range nr1.All {
		fmt.Fprintf(tw, "\t%s", column(r))
	}
	fmt.Fprintln(tw, "\tMAX RATIO")
	for _, c := range cgs {
		fmt.Fprintf(tw, "%s\t%s\t%s", c.Namespace, c.Pod, c.Node)
		for _, r := range nr1.All {
			fmt.Fprintf(tw, "\t%s", cell(c, r))
		}
		fmt.Fprintf(tw, "\t%s\n", maxRatio(c))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	return nil
}

// relevant: a CG given or holding some NR1 resource, or one the agent cannot judge.
// Every pod's image sits in the docker partition: a pod given nothing that holds only
// its image is no CG.
func relevant(c *agents.CG) bool {
	if c.AllocationUnknown || c.UsageUncertain || len(c.Enforcement) > 0 {
		return true
	}
	for _, r := range nr1.All {
		if c.Allocation[r] != nil && *c.Allocation[r] != 0 || r != nr1.DockerPartition && c.Usage[r] != nil && *c.Usage[r] != 0 {
			return true
		}
	}
	return false
}

// sortByRatio puts the CGs most over first; those whose ratio is unknown last.
func sortByRatio(cgs []*agents.CG) {
	sort.SliceStable(cgs, func(i, j int) bool {
		a, _ := cgs[i].Max()
		b, _ := cgs[j].Max()
		an, bn := math.IsNaN(float64(a)), math.IsNaN(float64(b))
		switch {
		case an != bn:
			return bn
		case !an && a != b:
			return a > b
		case cgs[i].Namespace != cgs[j].Namespace:
			return cgs[i].Namespace < cgs[j].Namespace
		default:
			return cgs[i].Pod < cgs[j].Pod
		}
	})
}

// column heads a resource's USED/ALLOCATED column with its unit.
func column(r nr1.Resource) string {
	name := strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(r.Short(), "_memory"), "_queue"))
	if r.Unit() == "MB" {
		return name + "(MB)"
	}
	return name + "(Q)"
}

// cell is used/allocated, with why when either is unknown.
func cell(c *agents.CG, r nr1.Resource) string {
	switch {
	case c.AllocationUnknown:
		return "<unknown>"
	case c.UsageUncertain:
		return "<uncertain>/" + amount(c.Allocation[r])
	}
	return amount(c.Usage[r]) + "/" + amount(c.Allocation[r])
}

func maxRatio(c *agents.CG) string {
	switch {
	case c.AllocationUnknown:
		return "<unknown allocation>"
	case c.UsageUncertain:
		return "<uncertain usage>"
	}
	v, r := c.Max()
	return ratio(v) + " " + r.Short()
}

func ratio(v agents.Ratio) string {
	switch f := float64(v); {
	case math.IsNaN(f):
		return "<unknown>"
	case math.IsInf(f, 1):
		return "+Inf"
	default:
		return strconv.FormatFloat(f, 'f', 2, 64)
	}
}

// amount writes a quantity as a whole number when it is one, else with one decimal.
func amount(q agents.Quantity) string {
	switch {
	case q == nil:
		return "<unknown>"
	case *q == math.Trunc(*q):
		return strconv.FormatFloat(*q, 'f', 0, 64)
	default:
		return strconv.FormatFloat(*q, 'f', 1, 64)
	}
}
