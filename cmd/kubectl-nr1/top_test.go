// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/cli/agents"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

func quantity(v float64) agents.Quantity { return &v }

// cg is a CG of node-c holding used of what it was given (MB or queues, in the order
// of nr1.All), with the ratios the agent would export.
func cg(ns, pod string, given, used [nr1.NumResources]float64) *agents.CG {
	c := &agents.CG{Namespace: ns, Pod: pod, Node: "node-c"}
	for i, r := range nr1.All {
		c.Allocation[r], c.Usage[r] = quantity(given[i]), quantity(used[i])
		switch {
		case used[i] == 0:
			c.Ratio[r] = 0
		case given[i] == 0:
			c.Ratio[r] = agents.Ratio(math.Inf(1))
		default:
			c.Ratio[r] = agents.Ratio(used[i] / given[i])
		}
	}
	return c
}

// nodeC is a second node in dry-run: a CG over its compute DMA whose ladder would kill
// it, one back under whose ladder is resetting, one whose ladder ended, and one the
// agent's last scan could not read in full. It is built here rather than parsed, so
// that it holds what the fixture does not.
func nodeC() *agents.Node {
	bert := cg("ml", "bert", [4]float64{2, 0, 800, 4}, [4]float64{3, 0, 400, 4})
	bert.Enforcement = []*agents.Enforcement{{UID: "u-bert"}}
	bert.Enforcement[0].Rungs[nr1.ComputeDMAMemory] = agents.Rung{Over: t0.Add(-30 * time.Second), Steps: 1, Next: "kill", NextAt: t0.Add(20 * time.Second)}
	etl := cg("default", "etl", [4]float64{1, 64, 500, 2}, [4]float64{0, 60, 100, 1})
	etl.Enforcement = []*agents.Enforcement{{UID: "u-etl"}}
	etl.Enforcement[0].Rungs[nr1.CPUDMAMemory] = agents.Rung{Over: t0.Add(-time.Minute), Steps: 1, ResetAt: t0.Add(18 * time.Second)}
	old := cg("ml", "old", [4]float64{1, 0, 10, 1}, [4]float64{0, 0, 5, 0})
	old.Enforcement = []*agents.Enforcement{{UID: "u-old", Ended: t0.Add(-5 * time.Second)}}
	scan := cg("ml", "scan", [4]float64{8, 0, 100, 2}, [4]float64{})
	scan.UsageUncertain = true
	for _, r := range nr1.All {
		scan.Usage[r], scan.Ratio[r] = nil, agents.Ratio(math.NaN())
	}
	n := &agents.Node{Name: "node-c", Agent: "nr1-system/nr1-agent-c4t8w", Mode: "dry-run", CGs: []*agents.CG{etl, bert, old, scan}}
	for i, r := range nr1.All {
		n.Capacity[r], n.Allocatable[r], n.Unattributed[r] = quantity([4]float64{116244, 512, 13417, 65536}[i]), quantity([4]float64{116244, 512, 13417, 65536}[i]), quantity(0)
		n.Allocated[r], n.Used[r] = quantity([4]float64{12, 64, 1410, 9}[i]), nil
	}
	return n
}

// threeNodes: the fixture's node-a, node-b that could not be read, and node-c.
func threeNodes(t *testing.T) []*agents.Node { return append(nodes(t), nodeC()) }

// -o wide: each node's mode and agent, each CG's ratios and where its ladder stands,
// at the fixture's moment (12 s after the hog went over again).
func TestTopWide(t *testing.T) {
	var out bytes.Buffer
	if err := writeTop(&out, threeNodes(t), topOptions{output: "wide", now: t0.Add(12 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	golden(t, "top-wide.golden", out.Bytes())
	got := out.String()
	for _, want := range []string{
		"throttled, over ai_hypervisor_queue for 12s, 2 steps taken, next kill in 3s",
		"dry-run, over compute_dma_memory for 42s, 1 step taken, next kill in 8s",
		"dry-run, back under cpu_dma_memory, resets in 6s, 1 step taken",
		"ended (killed or evicted) 17s ago",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
}

// A step overdue (deferred by the rate limit) is due, not negative; a pod re-created
// while its predecessor's throttle is lifted shows both ladders.
func TestTopEnforcementColumn(t *testing.T) {
	c := &agents.CG{Enforcement: []*agents.Enforcement{{UID: "old", Throttled: true}, {UID: "new"}}}
	c.Enforcement[1].Rungs[nr1.HypervisorQueue] = agents.Rung{Over: t0, Steps: 1, Next: "throttle", NextAt: t0.Add(5 * time.Second)}
	if got, want := enforcement(c, false, t0.Add(7*time.Second)), "throttled; over ai_hypervisor_queue for 7s, 1 step taken, next throttle due"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got := enforcement(&agents.CG{}, true, t0); got != "-" {
		t.Errorf("no ladder: %q", got)
	}
}

// Each key orders the CG table, a golden file per key.
func TestTopSortBy(t *testing.T) {
	for _, k := range sortKeys {
		t.Run(k.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := writeTop(&out, threeNodes(t), topOptions{sortBy: k.name, now: t0}); err != nil {
				t.Fatal(err)
			}
			golden(t, "top-sort-"+k.name+".golden", out.Bytes())
		})
	}
}

// What each key puts first and last, so that a golden file rewritten wrong is seen.
func TestTopSortOrder(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"", "rogue hog bert resnet50 etl old scan starting"},
		{"max_ratio", "rogue hog bert resnet50 etl old scan starting"},
		{"namespace", "etl resnet50 bert hog old rogue scan starting"},
		{"pod", "bert etl hog old resnet50 rogue scan starting"},
		{"node", "resnet50 hog rogue starting etl bert old scan"},
		{"compute_dma", "resnet50 bert rogue etl hog old scan starting"},
		{"ai_hypervisor_ratio", "hog resnet50 bert etl old rogue scan starting"},
		// rogue's ratio of nothing over nothing is unknown (NaN): last, with the others.
		{"cpu_dma_ratio", "etl resnet50 bert hog old rogue scan starting"},
	} {
		var out bytes.Buffer
		if err := writeTop(&out, threeNodes(t), topOptions{sortBy: tc.key}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(cgOrder(out.String()), " "); got != tc.want {
			t.Errorf("--sort-by %q: CGs in order %q, want %q", tc.key, got, tc.want)
		}
	}
}

// cgOrder is the pods of the CG table, top to bottom.
func cgOrder(table string) []string {
	var order []string
	inCGs := false
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "NAMESPACE":
			inCGs = true
		case inCGs && len(f) > 1:
			order = append(order, f[1])
		}
	}
	return order
}

// With -o json, --sort-by orders each node's CGs; without, they stay by namespace and pod.
func TestTopSortByJSON(t *testing.T) {
	order := func(sortBy string) []string {
		var out bytes.Buffer
		if err := writeTop(&out, []*agents.Node{nodeC()}, topOptions{output: "json", sortBy: sortBy}); err != nil {
			t.Fatal(err)
		}
		var pods []string
		for _, line := range strings.Split(out.String(), "\n") {
			if p, ok := strings.CutPrefix(strings.TrimSpace(line), `"pod": "`); ok {
				pods = append(pods, strings.TrimSuffix(p, `",`))
			}
		}
		return pods
	}
	if got, want := order(""), []string{"etl", "bert", "old", "scan"}; !slices.Equal(got, want) {
		t.Errorf("without --sort-by: %v, want the agent's order %v", got, want)
	}
	if got, want := order("pod"), []string{"bert", "etl", "old", "scan"}; !slices.Equal(got, want) {
		t.Errorf("--sort-by pod: %v, want %v", got, want)
	}
}

// An unknown key or output is a usage error (exit status 2) naming what is valid,
// refused before anything is read.
func TestTopRefusesUnknownSortKeyAndOutput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"top", "--sort-by", "ratio"}, `--sort-by "ratio": want one of namespace, pod, node, max_ratio, compute_dma, compute_dma_ratio, cpu_dma, cpu_dma_ratio, docker_partition, docker_partition_ratio, ai_hypervisor, ai_hypervisor_ratio`},
		{[]string{"top", "-o", "table"}, `--output "table": want wide, json or yaml`},
	} {
		var out, errOut bytes.Buffer
		cmd := newRoot(nil, &out, &errOut)
		cmd.SetArgs(append(tc.args, "--kubeconfig", "/nonexistent"))
		err := cmd.Execute()
		var usage usageError
		if !errors.As(err, &usage) {
			t.Errorf("%v: %v, want a usage error", tc.args, err)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("%v: %q, want %q", tc.args, err, tc.want)
		}
	}
}
