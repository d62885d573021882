// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// designs are the ways the agent can sample: at its interval only, reading the kubelet's
// whole pod-resources table at each (as it did before sampling on change), or also at
// once when the kernel reports a process taking an NR1 file, reading the table when a
// pod awaits it and asking the kubelet about one pod otherwise.
// onChange,flood is onChange beside a CG holding ten million ordinary fds.
var designs = []design{{"interval", false, "0s", "", false, false}, {"onChange", true, "", "", false, false}, {"onChange,flood", true, "", "", false, true}}

type design struct {
	name              string
	onChange          bool
	allocationRefresh string // empty: the agent's default
	mode              string // the agent's mode; empty: the device plugin
	prevention        bool   // the budget gate on
	flood             bool   // beside a CG flooding its fd tables (TestAFloodingNeighbourSlowsNobody's)
}

// withDesign runs the agent with the design's sampling settings, restarting it, and puts the
// configuration back when the benchmark ends. The node's action budget is raised: the
// trials go over many at a time, and a deferred action would time the budget, not the
// detection.
func withDesign(b *testing.B, c kubernetes.Interface, d design) {
	b.Helper()
	withConfig(b, c, func(cfg map[string]any) {
		sampling, _ := cfg["sampling"].(map[string]any)
		if sampling == nil {
			sampling = map[string]any{}
		}
		sampling["onChange"] = d.onChange
		if d.allocationRefresh != "" {
			sampling["allocationRefresh"] = d.allocationRefresh
		}
		cfg["sampling"] = sampling
		if d.mode != "" {
			cfg["mode"] = d.mode
		}
		if d.prevention {
			cfg["prevention"] = map[string]any{"enabled": true}
		}
		enforcement, _ := cfg["enforcement"].(map[string]any)
		if enforcement == nil {
			enforcement = map[string]any{}
		}
		enforcement["maxActionsPerMinute"] = 6000
		cfg["enforcement"] = enforcement
	})
}

// withConfig runs the agent with its configuration changed by change, restarting it,
// and puts the configuration back (restarting it again) when the test ends.
func withConfig(tb testing.TB, c kubernetes.Interface, change func(cfg map[string]any)) {
	tb.Helper()
	ctx := context.Background()
	cms := c.CoreV1().ConfigMaps("nr1-system")
	cm, err := cms.Get(ctx, "nr1-agent", metav1.GetOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	orig := cm.Data["config.yaml"]
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(orig), &cfg); err != nil {
		tb.Fatal(err)
	}
	change(cfg)
	out, err := yaml.Marshal(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	set := func(config string) {
		cm, err := cms.Get(ctx, "nr1-agent", metav1.GetOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		if cm.Data["config.yaml"] == config {
			return
		}
		cm.Data["config.yaml"] = config
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			tb.Fatal(err)
		}
		restartAgent(tb, c)
	}
	tb.Cleanup(func() { set(orig) }) // registered first: a failing set still restores
	set(string(out))
}

// restartAgent deletes the agent's pod and waits for its replacement to be ready and
// past its warm-up.
func restartAgent(b testing.TB, c kubernetes.Interface) {
	b.Helper()
	var old types.UID
	eventually(b, 60*time.Second, "a ready agent", func() error {
		a, err := readyAgent(c)
		if err == nil {
			old = a.UID
			err = c.CoreV1().Pods("nr1-system").Delete(context.Background(), a.Name, metav1.DeleteOptions{})
		}
		return err
	})
	awaitNewAgent(b, c, old)
}

// awaitNewAgent waits for an agent pod other than old to be ready and past its
// warm-up.
func awaitNewAgent(tb testing.TB, c kubernetes.Interface, old types.UID) {
	tb.Helper()
	defer logAgentsIfFailed(tb, c, tb.Failed())
	eventually(tb, 2*time.Minute, "the restarted agent ready", func() error {
		a, err := readyAgent(c)
		if err == nil && a.UID == old {
			err = fmt.Errorf("still the old agent")
		}
		return err
	})
	time.Sleep(12 * time.Second) // the enforcement warm-up (10 s) after a start
}

// BenchmarkDetectionLatency is the time from a CG going over (the timestamp nr1-load
// logs once it holds 2.5 times its queues) to the agent's decision (the "decided" field
// of its action log), for each design in the same run. Each iteration is a round of 10
// CGs going over 300 ms apart (make bench-agent: -benchtime=20x, 200 trials); p50 and p99
// over all trials.
func BenchmarkDetectionLatency(b *testing.B) {
	c := client(b)
	for _, d := range designs {
		b.Run("design="+d.name, func(b *testing.B) {
			withDesign(b, c, d)
			if d.flood {
				floodBeside(b, c)
			}
			var lat, waited []float64
			round := 0
			for b.Loop() {
				l, w := latencyRound(b, c, round, 10)
				lat, waited = append(lat, l...), append(waited, w...)
				round++
			}
			slices.Sort(lat)
			b.ReportMetric(percentile(lat, 50), "p50-ms")
			b.ReportMetric(percentile(lat, 99), "p99-ms")
			b.ReportMetric(lat[len(lat)-1], "max-ms")
			// Where the time went: from going over to the start of the sample that saw it
			// (waiting for a sample: the change gap, a sample under way), the rest the
			// sample's and the decision's.
			slices.Sort(waited)
			b.ReportMetric(percentile(waited, 50), "p50-waited-ms")
			b.ReportMetric(percentile(waited, 99), "p99-waited-ms")
			// The samples' own time, as the agent's histogram has it: the bucket that holds
			// the median and the 99th percentile of every sample since its start.
			p50, p99 := sampleDurations(b, c)
			b.ReportMetric(p50, "sample-p50-le-ms")
			b.ReportMetric(p99, "sample-p99-le-ms")
			b.Logf("%s: %d trials, latency ms %.1f", d.name, len(lat), lat)
			b.Logf("%s: of which waiting for the sample, ms %.1f", d.name, waited)
		})
	}
}

// sampleDurations are the upper bounds, in milliseconds, of the buckets of the agent's
// nr1_sample_duration_seconds that hold its median and 99th percentile sample; the same
// of each phase (nr1_sample_phase_seconds) is logged.
func sampleDurations(b *testing.B, c kubernetes.Interface) (p50, p99 float64) {
	agent, err := readyAgent(c)
	if err != nil {
		b.Fatal(err)
	}
	_, body, err := getMetrics(agent.Status.PodIP)
	if err != nil {
		b.Fatal(err)
	}
	whole := histogramOf(b, body, "nr1_sample_duration_seconds", "")
	if whole == nil {
		b.Fatal("the agent exposes no nr1_sample_duration_seconds")
	}
	for _, phase := range []string{"inventory", "mappings", "members", "fds", "heavy", "namespaces", "in-flight", "after", "attribution"} {
		if h := histogramOf(b, body, "nr1_sample_phase_seconds", `phase="`+phase+`",`); h != nil {
			b.Logf("phase %s: median within %v ms, 99th percentile within %v ms", phase, h.at(0.5), h.at(0.99))
		}
	}
	return whole.at(0.5), whole.at(0.99)
}

// histogram is the buckets of one histogram series.
type histogram []struct{ le, count float64 }

// histogramOf is the buckets of family name's series whose labels begin with labels
// (before le), nil when it has none.
func histogramOf(b *testing.B, body, name, labels string) histogram {
	var h histogram
	for line := range strings.Lines(body) {
		rest, ok := strings.CutPrefix(line, name+"_bucket{"+labels+`le="`)
		if !ok {
			continue
		}
		le, count, _ := strings.Cut(rest, `"} `)
		bk := struct{ le, count float64 }{le: math.Inf(1)}
		if le != "+Inf" {
			if _, err := fmt.Sscan(le, &bk.le); err != nil {
				b.Fatalf("bucket %q: %v", line, err)
			}
		}
		if _, err := fmt.Sscan(strings.TrimSpace(count), &bk.count); err != nil {
			b.Fatalf("bucket %q: %v", line, err)
		}
		h = append(h, bk)
	}
	return h
}

// at is the upper bound in milliseconds of the bucket holding quantile q.
func (h histogram) at(q float64) float64 {
	total := h[len(h)-1].count
	for _, bk := range h {
		if bk.count >= q*total {
			return bk.le * 1000
		}
	}
	return math.Inf(1)
}

func percentile(sorted []float64, p int) float64 {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(i-1, 0)]
}

// latencyRound runs n CGs given 2 queues that take 5 at 4 s plus 300 ms apart, and
// returns each one's detection latency in milliseconds, and of it the time until the
// sample that saw it began.
func latencyRound(b *testing.B, c kubernetes.Interface, round, n int) (lat, waited []float64) {
	ns := fmt.Sprintf("nr1-latency-%d", round)
	newNamespace(b, c, ns)
	alloc := nr1.Amounts{0, 0, nr1LoadImageMB(b) + 1, 2}
	grace := int64(1)
	var pods []*corev1.Pod
	for i := range n {
		hh := loadContainer("health-handler", "--queues=2", fmt.Sprintf("--step=%dms:queues=5", 4000+300*i))
		hh.Resources = nr1Requests(alloc)
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("over-%02d", i), Namespace: ns},
			Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{hh}},
		}
		created, err := c.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		pods = append(pods, created)
	}
	agent, err := readyAgent(c)
	if err != nil {
		b.Fatal(err)
	}
	since := time.Now().Add(-time.Second)
	for _, p := range pods {
		var over time.Time
		var first decision
		eventually(b, 60*time.Second, p.Name+" over and acted on", func() error {
			ds := decisions(b, c, agent, since, p)
			var ok bool
			if over, ok = podLogLineAt(b, c, p, "holding", 2); !ok {
				// Killed between taking its queues and saying so: timed from when it
				// began taking them, a latency no shorter than the one it had.
				if over, ok = podLogLineAt(b, c, p, "stepping", 1); !ok || len(ds) == 0 {
					return fmt.Errorf("not over yet")
				}
			}
			if len(ds) == 0 {
				return fmt.Errorf("no decision yet")
			}
			first = slices.MinFunc(ds, func(a, b decision) int { return a.decided.Compare(b.decided) })
			return nil
		})
		lat = append(lat, float64(first.decided.Sub(over).Microseconds())/1000)
		waited = append(waited, float64(first.sampled.Sub(over).Microseconds())/1000)
	}
	return lat, waited
}

// podLogLineAt is the timestamp of the nth line of pod's health-handler log holding
// marker.
func podLogLineAt(b testing.TB, c kubernetes.Interface, pod *corev1.Pod, marker string, nth int) (time.Time, bool) {
	logs, err := c.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "health-handler"}).DoRaw(context.Background())
	if err != nil {
		return time.Time{}, false
	}
	seen := 0
	for line := range strings.Lines(string(logs)) {
		stamp, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.HasPrefix(rest, marker) {
			continue
		}
		if seen++; seen == nth {
			at, err := time.Parse(time.RFC3339Nano, stamp)
			if err != nil {
				b.Fatalf("log line %q: %v", line, err)
			}
			return at, true
		}
	}
	return time.Time{}, false
}

// decision is when an action was decided, and when the sample it was decided on began.
type decision struct{ sampled, decided time.Time }

// decisions are the agent's actions on pod logged since since.
func decisions(b *testing.B, c kubernetes.Interface, agent *corev1.Pod, since time.Time, pod *corev1.Pod) []decision {
	st := metav1.NewTime(since)
	logs, err := c.CoreV1().Pods(agent.Namespace).GetLogs(agent.Name, &corev1.PodLogOptions{SinceTime: &st}).DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	var out []decision
	for line := range strings.Lines(string(logs)) {
		if !strings.Contains(line, "namespace="+pod.Namespace+" ") || !strings.Contains(line, "pod="+pod.Name+" ") {
			continue
		}
		decided, ok := loggedTime(b, line, "decided")
		if !ok {
			continue
		}
		sampled, ok := loggedTime(b, line, "sampled")
		if !ok {
			b.Fatalf("agent log line %q: a decision without the time of its sample", line)
		}
		out = append(out, decision{sampled: sampled, decided: decided})
	}
	return out
}

// loggedTime is the time of field key in a log line of the agent, if it has one.
func loggedTime(b *testing.B, line, key string) (time.Time, bool) {
	_, v, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return time.Time{}, false
	}
	v, _, _ = strings.Cut(strings.TrimSpace(v), " ")
	at, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		b.Fatalf("agent log line %q: %s: %v", line, key, err)
	}
	return at, true
}
