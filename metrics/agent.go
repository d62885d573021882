package metrics

import (
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neureality-sdk/nr1-agent/agent/enforce"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Enforcement is what enforcement has done, as the metrics read it.
type Enforcement interface {
	Counts() map[enforce.Count]int
	Breaches() nr1.PerResource[int]
}

// AgentState is the rest of the agent's own state, read at scrape time.
type AgentState struct {
	Enforcement   Enforcement
	Source        func() string // footprint source in use
	Reconnects    func() int    // CRI reconnections
	Registrations func() int    // kubelet registrations of the device plugins
	Mismatches    func() int64  // Allocate annotations that disagreed with the kubelet
}

// AgentCollector exports enforcement counters and the agent's self-metrics.
type AgentCollector struct {
	s                                                                 AgentState
	actions, failures, breaches, source, reconnects, regs, mismatches *prometheus.Desc
}

// NewAgentCollector collects from s.
func NewAgentCollector(s AgentState) *AgentCollector {
	return &AgentCollector{
		s:          s,
		actions:    prometheus.NewDesc("nr1_enforcement_actions_total", "Enforcement actions taken (dry_run=\"true\": reported only).", []string{"action", "dry_run"}, nil),
		failures:   prometheus.NewDesc("nr1_enforcement_failures_total", "Enforcement actions that failed.", []string{"action"}, nil),
		breaches:   prometheus.NewDesc("nr1_limit_breaches_total", "Times a CG went over its allocation.", []string{"resource"}, nil),
		source:     prometheus.NewDesc("nr1_footprint_source", "The footprint source in use (bpf or procfs).", []string{"source"}, nil),
		reconnects: prometheus.NewDesc("nr1_runtime_reconnects_total", "Reconnections to the container runtime.", nil, nil),
		regs:       prometheus.NewDesc("nr1_kubelet_registrations_total", "Device-plugin registrations with the kubelet.", nil, nil),
		mismatches: prometheus.NewDesc("nr1_allocation_mismatches_total", "Containers whose Allocate annotations disagreed with the kubelet's pod-resources API.", nil, nil),
	}
}

// Describe sends the descriptors.
func (c *AgentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.actions, c.failures, c.breaches, c.source, c.reconnects, c.regs, c.mismatches} {
		ch <- d
	}
}

// Collect reads the counters now.
func (c *AgentCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.Enforcement != nil {
		counts := c.s.Enforcement.Counts()
		keys := make([]enforce.Count, 0, len(counts))
		for k := range counts {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i].Kind < keys[j].Kind })
		// Every series exists from the start at zero, so that increase() sees the first
		// action: a counter born at 1 shows no increase.
		actions := map[[2]string]int{}
		failures := map[string]int{}
		for _, k := range enforce.Kinds {
			for _, dry := range []string{"false", "true"} {
				actions[[2]string{string(k), dry}] = 0
			}
			failures[string(k)] = 0
		}
		for _, k := range keys {
			if k.Failed {
				failures[string(k.Kind)] += counts[k]
				continue
			}
			actions[[2]string{string(k.Kind), strconv.FormatBool(k.DryRun)}] += counts[k]
		}
		for k, v := range actions {
			ch <- prometheus.MustNewConstMetric(c.actions, prometheus.CounterValue, float64(v), k[0], k[1])
		}
		for k, v := range failures {
			ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(v), k)
		}
		b := c.s.Enforcement.Breaches()
		for _, r := range nr1.All {
			ch <- prometheus.MustNewConstMetric(c.breaches, prometheus.CounterValue, float64(b[r]), r.Short())
		}
	}
	if c.s.Source != nil {
		ch <- prometheus.MustNewConstMetric(c.source, prometheus.GaugeValue, 1, c.s.Source())
	}
	if c.s.Reconnects != nil {
		ch <- prometheus.MustNewConstMetric(c.reconnects, prometheus.CounterValue, float64(c.s.Reconnects()))
	}
	if c.s.Registrations != nil {
		ch <- prometheus.MustNewConstMetric(c.regs, prometheus.CounterValue, float64(c.s.Registrations()))
	}
	if c.s.Mismatches != nil {
		ch <- prometheus.MustNewConstMetric(c.mismatches, prometheus.CounterValue, float64(c.s.Mismatches()))
	}
}

// NewSampleDuration is the nr1_sample_duration_seconds histogram; observe each
// sample's scan time into it.
func NewSampleDuration() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "nr1_sample_duration_seconds",
		Help:    "Time one footprint scan of every process took.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	})
}
