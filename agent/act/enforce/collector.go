// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Record is what enforcement has done, as the metrics read it.
type Record interface {
	Counts() map[Count]int
	Breaches() nr1.PerResource[int]
	Ladders() []Ladder
	Mode() Mode
}

// Collector exports the enforcement counters at scrape time.
type Collector struct {
	record                      Record
	actions, failures, breaches *prometheus.Desc
	mode, throttled, ended      *prometheus.Desc
	over, steps, next, reset    *prometheus.Desc
}

// NewCollector collects from record.
func NewCollector(record Record) *Collector {
	pod := []string{"namespace", "pod", "uid"}
	rung := []string{"namespace", "pod", "uid", "resource"}
	return &Collector{
		record:   record,
		actions:  prometheus.NewDesc("nr1_enforcement_actions_total", "Enforcement actions taken (dry_run=\"true\": reported only).", []string{"action", "dry_run"}, nil),
		failures: prometheus.NewDesc("nr1_enforcement_failures_total", "Enforcement actions that failed.", []string{"action"}, nil),
		breaches: prometheus.NewDesc("nr1_limit_breaches_total", "Times a CG went over its allocation.", []string{"resource"}, nil),
		mode:     prometheus.NewDesc("nr1_enforcement_mode", "1 for the enforcement mode in use (enforce or dry-run).", []string{"mode"}, nil),
		// A CG's ladder series carry its UID: a pod re-created under its name while the
		// old one's throttle is being lifted must not give two series one label set.
		throttled: prometheus.NewDesc("nr1_throttled", "1 while a CG's throttle is attached (new opens of NR1 devices refused).", pod, nil),
		ended:     prometheus.NewDesc("nr1_enforcement_ended_timestamp_seconds", "When a CG was killed or evicted; it is left alone until one of its containers starts again.", pod, nil),
		over:      prometheus.NewDesc("nr1_enforcement_over_since_timestamp_seconds", "When a CG went over its allocation of a resource, while its ladder is under way.", rung, nil),
		steps:     prometheus.NewDesc("nr1_enforcement_steps_taken", "Steps of a CG's ladder taken for a resource.", rung, nil),
		next:      prometheus.NewDesc("nr1_enforcement_next_step_timestamp_seconds", "When the next step of a CG's ladder is due if it stays over (a hard breach takes the last step sooner).", append(rung, "action"), nil),
		reset:     prometheus.NewDesc("nr1_enforcement_reset_timestamp_seconds", "When a CG back under its allocation has its ladder start again, if it stays under.", rung, nil),
	}
}

// Describe sends the descriptors.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.actions
	ch <- c.failures
	ch <- c.breaches
	ch <- c.mode
	ch <- c.throttled
	ch <- c.ended
	ch <- c.over
	ch <- c.steps
	ch <- c.next
	ch <- c.reset
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
	ch <- prometheus.MustNewConstMetric(c.mode, prometheus.GaugeValue, 1, string(c.record.Mode()))
	for _, l := range c.record.Ladders() {
		if l.Throttled {
			ch <- prometheus.MustNewConstMetric(c.throttled, prometheus.GaugeValue, 1, l.Namespace, l.Pod, l.UID)
		}
		if !l.Ended.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.ended, prometheus.GaugeValue, seconds(l.Ended), l.Namespace, l.Pod, l.UID)
		}
		for _, r := range nr1.All {
			g := l.Resources[r]
			if g.Over.IsZero() {
				continue
			}
			ch <- prometheus.MustNewConstMetric(c.over, prometheus.GaugeValue, seconds(g.Over), l.Namespace, l.Pod, l.UID, r.Short())
			ch <- prometheus.MustNewConstMetric(c.steps, prometheus.GaugeValue, float64(g.Steps), l.Namespace, l.Pod, l.UID, r.Short())
			if g.Next != "" {
				ch <- prometheus.MustNewConstMetric(c.next, prometheus.GaugeValue, seconds(g.NextAt), l.Namespace, l.Pod, l.UID, r.Short(), string(g.Next))
			}
			if !g.ResetAt.IsZero() {
				ch <- prometheus.MustNewConstMetric(c.reset, prometheus.GaugeValue, seconds(g.ResetAt), l.Namespace, l.Pod, l.UID, r.Short())
			}
		}
	}
}

func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
