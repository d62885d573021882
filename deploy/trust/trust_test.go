// SPDX-License-Identifier: Apache-2.0

package trust

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// The oracle is only as good as the generator's arithmetic: a case within its booking
// holds at most it, counted as the agent counts (DMA ranges as a union, a queue once
// however many fds), and an overrun passes it by the margin; over many seeds.
func TestCasesKeepTheirPromise(t *testing.T) {
	for seed := range uint64(300) {
		for _, mode := range []Mode{DevicePlugin, DRA} {
			p := Generate(seed, mode, 10*time.Minute, 12, 4)
			for _, c := range p.Cases {
				for _, r := range []nr1.Resource{nr1.ComputeDMAMemory, nr1.CPUDMAMemory, nr1.HypervisorQueue} {
					if held := c.Held(r); held > int64(c.Booked[r]) {
						t.Fatalf("seed %d %s %s/%s holds %d of %s, booked %d: %+v", seed, mode, c.Namespace, c.Name, held, r, c.Booked[r], c.Holders)
					}
				}
				o := c.Over
				if o == nil {
					continue
				}
				// The docker partition's overrun writes the booking again, the image's
				// size on top: the runner's arithmetic, at run time.
				if after, booked := c.HeldAfter(o.Resource), int64(c.Booked[o.Resource]); o.Resource != nr1.DockerPartition && (after < booked+1 || (o.Degree == "" && float64(after) < float64(booked)*overMargin)) {
					t.Fatalf("seed %d %s/%s: over to %d of %s, booked %v (%s): not over by a unit, or by %.2f", seed, c.Namespace, c.Name, after, o.Resource, booked, o.Degree, overMargin)
				}
				if h := c.Holders[o.Holder]; h.Role == Init || (o.Resource == nr1.HypervisorQueue && !h.Books) {
					t.Fatalf("seed %d %s/%s: overrun by %+v", seed, c.Namespace, c.Name, h)
				}
				if o.At < 20*time.Second || o.At > p.Duration-time.Minute {
					t.Fatalf("seed %d: overrun at %v of %v", seed, o.At, p.Duration)
				}
			}
		}
	}
}

// A seed replays: the same plan, case for case and fault for fault.
func TestSeedReplays(t *testing.T) {
	a, b := Generate(42, DRA, 10*time.Minute, 12, 4), Generate(42, DRA, 10*time.Minute, 12, 4)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("seed 42 gave two plans")
	}
	if c := Generate(43, DRA, 10*time.Minute, 12, 4); reflect.DeepEqual(a.Cases, c.Cases) {
		t.Fatal("seeds 42 and 43 gave the same cases")
	}
}

// Over a few seeds the generator covers the shapes the suite exists for.
func TestShapesAreCovered(t *testing.T) {
	seen := map[string]bool{}
	names := map[string][]string{}
	for seed := range uint64(20) {
		for _, mode := range []Mode{DevicePlugin, DRA} {
			p := Generate(seed, mode, 10*time.Minute, 12, 4)
			for _, f := range p.Faults {
				seen["fault "+f.What] = true
			}
			for _, c := range p.Cases {
				seen[string(c.Kind)] = true
				if c.Kind == SharedClaim && mode != DRA {
					t.Errorf("seed %d: a shared claim in %s mode", seed, mode)
				}
				seen["restart "+c.RestartPolicy] = true
				names[c.Name] = append(names[c.Name], c.Namespace)
				if c.Over != nil {
					seen["over "+c.Over.Resource.Short()] = true
					if c.Over.Degree != "" && c.Over.Resource != nr1.DockerPartition {
						after, booked := c.HeldAfter(c.Over.Resource), int64(c.Booked[c.Over.Resource])
						switch {
						case after == booked+1:
							seen["one unit over"] = true
						case after >= 2*booked && booked > 0:
							seen["several times over"] = true
						}
					}
				} else {
					seen["within"] = true
				}
				for _, h := range c.Holders {
					seen[string(h.Role)] = true
					if h.Books && h.Role != Main {
						seen[string(mode)+" "+string(h.Role)+" booking"] = true
					}
					if h.Books && mode == DevicePlugin && h.Name != "health-handler" {
						t.Errorf("seed %d: device-plugin booking on %s", seed, h.Name)
					}
					if h.Fork > 0 {
						seen["fork"] = true
					}
					if h.Dup > 0 {
						seen["dup"] = true
					}
					if h.InFlight > 0 {
						seen["in flight"] = true
					}
					if h.Ring > 0 {
						seen["io_uring"] = true
					}
					if h.MoveAt > 0 {
						seen["child cgroup"] = true
					}
					if h.MoveAt > 0 && h.MoveDeep {
						seen["cgroup past PATH_MAX"] = true
					}
					if h.MoveDeep && h.MoveAt == 0 {
						t.Errorf("seed %d: %s moved deep but never moved", seed, h.Name)
					}
					if h.Copies > 1 {
						seen["copies"] = true
					}
					if h.BigEnv {
						seen["big env"] = true
						if h.Books || h.Role == Init {
							t.Errorf("seed %d: a big environment on %s, a booking or classic init container", seed, h.Name)
						}
					}
				}
				if c.Decoy {
					seen["kubelet decoy"] = true
				}
				if target := c.Marks(); target != "" {
					seen["forged mark"] = true
					forged := slices.IndexFunc(p.Cases, func(s Case) bool { return s.Name == target && s.Kind == SharedClaim })
					if p.Mode != DRA || forged < 0 || p.Cases[forged].Namespace == c.Namespace || c.Kind != BarePod || c.RestartPolicy != "Never" {
						t.Errorf("seed %d: %s forges a mark of %q: want, in DRA mode and on a bare pod that never restarts, a shared claim of another namespace", seed, c.Name, target)
					}
					for _, h := range c.Holders {
						if h.Mark != "" && (h.Books || h.Role == Init) {
							t.Errorf("seed %d: %s's forged mark on %s, a booking or classic init container", seed, c.Name, h.Name)
						}
					}
				}
				for _, h := range c.Holders {
					if h.SendTo == "" {
						continue
					}
					seen["framing"] = true
					v := slices.IndexFunc(p.Cases, func(o Case) bool { return o.Namespace+"/"+o.Name == h.SendTo })
					if v < 0 || p.Cases[v].Namespace == c.Namespace || !slices.ContainsFunc(p.Cases[v].Holders, func(o Holder) bool { return o.Bind }) {
						t.Errorf("seed %d: %s sends to %q: want a case of another namespace binding a socket", seed, c.Name, h.SendTo)
						continue
					}
					victim := p.Cases[v]
					for _, fc := range []Case{c, victim} {
						if fc.Kind != BarePod || fc.RestartPolicy != "Never" || fc.Over != nil {
							t.Errorf("seed %d: framing case %s is %s/%s, over %v: want a bare pod that never restarts, within", seed, fc.Name, fc.Kind, fc.RestartPolicy, fc.Over)
						}
					}
					if c.Held(nr1.HypervisorQueue) > int64(c.Booked[nr1.HypervisorQueue]) ||
						victim.Held(nr1.HypervisorQueue)+int64(h.InFlight) <= int64(victim.Booked[nr1.HypervisorQueue]) {
						t.Errorf("seed %d: %s sends %d queues to %s: want the sender within and the victim over if charged them", seed, c.Name, h.InFlight, victim.Name)
					}
				}
				if c.SelfUncertain {
					seen["own uncertainty"] = true
					h := c.Holders[0]
					flood := h.Flood*(1+h.Fork) >= 1_000_000 && h.Flood < 20000-h.Fork-100 // within the stack's fd limit, pidfds beside
					if flood {
						seen["fd flood"] = true
					}
					if c.Over != nil || c.Queues() >= int64(c.Booked[nr1.HypervisorQueue]) || h.RingSlots <= 1<<14 && !flood || !h.Probe {
						t.Errorf("seed %d: own uncertainty on %+v: want within, queues to spare for a probe, a ring past what a scan reads or a flood of a million fds", seed, c)
					}
				}
				for i, h := range c.Holders {
					if h.Role != Sidecar || h.ExitAfter == 0 {
						continue
					}
					seen["restarting sidecar"] = true
					if c.Over == nil || c.Over.Holder == i || h.ExitAfter != RestartEvery || h.ComputeMB+h.CPUMB+h.Queues > 0 || h.Dup+h.InFlight+h.Ring+h.Pool > 0 || h.Mark != "" {
						t.Errorf("seed %d: %s's sidecar %+v exits after %s: want a CG going over, the sidecar holding nothing, not the one going over nor forging a mark, every %s", seed, c.Name, h, h.ExitAfter, RestartEvery)
					}
				}
				for _, h := range c.Holders {
					if h.Pool == 0 {
						continue
					}
					seen["worker pool"] = true
					if c.Over != nil || !h.Books || h.Role != Main || h.Probe || c.Held(nr1.HypervisorQueue) != int64(c.Booked[nr1.HypervisorQueue]) && h.Pool < 4 {
						t.Errorf("seed %d: %s's pool of %d on %+v: want a booking main container, no probe, the CG within and at its booking of queues (or a pool of 4)", seed, c.Name, h.Pool, h)
					}
				}
				for _, h := range c.Holders {
					if !h.Compat {
						continue
					}
					seen["32-bit calls"] = true
					if c.Over != nil && c.Over.Holder == 0 {
						seen["32-bit going over"] = true
					}
					if h.Pool > 0 {
						seen["32-bit worker pool"] = true
					}
					if !h.Books || h.Role != Main || h.Ring+h.RingSlots > 0 || c.Kind == SharedClaim {
						t.Errorf("seed %d: %s runs 32-bit %+v: want the booking main container of a CG of its own, without io_uring", seed, c.Name, h)
					}
				}
				// A parker is a classic init container that books (DRA), after its keeper, a
				// sidecar: within the booking, parked queues counted.
				for i, h := range c.Holders {
					if h.Park == 0 {
						continue
					}
					seen["parked by a container gone"] = true
					keeper := slices.IndexFunc(c.Holders, func(o Holder) bool { return o.Keep })
					if c.Mode != DRA || h.Role != Init || !h.Books || keeper < 0 || keeper > i || c.Holders[keeper].Role != Sidecar ||
						c.Held(nr1.HypervisorQueue) > int64(c.Booked[nr1.HypervisorQueue]) || c.HeldAfter(nr1.HypervisorQueue) < int64(h.Park) {
						t.Errorf("seed %d: %s parks %d queues from %+v: want a DRA-booking init container after a keeper sidecar, within the booking, the parked counted after it exits", seed, c.Name, h.Park, h)
					}
				}
				if o := c.Over; o != nil && o.Resource == nr1.HypervisorQueue {
					probing := c.HeldAfter(o.Resource)+1 < 2*int64(c.Booked[o.Resource])
					if c.Holders[o.Holder].Probe != probing {
						t.Errorf("seed %d: %s goes over on queues to %d of %d, probing %v", seed, c.Name, c.HeldAfter(o.Resource), c.Booked[o.Resource], c.Holders[o.Holder].Probe)
					}
					if probing {
						seen["throttle judged"] = true
					}
				}
				if o := c.Over; o != nil && o.Resource == nr1.DockerPartition && c.Kind == StatefulSet {
					t.Errorf("seed %d: a StatefulSet's docker partition overrun, its pod deleted by the runner", seed)
				}
				if len(c.Holders) > 1 && c.Holders[0].ComputeOffsetMB != c.Holders[1].ComputeOffsetMB {
					seen["distinct ranges"] = true
				}
			}
		}
	}
	for _, want := range []string{"Pod", "Job", "StatefulSet", "restart Never", "restart OnFailure", "restart Always", "within",
		"over compute_dma_memory", "over ai_hypervisor_queue", "main", "init", "sidecar", "dra init booking", "dra sidecar booking",
		"fork", "dup", "in flight", "io_uring", "child cgroup", "cgroup past PATH_MAX", "distinct ranges", "fault restart-kubelet", "fault restart-runtime", "fault delete-agent", "fault pause-kubelet",
		"SharedClaim", "fault stop-apiserver", "fault roll-agent", "fault damage-checkpoint", "copies", "big env", "kubelet decoy", "over cpu_dma_memory", "one unit over", "several times over", "own uncertainty", "fd flood", "throttle judged", "over docker_partition", "forged mark", "framing", "worker pool", "restarting sidecar", "parked by a container gone",
		"32-bit calls", "32-bit going over", "32-bit worker pool"} {
		if !seen[want] {
			t.Errorf("20 seeds never generate %s", want)
		}
	}
	repeated := false
	for _, ns := range names {
		repeated = repeated || len(slices.Compact(slices.Sorted(slices.Values(ns)))) > 1
	}
	if !repeated {
		t.Error("no pod name in several namespaces")
	}
}

// A holder's arguments say what the case says it holds, and its overrun.
func TestHolderArgs(t *testing.T) {
	c := Case{Booked: nr1.Amounts{4, 0, 0, 3}, Holders: []Holder{
		{Name: "health-handler", Role: Main, Books: true, ComputeMB: 2, ComputeOffsetMB: 1, Queues: 2, Dup: 3, Fork: 2},
		{Name: "c0", Role: Init, ComputeMB: 1, ExitAfter: 7 * time.Second},
	}, Over: &Overrun{Holder: 0, Resource: nr1.HypervisorQueue, At: 30 * time.Second, To: 4}}
	got := strings.Join(c.Holders[0].Args(&c, 0), " ")
	want := "--compute-dma-mb=2 --compute-dma-offset-mb=1 --cpu-dma-mb=0 --cpu-dma-offset-mb=0 --queues=2 --fork=2 --dup-queues=3 --step=30s:queues=4"
	if got != want {
		t.Errorf("health-handler: %s\nwant %s", got, want)
	}
	if got := strings.Join(c.Holders[1].Args(&c, 1), " "); !strings.HasSuffix(got, "--step=7s:queues=0 --exit") {
		t.Errorf("init: %s", got)
	}
	if c.Held(nr1.HypervisorQueue) != 3 || c.HeldAfter(nr1.HypervisorQueue) != 5 || c.Held(nr1.ComputeDMAMemory) != 3 {
		t.Errorf("held %d queues, %d after, %d MB", c.Held(nr1.HypervisorQueue), c.HeldAfter(nr1.HypervisorQueue), c.Held(nr1.ComputeDMAMemory))
	}
}

// Pods sharing a claim go over together (each within the claim, their union past it) or
// one alone; within, each and all of them hold at most the claim.
func TestSharedClaimsGoOverTogetherOrAlone(t *testing.T) {
	seen := map[string]bool{}
	for seed := range uint64(300) {
		for _, c := range Generate(seed, DRA, 10*time.Minute, 8, 3).Cases {
			if c.Kind != SharedClaim {
				continue
			}
			if c.Pods < 2 || len(c.Holders) != c.Pods {
				t.Fatalf("seed %d: %d pods, holders %+v", seed, c.Pods, c.Holders)
			}
			o := c.Over
			if o == nil {
				continue
			}
			alone := false
			for i, h := range c.Holders {
				if i == o.Holder {
					h.ComputeMB = o.To
				}
				alone = alone || h.ComputeMB > int64(c.Booked[nr1.ComputeDMAMemory])
			}
			if alone != c.OverAlone() {
				t.Errorf("seed %d: %s over alone %v, OverAlone says %v", seed, c.Name, alone, c.OverAlone())
			}
			if alone {
				seen["alone"] = true
			} else {
				seen["together"] = true
			}
		}
	}
	if !seen["alone"] || !seen["together"] {
		t.Errorf("300 seeds go over %v, want both alone and together", seen)
	}
}

// A seed kept before later additions still plays its plan: what was added later comes
// from a stream of its own, after what the seed drew.
func TestLaterAdditionsKeepKeptSeeds(t *testing.T) {
	for _, mode := range []Mode{DevicePlugin, DRA} {
		p := Generate(1796149021002346292, mode, 5*time.Minute, 8, 3)
		var kept []Fault
		for _, f := range p.Faults {
			if slices.Contains(Faults, f.What) {
				kept = append(kept, f)
			}
		}
		if mode == DevicePlugin {
			want := []Fault{{36714989400, "restart-kubelet"}, {76955634193, "restart-kubelet"}, {129987107026, "restart-kubelet"}}
			if !reflect.DeepEqual(kept, want) {
				t.Errorf("the kept seed's faults %v, want %v", kept, want)
			}
			if c := p.Cases[7]; c.Name != "cg-3-0" || c.Namespace != "nr1-trust-b" || c.Kind != StatefulSet {
				t.Errorf("the kept seed's eighth case %s/%s %s", c.Namespace, c.Name, c.Kind)
			}
		}
	}
}

// Overruns are placed to be judged: in a 10-minute run (5 minutes a mode), at least 90 %
// of them fall, with the bound on their action (45 s) and a pod's start, before the
// run's end, a StatefulSet's counted from its successor's latest start.
func TestOverrunsAreJudgeable(t *testing.T) {
	var all, judgeable int
	for seed := range uint64(200) {
		for _, mode := range []Mode{DevicePlugin, DRA} {
			p := Generate(seed, mode, 5*time.Minute, 8, 0)
			for _, c := range p.Cases {
				o := c.Over
				if o == nil {
					continue
				}
				all++
				due := o.At + 45*time.Second + 15*time.Second
				if c.Kind == StatefulSet {
					due += RecreateBy
				}
				if due <= p.Duration {
					judgeable++
				}
			}
		}
	}
	if judgeable*10 < all*9 {
		t.Errorf("%d of %d overruns can be judged before the run's end, want 90 %%", judgeable, all)
	}
	t.Logf("%d of %d overruns judgeable", judgeable, all)
}

// Each seed runs the gate in exactly one mode, and consecutive seeds in both.
func TestEveryRunJudgesTheGateInOneMode(t *testing.T) {
	for seed := range uint64(4) {
		if Prevents(seed, DevicePlugin) == Prevents(seed, DRA) {
			t.Errorf("seed %d: gate on in device-plugin mode %v, in DRA mode %v: want one of them", seed, Prevents(seed, DevicePlugin), Prevents(seed, DRA))
		}
		if Prevents(seed, DevicePlugin) == Prevents(seed+1, DevicePlugin) {
			t.Errorf("seeds %d and %d run the gate in the same mode", seed, seed+1)
		}
	}
}
