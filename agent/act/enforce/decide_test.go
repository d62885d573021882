// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

var t0 = time.Unix(1_000_000, 0)

const mb = 1 << 20

// cg is a ResNet-50 CG (3 / 0 / 2392 / 7) holding usage (base units), its containers
// started long before t0.
func cg(uid string, usage nr1.Usage) *view.Measured {
	c := &view.Measured{CG: &view.CG{
		UID: uid, Namespace: "default", Name: "cg-" + uid, AllocationKnown: true, Allocation: nr1.Amounts{3, 0, 2392, 7},
		Containers: []*view.Container{
			{ID: uid + "-hh", Name: "health-handler", State: view.Running, StartedAt: t0.Add(-time.Hour), Cgroup: view.Cgroup{V2: "/cg/pod" + uid + "/hh"}},
			{ID: uid + "-g", Name: "graph", State: view.Running, StartedAt: t0.Add(-time.Hour), Cgroup: view.Cgroup{V2: "/cg/pod" + uid + "/g"}},
		},
	}, Usage: usage, PerContainer: map[string]nr1.Usage{"health-handler": {}, "graph": usage}}
	c.Ratio = view.Ratios(usage, c.Allocation)
	return c
}

func snap(at time.Time, cgs ...*view.Measured) *view.Sample {
	return &view.Sample{Taken: at, Inputs: view.Inputs{RuntimeConnected: true, AllocationRead: at}, PartitionRead: at, CGs: cgs}
}

// run feeds Decide one sample per second from t0, each built by at(second), and
// returns the actions by second.
func run(p Policy, seconds int, at func(s int) *view.Sample) map[int][]Action {
	st := NewState(t0.Add(-time.Hour))
	out := map[int][]Action{}
	for s := 0; s <= seconds; s++ {
		now := t0.Add(time.Duration(s) * time.Second)
		if a := Decide(now, at(s), st, p); len(a) > 0 {
			out[s] = a
		}
	}
	return out
}

func kinds(by map[int][]Action) string {
	var b strings.Builder
	for s := 0; s <= 120; s++ {
		for _, a := range by[s] {
			fmt.Fprintf(&b, "%d:%s/%s", s, a.Kind, a.Resource)
			if a.DryRun {
				b.WriteString("(dry)")
			}
			if a.Hard {
				b.WriteString("(hard)")
			}
			b.WriteString(" ")
		}
	}
	return strings.TrimSpace(b.String())
}

func TestDecide(t *testing.T) {
	over := nr1.Usage{4 * mb, 0, 0, 0}   // 4 MB of 3: ratio 1.33
	within := nr1.Usage{3 * mb, 0, 0, 7} // exactly the allocation
	hog := nr1.Usage{0, 0, 0, 20}        // 20 queues of 7: past the hard ratio
	slightlyUnder := nr1.Usage{29 * mb / 10, 0, 0, 0}
	def := DefaultPolicy()
	def.Warmup = Duration{Duration: 0}
	steady := func(u nr1.Usage) func(int) *view.Sample {
		return func(s int) *view.Sample { return snap(t0.Add(time.Duration(s)*time.Second), cg("a", u)) }
	}
	tests := []struct {
		name    string
		policy  func(Policy) Policy
		seconds int
		at      func(int) *view.Sample
		want    string
	}{
		{name: "ladder: warn, throttle after 5 s, kill after 15 s", seconds: 30, at: steady(over),
			want: "0:warn/compute_dma_memory 5:throttle/compute_dma_memory 15:kill/compute_dma_memory"},
		{name: "within budget: nothing", seconds: 30, at: steady(within), want: ""},
		{name: "hard ratio: warn and kill at once", seconds: 30, at: steady(hog),
			want: "0:warn/ai_hypervisor_queue(hard) 0:kill/ai_hypervisor_queue(hard)"},
		{name: "dry-run: the same ladder, marked", seconds: 30, at: steady(over), policy: func(p Policy) Policy { p.Mode = DryRun; return p },
			want: "0:warn/compute_dma_memory(dry) 5:throttle/compute_dma_memory(dry) 15:kill/compute_dma_memory(dry)"},
		{name: "exempt namespace", seconds: 30, at: steady(over), policy: func(p Policy) Policy { p.ExemptNamespaces = []string{"default"}; return p }, want: ""},
		{name: "agent warm-up delays the ladder", seconds: 30, at: steady(over),
			policy: func(p Policy) Policy { p.Warmup = Duration{Duration: time.Hour + 10*time.Second}; return p },
			want:   "10:warn/compute_dma_memory 15:throttle/compute_dma_memory 25:kill/compute_dma_memory"},
		{name: "hysteresis: a dip not held long enough keeps the ladder going", seconds: 30,
			at: func(s int) *view.Sample {
				u := over
				if s == 3 || s == 4 {
					u = slightlyUnder // under, but not by the 5 % margin for 10 s
				}
				return snap(t0.Add(time.Duration(s)*time.Second), cg("a", u))
			},
			want: "0:warn/compute_dma_memory 5:throttle/compute_dma_memory 15:kill/compute_dma_memory"},
		{name: "hysteresis: back under for the hold lifts the throttle and restarts the ladder", seconds: 40,
			at: func(s int) *view.Sample {
				u := over
				if s >= 8 && s < 20 {
					u = nr1.Usage{1 * mb, 0, 0, 0}
				}
				return snap(t0.Add(time.Duration(s)*time.Second), cg("a", u))
			},
			want: "0:warn/compute_dma_memory 5:throttle/compute_dma_memory 18:unthrottle/compute_dma_memory 20:warn/compute_dma_memory 25:throttle/compute_dma_memory 35:kill/compute_dma_memory"},
		{name: "several resources over at once", seconds: 30, at: steady(nr1.Usage{4 * mb, 0, 2500 * mb, 8}),
			want: "0:warn/compute_dma_memory 0:warn/docker_partition 0:warn/ai_hypervisor_queue 5:throttle/compute_dma_memory 15:kill/compute_dma_memory"},
		{name: "usage without allocation is over a zero allocation", seconds: 30, at: steady(nr1.Usage{0, 1 * mb, 0, 0}),
			want: "0:warn/cpu_dma_memory(hard) 0:kill/cpu_dma_memory(hard)"},
		{name: "usage without allocation, ignored by policy", seconds: 30, at: steady(nr1.Usage{0, 1 * mb, 0, 0}),
			policy: func(p Policy) Policy { p.NoAllocation = "ignore"; return p }, want: ""},
		{name: "a pod with no NR1 allocation: its image is no partition breach", seconds: 30,
			at: func(s int) *view.Sample {
				c := cg("a", nr1.Usage{0, 0, 50 * mb, 0})
				c.Allocation = nr1.Amounts{}
				c.Ratio = view.Ratios(c.Usage, c.Allocation)
				return snap(t0.Add(time.Duration(s)*time.Second), c)
			}, want: ""},
		{name: "a pod with no NR1 allocation holding a queue is over", seconds: 30,
			at: func(s int) *view.Sample {
				c := cg("a", nr1.Usage{0, 0, 50 * mb, 1})
				c.Allocation = nr1.Amounts{}
				c.Ratio = view.Ratios(c.Usage, c.Allocation)
				return snap(t0.Add(time.Duration(s)*time.Second), c)
			}, want: "0:warn/ai_hypervisor_queue(hard) 0:kill/ai_hypervisor_queue(hard)"},
		{name: "docker partition: evicted after 20 s", seconds: 30, at: steady(nr1.Usage{0, 0, 2500 * mb, 0}),
			want: "0:warn/docker_partition 20:evict/docker_partition"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := def
			if tt.policy != nil {
				p = tt.policy(p)
			}
			if got := kinds(run(p, tt.seconds, tt.at)); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestUncertainAttributionDoesNothing(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup = Duration{Duration: 0}
	st := NewState(t0.Add(-time.Hour))
	overCG := func() *view.Measured { return cg("a", nr1.Usage{0, 0, 0, 20}) }
	unknown := overCG()
	unknown.AllocationKnown = false
	young := overCG()
	young.Containers[1].StartedAt = t0.Add(-time.Second) // the container holding the queues
	cases := map[string]*view.Sample{
		"stale sample":           snap(t0.Add(-time.Minute), overCG()),
		"runtime disconnected":   {Taken: t0, Inputs: view.Inputs{AllocationRead: t0}, CGs: []*view.Measured{overCG()}},
		"allocations never read": {Taken: t0, Inputs: view.Inputs{RuntimeConnected: true}, CGs: []*view.Measured{overCG()}},
		"allocation not known":   snap(t0, unknown),
		"container just started": snap(t0, young),
		"no sample":              nil,
	}
	for name, s := range cases {
		if a := Decide(t0, s, st, p); len(a) != 0 {
			t.Errorf("%s: %v", name, a)
		}
	}
}

func TestRateLimitDefersActions(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup, p.MaxActionsPerMinute = Duration{Duration: 0}, 3
	var cgs []*view.Measured
	for i := range 5 {
		cgs = append(cgs, cg(fmt.Sprint(i), nr1.Usage{0, 0, 0, 20}))
	}
	st := NewState(t0.Add(-time.Hour))
	first := Decide(t0, snap(t0, cgs...), st, p)
	if len(first) != 3 {
		t.Fatalf("%d actions in the first minute, want 3", len(first))
	}
	if again := Decide(t0.Add(time.Second), snap(t0.Add(time.Second), cgs...), st, p); len(again) != 0 {
		t.Fatalf("actions past the budget: %v", again)
	}
	later := Decide(t0.Add(61*time.Second), snap(t0.Add(61*time.Second), cgs...), st, p)
	if len(later) != 3 {
		t.Fatalf("%d deferred actions after the minute, want 3", len(later))
	}
	seen := map[string]bool{}
	for _, a := range append(first, later...) {
		if seen[a.UID+string(a.Kind)] {
			t.Errorf("%s of %s taken twice", a.Kind, a.UID)
		}
		seen[a.UID+string(a.Kind)] = true
	}
}

func TestExemptionAndBadAnnotation(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup = Duration{Duration: 0}
	exempt := cg("e", nr1.Usage{0, 0, 0, 20})
	exempt.Annotations = map[string]string{AnnotationKey: "disabled"}
	exempt.NamespaceLabels = map[string]string{AllowPodExemptionLabel: "true"}
	bad := cg("b", nr1.Usage{0, 0, 0, 20})
	bad.Annotations = map[string]string{AnnotationKey: "off"}
	st := NewState(t0.Add(-time.Hour))
	got := Decide(t0, snap(t0, exempt, bad), st, p)
	if len(got) != 3 || got[0].Kind != BadAnnotation || got[0].UID != "b" || got[1].UID != "b" || got[2].Kind != Kill {
		t.Fatalf("actions %+v", got)
	}
	if again := Decide(t0.Add(time.Second), snap(t0.Add(time.Second), exempt, bad), st, p); len(again) != 0 {
		t.Errorf("bad annotation reported again: %+v", again)
	}
}

func TestKillTargetsTheConsumer(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup = Duration{Duration: 0}
	c := cg("a", nr1.Usage{0, 0, 0, 20})
	c.PerContainer = map[string]nr1.Usage{"health-handler": {0, 0, 0, 18}, "graph": {0, 0, 0, 2}}
	got := Decide(t0, snap(t0, c), NewState(t0.Add(-time.Hour)), p)
	kill := got[len(got)-1]
	if kill.Kind != Kill || len(kill.Containers) != 1 || kill.Containers[0].Name != "health-handler" || kill.PodCgroup != "/cg/poda" {
		t.Fatalf("kill %+v", kill)
	}
	p.KillScope = "cg"
	got = Decide(t0, snap(t0, c), NewState(t0.Add(-time.Hour)), p)
	if kill = got[len(got)-1]; len(kill.Containers) != 2 {
		t.Fatalf("kill of the whole CG %+v", kill)
	}
	if !math.IsInf(float64(cg("z", nr1.Usage{0, 1, 0, 0}).Ratio[nr1.CPUDMAMemory]), 1) {
		t.Fatal("fixture: ratio over zero allocation is not +Inf")
	}
}

func TestEvictionRefusedFallsBackToKillOnHardBreach(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup = Duration{Duration: 0}
	st := NewState(t0.Add(-time.Hour))
	full := cg("a", nr1.Usage{0, 0, 5000 * mb, 0}) // past twice the partition allocation
	got := Decide(t0, snap(t0, full), st, p)
	if len(got) != 2 || got[1].Kind != Evict || !got[1].Hard {
		t.Fatalf("first %+v", got)
	}
	st.Outcome(got[1], fmt.Errorf("evicting: %w", ErrEvictionRefused), t0)
	for s := 1; s < 30; s++ {
		now := t0.Add(time.Duration(s) * time.Second)
		if a := Decide(now, snap(now, full), st, p); len(a) != 0 {
			t.Fatalf("at %d s, before the fallback bound: %+v", s, a)
		}
	}
	now := t0.Add(30 * time.Second)
	if a := Decide(now, snap(now, full), st, p); len(a) != 1 || a[0].Kind != Kill {
		t.Fatalf("fallback %+v", a)
	}
}

func TestPolicyValidate(t *testing.T) {
	d := DefaultPolicy()
	if err := d.Validate("enforcement"); err != nil {
		t.Fatalf("default policy: %v", err)
	}
	p := DefaultPolicy()
	p.Mode = "lenient"
	p.Resources[nr1.DockerPartition].Ladder = []Step{{Throttle, Duration{Duration: 0}}}
	p.Resources[nr1.ComputeDMAMemory].Ladder = []Step{{Kill, Duration{Duration: 0}}, {Warn, Duration{Duration: time.Second}}}
	p.Resources[nr1.HypervisorQueue].HardRatio = 0.5
	err := p.Validate("enforcement")
	for _, want := range []string{
		`enforcement.mode: must be enforce or dry-run, got "lenient"`,
		"enforcement.resources.docker_partition.ladder[0].action: the docker partition cannot be throttled",
		"enforcement.resources.compute_dma_memory.ladder[0].action: kill ends the CG: it must be the last step",
		"enforcement.resources.ai_hypervisor_queue.hardRatio: must be above 1",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

func TestGoneCGLosesItsThrottle(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup = Duration{Duration: 0}
	st := NewState(t0.Add(-time.Hour))
	st.AdoptThrottle("left-by-an-earlier-run")
	got := Decide(t0, snap(t0, cg("a", nr1.Usage{})), st, p)
	if len(got) != 1 || got[0].Kind != Unthrottle || got[0].UID != "left-by-an-earlier-run" {
		t.Fatalf("%+v", got)
	}
	if again := Decide(t0.Add(time.Second), snap(t0.Add(time.Second), cg("a", nr1.Usage{})), st, p); len(again) != 0 {
		t.Fatalf("again: %+v", again)
	}
}

// A CG whose processes the scan could not all read has a lower bound for its usage: a
// bound already over is acted on; one under neither acts nor counts as back under.
func TestUncertainUsageIsALowerBound(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup = Duration{Duration: 0}
	uncertain := func(u nr1.Usage) *view.Measured {
		c := cg("a", u)
		c.UsageUncertain = "the procfs scan ran out of time"
		return c
	}
	// 20 queues of 7 read before the scan stopped: past the hard ratio, certain.
	if got := Decide(t0, snap(t0, uncertain(nr1.Usage{0, 0, 0, 20})), NewState(t0.Add(-time.Hour)), p); len(got) == 0 || got[len(got)-1].Kind != Kill {
		t.Errorf("a lower bound past the hard ratio: %v, want the kill", got)
	}
	// Over (8 of 7) and warned; then only 2 read: not back under, the ladder waits.
	st := NewState(t0.Add(-time.Hour))
	if got := Decide(t0, snap(t0, cg("a", nr1.Usage{0, 0, 0, 8})), st, p); len(got) != 1 || got[0].Kind != Warn {
		t.Fatalf("over: %v, want a warning", got)
	}
	for s := 1; s <= 30; s++ {
		at := t0.Add(time.Duration(s) * time.Second)
		if got := Decide(at, snap(at, uncertain(nr1.Usage{0, 0, 0, 2})), st, p); len(got) != 0 {
			t.Fatalf("%d s: %v while uncertain under", s, got)
		}
	}
	// The ladder's clock stopped while only an uncertain lower bound under was seen
	// (1–31 s): over again, certain, the throttle is due 4 s later, the kill 14 s later.
	var got []string
	for s := 31; s <= 50; s++ {
		at := t0.Add(time.Duration(s) * time.Second)
		for _, a := range Decide(at, snap(at, cg("a", nr1.Usage{0, 0, 0, 8})), st, p) {
			got = append(got, fmt.Sprintf("%d:%s", s, a.Kind))
		}
	}
	if strings.Join(got, " ") != "35:throttle 45:kill" {
		t.Errorf("over again, certain, from 31 s: %v; want the throttle at 35 s and the kill at 45 s", got)
	}
}

// The pod's cgroup is a container's parent only when named for the pod: a shallow
// cgroupsPath never makes kubepods itself the throttle's target.
func TestPodCgroupIsNamedForThePod(t *testing.T) {
	for v2, want := range map[string]string{
		"/sys/fs/cgroup/kubepods/besteffort/podu-1/ctr":                                         "/sys/fs/cgroup/kubepods/besteffort/podu-1",
		"/sys/fs/cgroup/kubepods.slice/kubepods-besteffort-podu_1.slice/cri-containerd-c.scope": "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort-podu_1.slice",
		"/sys/fs/cgroup/kubepods/x":                                                             "",
		"/sys/fs/cgroup/kubepods/besteffort/podu-2/c":                                           "",
	} {
		c := cg("u-1", nr1.Usage{})
		c.Containers = c.Containers[:1]
		c.Containers[0].Cgroup.V2 = v2
		if got := podCgroup(c); got != want {
			t.Errorf("%s: pod cgroup %q, want %q", v2, got, want)
		}
	}
}

// The state is busy from going over until the hysteresis resets the ladder, and while
// throttled; not for a CG killed, which is left alone until it starts again.
func TestBusyWhileALadderIsUnderWay(t *testing.T) {
	p := DefaultPolicy()
	st := NewState(t0.Add(-time.Hour))
	at := func(s int, usage nr1.Usage) {
		Decide(t0.Add(time.Duration(s)*time.Second), snap(t0.Add(time.Duration(s)*time.Second), cg("a", usage)), st, p)
	}
	within, over, under := nr1.Usage{2 * mb, 0, 0, 7}, nr1.Usage{2 * mb, 0, 0, 8}, nr1.Usage{2 * mb, 0, 0, 6}
	at(0, within)
	if st.Busy() {
		t.Fatal("busy with every CG within its allocation")
	}
	at(1, over)
	if !st.Busy() {
		t.Fatal("not busy with a CG over")
	}
	at(2, under)
	if !st.Busy() {
		t.Fatal("not busy back under, before the hysteresis")
	}
	at(2+int(p.Hold.Seconds()), under)
	if st.Busy() {
		t.Fatal("busy after the hysteresis reset the ladder")
	}
	st.cgs["a"].Ended = true
	st.cgs["a"].Over[nr1.HypervisorQueue] = t0
	if st.Busy() {
		t.Error("busy for a CG killed")
	}
	st.cgs["a"].Throttled = true
	if !st.Busy() {
		t.Error("not busy with a throttle attached")
	}
}

// The ladder's clock runs only while the agent sees the CG: a CG over, then unseen for
// a minute (its allocation unknown, or no sample at all, as with the agent down), then
// over again is not throttled and killed at once as if it had been over all along.
func TestLadderClockPausesWhileUnseen(t *testing.T) {
	over := nr1.Usage{4 * mb, 0, 0, 0}
	p := DefaultPolicy()
	p.Warmup = Duration{Duration: 0}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for name, unseen := range map[string]func(s int) *view.Sample{
		"allocation unknown": func(s int) *view.Sample {
			c := cg("a", over)
			c.AllocationKnown, c.AllocationUnknown = false, "pod not in the kubelet's pod-resources answer"
			return snap(at(s), c)
		},
		"no samples":    func(int) *view.Sample { return nil },
		"stale samples": func(s int) *view.Sample { return snap(at(s-10), cg("a", over)) },
		"runtime away": func(s int) *view.Sample {
			sn := snap(at(s), cg("a", over))
			sn.RuntimeConnected = false
			return sn
		},
		"usage unknown": func(s int) *view.Sample {
			c := cg("a", over)
			c.UsageUncertain = "scan ran out of time"
			c.Usage = nr1.Usage{}
			c.Ratio = view.Ratios(c.Usage, c.Allocation)
			return snap(at(s), c)
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := kinds(run(p, 100, func(s int) *view.Sample {
				if s >= 3 && s < 63 {
					return unseen(s)
				}
				return snap(at(s), cg("a", over))
			}))
			// Seen over from 0 until the first sample that cannot judge it, at 3, and
			// again from 63: 5 s seen over at 65, 15 s at 75.
			if want := "0:warn/compute_dma_memory 65:throttle/compute_dma_memory 75:kill/compute_dma_memory"; got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

// A container in its warm-up leaves out only what it holds: a sidecar restarting more
// often than the warm-up does not shield a hog beside it, which is acted on as if the
// sidecar were steady; what the young container holds is judged once it is past it.
func TestAYoungContainerShieldsOnlyItself(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup = Duration{Duration: 0}
	restarting := func(holder int, u nr1.Usage) func(s int) *view.Sample {
		return func(s int) *view.Sample {
			now := t0.Add(time.Duration(s) * time.Second)
			c := cg("a", u)
			// The sidecar (health-handler) restarted within the last 1.5 s, every time.
			c.Containers[0].StartedAt = now.Add(-time.Duration(s%2) * time.Second)
			if holder == 0 {
				c.PerContainer = map[string]nr1.Usage{"health-handler": u, "graph": {}}
			}
			return snap(now, c)
		}
	}
	over := nr1.Usage{4 * mb, 0, 0, 0}
	// Up to the kill: a container started after it is the CG started again, with a
	// ladder of its own.
	for _, tc := range []struct {
		name    string
		holder  int // the container holding the usage
		u       nr1.Usage
		seconds int
		want    string
	}{
		{"a hog beside a restarting sidecar: killed at once", 1, nr1.Usage{0, 0, 0, 20}, 1,
			"0:warn/ai_hypervisor_queue(hard) 0:kill/ai_hypervisor_queue(hard)"},
		{"over beside a restarting sidecar: its ladder as if the sidecar were steady", 1, over, 15,
			"0:warn/compute_dma_memory 5:throttle/compute_dma_memory 15:kill/compute_dma_memory"},
		{"the restarting sidecar itself over: judged only past its warm-ups", 0, nr1.Usage{0, 0, 0, 20}, 30, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := kinds(run(p, tc.seconds, restarting(tc.holder, tc.u))); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}
