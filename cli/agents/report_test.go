// SPDX-License-Identifier: Apache-2.0

package agents

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neureality-sdk/nr1-agent/agent/act/enforce"
	"github.com/neureality-sdk/nr1-agent/agent/act/prevent"
	"github.com/neureality-sdk/nr1-agent/agent/measure/sampler"
	"github.com/neureality-sdk/nr1-agent/agent/offer/deviceplugin"
	agentmetrics "github.com/neureality-sdk/nr1-agent/metrics"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

func parseFixture(t *testing.T) *Node {
	t.Helper()
	f, err := os.Open("testdata/node-a.metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := Parse("node-a", "nr1-system/nr1-agent-x", f)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func pod(n *Node, ns, name string) *CG {
	for _, c := range n.CGs {
		if c.Namespace == ns && c.Pod == name {
			return c
		}
	}
	return nil
}

func TestParse(t *testing.T) {
	n := parseFixture(t)
	if n.Mode != "enforce" || *n.Capacity[nr1.DockerPartition] != 13417 || *n.Allocatable[nr1.HypervisorQueue] != 65536 {
		t.Fatalf("node %+v", n)
	}
	r := pod(n, "default", "resnet50")
	if r == nil || *r.Allocation[nr1.DockerPartition] != 2392 || *r.Usage[nr1.DockerPartition] != 1200.5 ||
		*r.Usage[nr1.ComputeDMAMemory] != 3 || r.Ratio[nr1.HypervisorQueue] != 1 || len(r.Containers) != 2 {
		t.Fatalf("resnet50 %+v", r)
	}
	if g := r.Containers[1]; g.Name != "graph" || *g.Allocation[nr1.ComputeDMAMemory] != 0 || *g.Usage[nr1.ComputeDMAMemory] != 2 {
		t.Errorf("graph %+v: a container given nothing was given zero (it has no allocation series), and holds 2 MB", g)
	}
	hog := pod(n, "ml", "hog")
	e := hog.EnforcementOf("u-hog")
	g := e.Rungs[nr1.HypervisorQueue]
	if !e.Throttled || g.Steps != 2 || g.Next != "kill" || !g.NextAt.Equal(time.Unix(1764590415, 0)) || !g.Over.Equal(time.Unix(1764590400, 0)) {
		t.Fatalf("hog's ladder %+v", e)
	}
	if v, res := hog.Max(); res != nr1.HypervisorQueue || math.Abs(float64(v)-20.0/7) > 1e-9 {
		t.Errorf("hog's largest ratio %v of %s", v, res)
	}
	if rogue := pod(n, "ml", "rogue"); !math.IsInf(float64(rogue.Ratio[nr1.ComputeDMAMemory]), 1) || !math.IsNaN(float64(rogue.Ratio[nr1.CPUDMAMemory])) {
		t.Errorf("rogue's ratios %v", rogue.Ratio)
	}
	if s := pod(n, "ml", "starting"); s == nil || !s.AllocationUnknown || s.Allocation[nr1.ComputeDMAMemory] != nil {
		t.Errorf("starting %+v", s)
	}
	if pod(n, "ml", "gone") != nil {
		t.Error("a ladder's series alone (a deleted pod's throttle) made a CG")
	}
	// One CG's allocation is unknown: so are the node's sums, never a smaller number.
	if n.Allocated[nr1.ComputeDMAMemory] != nil || n.Used[nr1.ComputeDMAMemory] != nil {
		t.Errorf("node sums with an unknown allocation: allocated %v used %v", n.Allocated, n.Used)
	}
}

func TestParseSumsWhenAllIsKnown(t *testing.T) {
	b, err := os.ReadFile("testdata/node-a.metrics")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), `nr1_allocation_unknown{namespace="ml",pod="starting"} 1`, "")
	n, err := Parse("node-a", "a", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	// resnet50 3 + hog 3; used: resnet50 3 + hog 0 + rogue 2; queues used 7 + 20 + 1 unattributed.
	if *n.Allocated[nr1.ComputeDMAMemory] != 6 || *n.Used[nr1.ComputeDMAMemory] != 5 || *n.Used[nr1.HypervisorQueue] != 28 {
		t.Errorf("allocated %v used %v", deref(n.Allocated), deref(n.Used))
	}
}

// In DRA mode each container using a claim is allocated the claim: the CG's allocation
// is the agent's own figure, the claim once; an agent exporting none gives the sum.
func TestParseCGAllocationCountsASharedClaimOnce(t *testing.T) {
	b, err := os.ReadFile("testdata/node-a.metrics")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		lines = append(lines, l)
		if strings.HasPrefix(l, "nr1_allocated_") && strings.Contains(l, `{container="health-handler",namespace="default",pod="resnet50"`) {
			lines = append(lines, strings.Replace(l, "health-handler", "graph", 1))
		}
	}
	shared := strings.Join(lines, "\n")
	n, err := Parse("node-a", "a", strings.NewReader(shared))
	if err != nil {
		t.Fatal(err)
	}
	resnet := pod(n, "default", "resnet50")
	if *resnet.Allocation[nr1.ComputeDMAMemory] != 3 || *resnet.Allocation[nr1.HypervisorQueue] != 7 {
		t.Errorf("resnet50 allocated %v, want the claim once", deref(resnet.Allocation))
	}
	for _, c := range resnet.Containers {
		if *c.Allocation[nr1.HypervisorQueue] != 7 {
			t.Errorf("container %s allocated %v, want the claim", c.Name, deref(c.Allocation))
		}
	}
	older := strings.Join(slices.DeleteFunc(strings.Split(shared, "\n"), func(l string) bool { return strings.HasPrefix(l, "nr1_cg_allocated") }), "\n")
	if n, err = Parse("node-a", "a", strings.NewReader(older)); err != nil {
		t.Fatal(err)
	}
	if got := *pod(n, "default", "resnet50").Allocation[nr1.HypervisorQueue]; got != 14 {
		t.Errorf("from an agent without nr1_cg_allocated: %v queues, want its containers' sum", got)
	}
}

func deref(p nr1.PerResource[Quantity]) (out nr1.PerResource[float64]) {
	for r, q := range p {
		if q != nil {
			out[r] = *q
		}
	}
	return out
}

func TestParseRefusesWhatIsNotAnAgent(t *testing.T) {
	for _, in := range []string{"up 1\n", "nr1_build_info{version=\n"} {
		if _, err := Parse("n", "a", strings.NewReader(in)); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
}

// The fixture reads only what the agent exports, with the labels it exports them with:
// a metric renamed in the agent fails here, not in front of an operator.
func TestFixtureMatchesTheAgentsMetrics(t *testing.T) {
	exported := map[string][]string{}
	descRE := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	for _, c := range []prometheus.Collector{
		deviceplugin.NewCollector(nil), sampler.NewCollector(nil, "bpf", "", nil), enforce.NewCollector(nil), agentmetrics.NewBuildInfo("v"),
		prevent.NewCollector(nil, true),
	} {
		ch := make(chan *prometheus.Desc, 64)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read %s", d)
			}
			labels := strings.Fields(strings.ReplaceAll(m[2], ",", " "))
			slices.Sort(labels)
			exported[m[1]] = labels
		}
	}
	f, err := os.Open("testdata/node-a.metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	labelRE := regexp.MustCompile(`(\w+)="`)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		want, ok := exported[name]
		if !ok {
			t.Errorf("%s: the agent exports no such metric", name)
			continue
		}
		var labels []string
		for _, m := range labelRE.FindAllStringSubmatch(rest, -1) {
			labels = append(labels, m[1])
		}
		slices.Sort(labels)
		if !slices.Equal(labels, want) && name != "nr1_build_info" {
			t.Errorf("%s{%v}: the agent's labels are %v", name, labels, want)
		}
	}
}

func TestRatioJSONRoundTrip(t *testing.T) {
	in := nr1.PerResource[Ratio]{1.5, Ratio(math.Inf(1)), Ratio(math.NaN()), 0}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"compute_dma_memory":1.5,"cpu_dma_memory":"+Inf","docker_partition":null,"ai_hypervisor_queue":0}` {
		t.Fatalf("marshalled %s", b)
	}
	var out nr1.PerResource[Ratio]
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out[0] != 1.5 || !math.IsInf(float64(out[1]), 1) || !math.IsNaN(float64(out[2])) || out[3] != 0 {
		t.Errorf("read back %v", out)
	}
}

// A CG whose docker partition the agent has not measured (no series) leaves the node's
// partition use unknown, not smaller; what was allocated is still known.
func TestParseUnmeasuredPartition(t *testing.T) {
	b, err := os.ReadFile("testdata/node-a.metrics")
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `pod="hog"`) && strings.Contains(line, `resource="docker_partition"`) && !strings.HasPrefix(line, "nr1_allocated") && !strings.HasPrefix(line, "nr1_cg_allocated") {
			continue
		}
		if strings.HasPrefix(line, "nr1_allocation_unknown{") {
			continue
		}
		kept = append(kept, line)
	}
	n, err := Parse("node-a", "a", strings.NewReader(strings.Join(kept, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	hog := pod(n, "ml", "hog")
	if hog.Usage[nr1.DockerPartition] != nil || !math.IsNaN(float64(hog.Ratio[nr1.DockerPartition])) || *hog.Allocation[nr1.DockerPartition] != 100 {
		t.Errorf("hog's partition: usage %v ratio %v allocation %v", hog.Usage[nr1.DockerPartition], hog.Ratio[nr1.DockerPartition], hog.Allocation[nr1.DockerPartition])
	}
	if n.Used[nr1.DockerPartition] != nil || n.Used[nr1.HypervisorQueue] == nil || n.Allocated[nr1.DockerPartition] == nil {
		t.Errorf("node used %v allocated %v", deref(n.Used), deref(n.Allocated))
	}
}
