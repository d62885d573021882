// SPDX-License-Identifier: Apache-2.0

// Command mutate breaks a copy of the agent's source on purpose, one mutant at a time,
// for make trust-mutants: the trust suite must fail against each. A mutant is one
// change of the source, found by its exact text; a change whose text is not found once
// is refused, so that a mutant the code has moved away from is noticed, never run as
// the agent it no longer breaks.
//
//	mutate -list              the mutants, one a line: name, what, and whether the
//	                          budget gate is on in its trial (gate) or off (ladder)
//	mutate -name N -dir D     apply mutant N to the source tree D
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// change replaces old, found exactly once in file, by replacement.
type change struct {
	file, old, replacement string
}

// mutant is an agent broken in one way the suite must catch, and how. A gate mutant is
// judged with the budget gate on; the others with it off, since the gate would refuse
// the queue overruns their ladders must act on.
type mutant struct {
	name, what string
	changes    []change
	gate       bool
}

var mutants = []mutant{
	{"kill-disabled", "a kill stops nothing, and reports success (the Event says NR1Killed)",
		[]change{{"agent/act/actuate/actuate.go",
			"if a.KillTimeout == 0 && a.Killer != nil && c.Cgroup != \"\" {",
			"if false {"},
			{"agent/act/actuate/actuate.go",
				"if err := a.Stopper.StopContainer(ctx, c.ID, a.KillTimeout); err != nil {",
				"if err := error(nil); err != nil {"}}, false},
	{"throttle-disabled", "a throttle attaches nothing, and reports success (the Event says NR1Throttled)",
		[]change{{"agent/act/actuate/actuate.go",
			"if err := a.Throttler.Attach(act.UID, act.PodCgroup); err != nil {",
			"if err := error(nil); err != nil {"}}, false},
	{"uncertainty-trusted", "a CG's own uncertainty protects it, as the node's does",
		[]change{{"agent/view/sample.go",
			"\tcase CauseInFlight, CauseRing, CauseFDTable, CauseUnlinked:\n\t\treturn true",
			"\tcase CauseInFlight, CauseRing, CauseFDTable, CauseUnlinked:\n\t\treturn false"}}, false},
	{"allocation-zero", "every CG's allocation read as zero, known",
		[]change{{"agent/observe/inventory/inventory.go",
			"cg.Allocation, cg.AllocationKnown = nr1.Max(sum, initMax), true",
			"cg.Allocation, cg.AllocationKnown = nr1.Amounts{}, true"}}, false},
	{"usage-halved", "every CG's usage judged at half of what it holds",
		[]change{{"agent/measure/sampler/sampler.go",
			"cg.Ratio = view.Ratios(cg.Usage, cg.Allocation)",
			"for r := range cg.Usage {\n\t\t\tcg.Usage[r] /= 2\n\t\t}\n\t\tcg.Ratio = view.Ratios(cg.Usage, cg.Allocation)"}}, false},
	{"inflight-to-receiver", "a queue in flight charged to the CG whose socket holds it, not to its sender",
		[]change{{"bpf/footprint.bpf.c",
			"\t\tsender_of(skb, parms, &c->sender);",
			"\t\tsender_of(skb, parms, &c->sender);\n" +
				"\t\tvoid *queue = c->head;\n" +
				"\t\tstruct sock *receiver = queue - bpf_core_field_offset(struct sock, sk_receive_queue);\n" +
				"\t\tchain_of(BPF_CORE_READ(receiver, sk_cgrp_data.cgroup), &c->sender);"}}, false},
	{"gate-doubled", "the budget gate holds each CG to twice the queues it booked",
		[]change{{"agent/act/prevent/prevent.go",
			"want := int64(m.Allocation[Gated]) // a queue's unit is one handle",
			"want := 2 * int64(m.Allocation[Gated])"}}, true},
}

func main() {
	list := flag.Bool("list", false, "print the mutants' names")
	name := flag.String("name", "", "the mutant to apply")
	dir := flag.String("dir", "", "the source tree to apply it to")
	flag.Parse()
	if *list {
		for _, m := range mutants {
			judged := "ladder"
			if m.gate {
				judged = "gate"
			}
			fmt.Printf("%s\t%s\t%s\n", m.name, m.what, judged)
		}
		return
	}
	if err := apply(*name, *dir); err != nil {
		fmt.Fprintf(os.Stderr, "mutate: %v\n", err)
		os.Exit(2)
	}
}

func apply(name, dir string) error {
	if dir == "" {
		return errors.New("-dir: the source tree to change is required")
	}
	for _, m := range mutants {
		if m.name != name {
			continue
		}
		for _, c := range m.changes {
			path := filepath.Join(dir, c.file)
			b, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("mutant %s: %w", name, err)
			}
			if n := strings.Count(string(b), c.old); n != 1 {
				return fmt.Errorf("mutant %s: %q found %d times in %s, want once: the code moved, change the mutant", name, c.old, n, c.file)
			}
			//nolint:gosec // G703: a file of the table's, in the tree the user named
			if err := os.WriteFile(path, []byte(strings.Replace(string(b), c.old, c.replacement, 1)), 0o644); err != nil {
				return fmt.Errorf("mutant %s: %w", name, err)
			}
		}
		// The BPF objects are built from their C by make generate, not by the image's
		// build: a mutant of the C is generated here.
		if slices.ContainsFunc(m.changes, func(c change) bool { return strings.HasSuffix(c.file, ".bpf.c") }) {
			gen := exec.Command("go", "generate", "./bpf")
			gen.Dir, gen.Stdout, gen.Stderr = dir, os.Stderr, os.Stderr
			if err := gen.Run(); err != nil {
				return fmt.Errorf("mutant %s: generating its BPF objects: %w", name, err)
			}
		}
		return nil
	}
	return fmt.Errorf("-name %q: no such mutant (see -list)", name)
}
