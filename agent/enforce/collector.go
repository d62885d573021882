package enforce

import (
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Record is what enforcement has done, as the metrics read it.
type Record interface {
	Counts() map[Count]int
	Breaches() nr1.PerResource[int]
}

// Collector exports the enforcement counters at scrape time.
type Collector struct {
	record                      Record
	actions, failures, breaches *prometheus.Desc
}

// NewCollector collects from record.
func NewCollector(record Record) *Collector {
	return &Collector{
		record:   record,
		actions:  prometheus.NewDesc("nr1_enforcement_actions_total", "Enforcement actions taken (dry_run=\"true\": reported only).", []string{"action", "dry_run"}, nil),
		failures: prometheus.NewDesc("nr1_enforcement_failures_total", "Enforcement actions that failed.", []string{"action"}, nil),
		breaches: prometheus.NewDesc("nr1_limit_breaches_total", "Times a CG went over its allocation.", []string{"resource"}, nil),
	}
}

// Describe sends the descriptors.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.actions
	ch <- c.failures
	ch <- c.breaches
}

// Collect reads the counters now.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	counts := c.record.Counts()
	keys := make([]Count, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Kind < keys[j].Kind })
	// Every series exists from the start at zero, so that increase() sees the first
	// action: a counter born at 1 shows no increase.
	actions := map[[2]string]int{}
	failures := map[string]int{}
	for _, k := range Kinds {
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
	b := c.record.Breaches()
	for _, r := range nr1.All {
		ch <- prometheus.MustNewConstMetric(c.breaches, prometheus.CounterValue, float64(b[r]), r.Short())
	}
}
