// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/neureality-sdk/nr1-agent/cli/agents"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

func newTop(o *options) *cobra.Command {
	var node, output, sortBy string
	var all bool
	cmd := &cobra.Command{
		Use:   "top [--node NODE] [-n NAMESPACE | -A] [-o wide|json|yaml] [--sort-by KEY]",
		Short: "NR1 capacity, allocation and use per node, and per CG sorted by its largest ratio",
		Long: `Shows, per NR1 node, the capacity, what is allocatable, allocated and used of each
NR1 resource, and per CG (pod) what it holds of what it was given (used/allocated, MB
or queues) with its largest usage ratio, largest first. A figure the agent does not
know is shown as <unknown>, never as zero.

-o wide adds each node's agent and enforcement mode, each resource's ratio per CG, and
where the CG's enforcement stands: dry-run, throttled, how long it has been over and
on which resources, the steps taken, the next step and when, the ladder's reset; or
ended (killed or evicted).

--sort-by orders the CGs by a column (and, with -o json or yaml, each node's CGs):
` + sortKeysHelp(),
		Example: `  # Every CG of every namespace, the most over first
  kubectl nr1 top -A

  # The CGs of namespace ml with their ratios and enforcement, most queues held first
  kubectl nr1 top -n ml -o wide --sort-by ai_hypervisor

  # One node's report, for a script
  kubectl nr1 top --node nr1-node-3 -A -o json`,
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "wide" && output != "json" && output != "yaml" {
				return usageError{fmt.Errorf("--output %q: want wide, json or yaml", output)}
			}
			if _, err := sortKeyNamed(sortBy); err != nil {
				return usageError{err}
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
			if err := writeTop(o.out, nodes, topOptions{namespace: ns, output: output, sortBy: sortBy, now: o.now()}); err != nil {
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
	cmd.Flags().StringVarP(&output, "output", "o", "", "wide, json or yaml (default: tables)")
	cmd.Flags().StringVar(&sortBy, "sort-by", "", "order the CGs by this column: "+strings.Join(sortKeyNames(), ", ")+" (default max_ratio)")
	o.completeTop(cmd)
	return cmd
}

// topOptions are what top shows and how.
type topOptions struct {
	namespace string // the CGs of this namespace; every namespace when empty
	output    string // "" (tables), wide, json or yaml
	sortBy    string // a sort key's name; the default order when empty
	now       time.Time
}

// topView is what top shows, and what -o json|yaml writes.
type topView struct {
	Nodes []*agents.Node `json:"nodes"`
}

// writeTop writes the nodes and, of namespace o.namespace (every namespace when empty),
// the CGs holding or given any NR1 resource, or whose allocation or usage is unknown.
func writeTop(w io.Writer, nodes []*agents.Node, o topOptions) error {
	key, err := sortKeyNamed(o.sortBy)
	if err != nil {
		return usageError{err}
	}
	var cgs []*agents.CG
	mode := map[string]string{}
	for _, n := range nodes {
		kept := n.CGs[:0:0]
		for _, c := range n.CGs {
			if (o.namespace == "" || c.Namespace == o.namespace) && relevant(c) {
				kept = append(kept, c)
			}
		}
		// Left in the agent's order (namespace, pod) unless asked otherwise.
		if o.sortBy != "" {
			key.sort(kept)
		}
		n.CGs = kept
		cgs = append(cgs, kept...)
		mode[n.Name] = n.Mode
	}
	switch o.output {
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
	wide := o.output == "wide"
	tw := tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
	fmt.Fprint(tw, "NODE\tRESOURCE\tCAPACITY\tALLOCATABLE\tALLOCATED\tUSED\tUNATTRIBUTED")
	if wide {
		fmt.Fprint(tw, "\tMODE\tAGENT")
	}
	fmt.Fprintln(tw)
	for _, n := range nodes {
		if n.Error != "" {
			fmt.Fprintf(tw, "%s\t<unknown>\t\t\t\t\t", n.Name)
			if wide {
				fmt.Fprintf(tw, "\t<unknown>\t%s: %s\n", n.Agent, n.Error)
				continue
			}
			fmt.Fprintf(tw, "\t(%s: %s)\n", n.Agent, n.Error)
			continue
		}
		for _, r := range nr1.All {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s", n.Name, r.Short(), amount(n.Capacity[r]), amount(n.Allocatable[r]),
				amount(n.Allocated[r]), amount(n.Used[r]), amount(n.Unattributed[r]))
			if wide {
				fmt.Fprintf(tw, "\t%s\t%s", or(n.Mode, "<unknown>"), n.Agent)
			}
			fmt.Fprintln(tw)
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	fmt.Fprintln(w)
	if len(cgs) == 0 {
		if o.namespace == "" {
			_, err := fmt.Fprintln(w, "No CGs found.")
			return err //nolint:wrapcheck // the command's output
		}
		_, err := fmt.Fprintf(w, "No CGs found in namespace %s.\n", o.namespace)
		return err //nolint:wrapcheck // the command's output
	}
	key.sort(cgs)
	fmt.Fprint(tw, "NAMESPACE\tPOD\tNODE")
	for _, r := range nr1.All {
		fmt.Fprintf(tw, "\t%s", column(r))
		if wide {
			fmt.Fprintf(tw, "\t%s", ratioColumn(r))
		}
	}
	fmt.Fprint(tw, "\tMAX RATIO")
	if wide {
		fmt.Fprint(tw, "\tENFORCEMENT")
	}
	fmt.Fprintln(tw)
	for _, c := range cgs {
		fmt.Fprintf(tw, "%s\t%s\t%s", c.Namespace, c.Pod, c.Node)
		for _, r := range nr1.All {
			fmt.Fprintf(tw, "\t%s", cell(c, r))
			if wide {
				fmt.Fprintf(tw, "\t%s", ratioCell(c, r))
			}
		}
		fmt.Fprintf(tw, "\t%s", maxRatio(c))
		if wide {
			fmt.Fprintf(tw, "\t%s", enforcement(c, mode[c.Node] == "dry-run", o.now))
		}
		fmt.Fprintln(tw)
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

// columnName is a resource's name in the CG table's heads and sort keys: its short
// name without what every NR1 resource is (memory, queues).
func columnName(r nr1.Resource) string {
	return strings.TrimSuffix(strings.TrimSuffix(r.Short(), "_memory"), "_queue")
}

// column heads a resource's USED/ALLOCATED column with its unit.
func column(r nr1.Resource) string {
	name := strings.ToUpper(columnName(r))
	if r.Unit() == "MB" {
		return name + "(MB)"
	}
	return name + "(Q)"
}

// ratioColumn heads a resource's ratio column (-o wide).
func ratioColumn(r nr1.Resource) string { return strings.ToUpper(columnName(r)) + "_RATIO" }

// ratioCell is the CG's ratio of r, with why when it is unknown.
func ratioCell(c *agents.CG, r nr1.Resource) string {
	switch {
	case c.AllocationUnknown:
		return "<unknown>"
	case c.UsageUncertain:
		return "<uncertain>"
	}
	return ratio(c.Ratio[r])
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

// enforcement says where the CG's ladders stand (-o wide), so that top alone tells an
// operator which CGs the agent is acting on and what it does next: one ladder, or for
// a moment two when the pod was re-created while its predecessor's throttle is lifted.
func enforcement(c *agents.CG, dryRun bool, now time.Time) string {
	if len(c.Enforcement) == 0 {
		return "-"
	}
	ladders := make([]string, 0, len(c.Enforcement))
	for _, e := range c.Enforcement {
		ladders = append(ladders, ladder(e, dryRun, now))
	}
	return strings.Join(ladders, "; ")
}

func ladder(e *agents.Enforcement, dryRun bool, now time.Time) string {
	if !e.Ended.IsZero() {
		return fmt.Sprintf("ended (killed or evicted) %s ago", since(now, e.Ended))
	}
	var parts []string
	if dryRun {
		// The ladder runs, but its steps are Events only.
		parts = append(parts, "dry-run")
	}
	if e.Throttled {
		parts = append(parts, "throttled")
	}
	// A rung is over since Over until it is back under, then resets at ResetAt unless
	// the CG goes over again.
	var over, under []string
	var first time.Time
	var next, reset *agents.Rung
	steps := 0
	for _, r := range nr1.All {
		g := &e.Rungs[r]
		if g.Over.IsZero() {
			continue
		}
		steps = max(steps, g.Steps)
		if g.Next != "" && (next == nil || g.NextAt.Before(next.NextAt)) {
			next = g
		}
		if !g.ResetAt.IsZero() {
			under = append(under, r.Short())
			if reset == nil || g.ResetAt.After(reset.ResetAt) {
				reset = g
			}
			continue
		}
		over = append(over, r.Short())
		if first.IsZero() || g.Over.Before(first) {
			first = g.Over
		}
	}
	if len(over) > 0 {
		parts = append(parts, fmt.Sprintf("over %s for %s", strings.Join(over, ","), since(now, first)))
	}
	if len(under) > 0 {
		parts = append(parts, fmt.Sprintf("back under %s, resets in %s", strings.Join(under, ","), until(now, reset.ResetAt)))
	}
	if len(over)+len(under) > 0 {
		parts = append(parts, fmt.Sprintf("%d step%s taken", steps, plural(steps)))
	}
	switch {
	case next != nil && next.NextAt.After(now):
		parts = append(parts, fmt.Sprintf("next %s in %s", next.Next, until(now, next.NextAt)))
	case next != nil:
		parts = append(parts, fmt.Sprintf("next %s due", next.Next))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// since is how long ago t was, to the second; never negative, as the agent's clock and
// this machine's differ.
func since(now, t time.Time) time.Duration { return max(now.Sub(t).Round(time.Second), 0) }

// until is how long until t, to the second; never negative.
func until(now, t time.Time) time.Duration { return max(t.Sub(now).Round(time.Second), 0) }
