// SPDX-License-Identifier: Apache-2.0

package sampler

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/internal/golden"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

type fixedSamples struct{ s *Snapshot }

func (f *fixedSamples) Load() (*Snapshot, <-chan struct{}) { return f.s, nil }

// scrapeFixture: the ResNet-50 CG within budget, a greedy CG with queues and no allocation,
// and a pod whose allocation is not known yet.
func scrapeFixture() *Snapshot {
	resnet := &view.Measured{CG: &view.CG{Namespace: "default", Name: "resnet50", UID: "u1", AllocationKnown: true, Ready: true,
		Allocation: nr1.Amounts{3, 0, 2392, 7},
		Containers: []*view.Container{
			{Name: "graph", ID: "g", State: view.Running},
			// The instance the agent killed, kept by the runtime beside the restarted one.
			{Name: "health-handler", ID: "hh-killed", State: view.Exited, Allocation: nr1.Amounts{3, 0, 2392, 7}},
			{Name: "health-handler", ID: "hh", State: view.Running, StartedAt: time.Unix(100, 0), Allocation: nr1.Amounts{3, 0, 2392, 7}},
			// A second running instance the runtime briefly reports during a restart.
			{Name: "health-handler", ID: "hh-old", State: view.Running, StartedAt: time.Unix(50, 0), Allocation: nr1.Amounts{3, 0, 2392, 7}},
		}},
		Usage:        nr1.Usage{3 * mib, 0, 1200 * mib, 7},
		PerContainer: map[string]nr1.Usage{"graph": {2 * mib, 0, 0, 0}, "health-handler": {1 * mib, 0, 1200 * mib, 7}}}
	resnet.Ratio = view.Ratios(resnet.Usage, resnet.Allocation)
	greedy := &view.Measured{CG: &view.CG{Namespace: "ml", Name: "greedy", UID: "u2", AllocationKnown: true, Ready: true,
		Containers: []*view.Container{{Name: "main", ID: "m", State: view.Running}}},
		Usage: nr1.Usage{0, 0, 0, 2}, PerContainer: map[string]nr1.Usage{"main": {0, 0, 0, 2}}}
	greedy.Ratio = view.Ratios(greedy.Usage, greedy.Allocation)
	unknown := &view.Measured{CG: &view.CG{Namespace: "ml", Name: "starting", UID: "u3", Ready: true, AllocationUnknown: "pod not in the kubelet's pod-resources answer"}}
	// The sandbox of an earlier resnet50 the runtime still keeps: same name, not ready.
	ended := &view.Measured{CG: &view.CG{Namespace: "default", Name: "resnet50", UID: "u0", AllocationKnown: true,
		Containers: []*view.Container{{Name: "health-handler", ID: "old", State: view.Running}}}, PerContainer: map[string]nr1.Usage{}}
	return &Snapshot{Sample: &view.Sample{CGs: []*view.Measured{ended, resnet, greedy, unknown}, Unattributed: nr1.Usage{5 * mib, 0, 0, 1}}}
}

func registry(samples Samples) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(samples, "bpf", "", nil))
	return reg
}

// scrape renders the registry as /metrics does.
func scrape(t *testing.T, reg *prometheus.Registry) []byte {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func TestGoldenMetrics(t *testing.T) {
	reg := registry(&fixedSamples{scrapeFixture()})
	got := scrape(t, reg)
	want := golden.Read(t, "testdata/collector.golden", got)
	if err := testutil.GatherAndCompare(reg, bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), `nr1_usage_ratio{namespace="ml",pod="greedy",resource="ai_hypervisor_queue"} +Inf`) {
		t.Error("usage without allocation is not +Inf")
	}
	// Unknown is not zero: a CG whose allocation is unknown has no usage, allocation or
	// ratio series, only the one saying it is unknown.
	for _, line := range strings.Split(string(got), "\n") {
		if strings.Contains(line, `pod="starting"`) && !strings.HasPrefix(line, "nr1_allocation_unknown{") {
			t.Errorf("a CG whose allocation is unknown has a series: %s", line)
		}
	}
}

func TestDeletedPodSeriesGoAtTheNextScrape(t *testing.T) {
	samples := &fixedSamples{scrapeFixture()}
	reg := registry(samples)
	if n := testutil.CollectAndCount(reg, "nr1_usage_bytes", "nr1_usage_queues"); n != 12 {
		t.Fatalf("%d nr1_usage_* series, want 12 (3 containers × 4 resources)", n)
	}
	next := scrapeFixture()
	next.CGs = next.CGs[2:] // resnet50 deleted
	samples.s = next
	if n := testutil.CollectAndCount(reg, "nr1_usage_bytes", "nr1_usage_queues"); n != 4 {
		t.Fatalf("%d nr1_usage_* series after the pod went, want 4", n)
	}
}

// Every amount family holds one unit, the one its name ends with: each of its series is
// of a resource counted in that unit, and its value the sample's amount in it (an
// allocation's units times the bytes of one, usage as measured).
func TestAmountsInBaseUnits(t *testing.T) {
	snap := scrapeFixture()
	cgs := map[string]*view.Measured{}
	for _, cg := range snap.CGs {
		if cg.Ready {
			cgs[cg.Name] = cg
		}
	}
	inBase := func(r nr1.Resource, u nr1.Units) float64 { return float64(u) * float64(r.UnitBytes()) }
	want := func(family string, l map[string]string, r nr1.Resource) (float64, bool) {
		cg := cgs[l["pod"]]
		switch family {
		case "nr1_unattributed_usage":
			return float64(snap.Unattributed[r]), true
		case "nr1_cg_usage":
			return float64(cg.Usage[r]), true
		case "nr1_usage":
			return float64(cg.PerContainer[l["container"]][r]), true
		case "nr1_cg_allocated":
			return inBase(r, cg.Allocation[r]), true
		case "nr1_allocated":
			for _, ctr := range cg.Containers {
				if ctr.Name == l["container"] {
					return inBase(r, ctr.Allocation[r]), true
				}
			}
		}
		return 0, false
	}
	mfs, err := registry(&fixedSamples{snap}).Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, mf := range mfs {
		family, unit, ok := amountFamily(mf.GetName())
		if !ok {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := labelMap(m)
			r, err := nr1.ParseResource(l["resource"])
			if err != nil || r.BaseUnit() != unit {
				t.Errorf("%s holds a series of resource %q: %v", mf.GetName(), l["resource"], err)
				continue
			}
			w, ok := want(family, l, r)
			if !ok {
				t.Errorf("%s %v: no such amount in the sample", mf.GetName(), l)
				continue
			}
			if got := m.GetGauge().GetValue(); got != w {
				t.Errorf("%s %v = %v, want %v", mf.GetName(), l, got, w)
			}
			seen[family]++
		}
	}
	for _, f := range []string{"nr1_allocated", "nr1_usage", "nr1_cg_allocated", "nr1_cg_usage", "nr1_unattributed_usage"} {
		if seen[f] == 0 {
			t.Errorf("no series of %s_*", f)
		}
	}
}

// amountFamily splits name into an amount's family and the base unit it ends with.
func amountFamily(name string) (family, unit string, ok bool) {
	for _, r := range nr1.All {
		if f, ok := strings.CutSuffix(name, "_"+r.BaseUnit()); ok {
			return f, r.BaseUnit(), true
		}
	}
	return "", "", false
}

func labelMap(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// TestPromtoolAcceptsTheMetrics runs the real promtool on a scrape.
func TestPromtoolAcceptsTheMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install Debian's prometheus package (make deps)")
	}
	got := scrape(t, registry(&fixedSamples{scrapeFixture()}))
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(got)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

const mib = 1 << 20

// A CG whose docker partition is not measured yet (or whose reading failed) has no
// partition usage or ratio series: unknown, not 0. Its other resources have theirs.
func TestUnknownPartitionHasNoSeries(t *testing.T) {
	snap := scrapeFixture()
	greedy := snap.CGs[2]
	greedy.PartitionUnknown = "not measured yet"
	got := string(scrape(t, registry(&fixedSamples{snap})))
	for _, line := range strings.Split(got, "\n") {
		if strings.Contains(line, `pod="greedy"`) && strings.Contains(line, `resource="docker_partition"`) {
			t.Errorf("an unmeasured partition has a series: %s", line)
		}
	}
	for _, want := range []string{
		`nr1_usage_queues{container="main",namespace="ml",pod="greedy",resource="ai_hypervisor_queue"} 2`,
		`nr1_usage_ratio{namespace="ml",pod="greedy",resource="ai_hypervisor_queue"} +Inf`,
		`nr1_cg_usage_bytes{namespace="default",pod="resnet50",resource="docker_partition"} 1.2582912e+09`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %s", want)
		}
	}
}

// A refused BPF source shows with its reason; none shows when BPF is in use.
func TestBPFRefusedMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(&fixedSamples{}, "procfs", "unattributable", nil))
	want := `
# HELP nr1_footprint_bpf_refused 1 when the BPF footprint source was refused: unavailable (the kernel cannot run it) or unattributable (it cannot tell cgroups apart on this node).
# TYPE nr1_footprint_bpf_refused gauge
nr1_footprint_bpf_refused{reason="unattributable"} 1
# HELP nr1_footprint_source The footprint source in use (bpf or procfs).
# TYPE nr1_footprint_source gauge
nr1_footprint_source{source="procfs"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(registry(&fixedSamples{}), "nr1_footprint_bpf_refused"); n != 0 {
		t.Errorf("%d refusal series with BPF in use", n)
	}
}

// What the source cannot see on the node shows, each by what it is; nothing shows when
// it sees all.
func TestUnseenMetric(t *testing.T) {
	if n := testutil.CollectAndCount(NewCollector(&fixedSamples{}, "bpf", "", []string{"32-bit-syscalls"}), "nr1_footprint_unseen"); n != 1 {
		t.Errorf("%d series of what goes unseen, want 1", n)
	}
	got, err := testutil.CollectAndFormat(NewCollector(&fixedSamples{}, "bpf", "", []string{"32-bit-syscalls"}), expfmt.TypeTextPlain, "nr1_footprint_unseen")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), `nr1_footprint_unseen{what="32-bit-syscalls"} 1`) {
		t.Errorf("got:\n%s", got)
	}
	if n := testutil.CollectAndCount(registry(&fixedSamples{}), "nr1_footprint_unseen"); n != 0 {
		t.Errorf("%d unseen series from a source that sees all", n)
	}
}

// An uncertain CG's usage is a lower bound: it has only the series saying so, by cause
// and whose the cause is, never a usage that reads as complete.
func TestUncertainCGHasOnlyItsFlag(t *testing.T) {
	for _, tc := range []struct {
		cause string
		own   bool
		want  string
	}{
		{view.CauseScanTime, false, `nr1_usage_uncertain{cause="scan-time",namespace="default",own="false",pod="resnet50"} 1`},
		{view.CauseInFlight, true, `nr1_usage_uncertain{cause="in-flight",namespace="default",own="true",pod="resnet50"} 1`},
	} {
		uncertainCGHasOnlyItsFlag(t, tc.cause, tc.own, tc.want)
	}
}

func uncertainCGHasOnlyItsFlag(t *testing.T, cause string, own bool, want string) {
	snap := scrapeFixture()
	for _, cg := range snap.CGs {
		if cg.Name == "resnet50" && cg.Ready {
			cg.UsageUncertain, cg.UncertainCause, cg.UncertainOwn = "uncertain", cause, own
		}
	}
	got := string(scrape(t, registry(&fixedSamples{snap})))
	if !strings.Contains(got, want) {
		t.Errorf("no %s for the uncertain CG", want)
	}
	for _, line := range strings.Split(got, "\n") {
		if strings.Contains(line, `pod="resnet50"`) && !strings.HasPrefix(line, "nr1_usage_uncertain{") {
			t.Errorf("the uncertain CG has a series: %s", line)
		}
	}
}
