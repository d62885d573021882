// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Stage is one of the agent's stages (device health, runtime, allocations, docker
// partition, samples) as its health is read.
type Stage interface {
	Health() (lastSuccess time.Time, err error)
}

// StageCollector reports every stage's health, as node_exporter reports its
// collectors: a stage that keeps failing is visible, not only logged.
type StageCollector struct {
	stages      map[string]Stage
	up, success *prometheus.Desc
}

// NewStageCollector collects the health of stages, keyed by name.
func NewStageCollector(stages map[string]Stage) *StageCollector {
	return &StageCollector{
		stages:  stages,
		up:      prometheus.NewDesc("nr1_stage_up", "1 when the stage's last attempt succeeded, 0 when it failed or has not succeeded yet.", []string{"stage"}, nil),
		success: prometheus.NewDesc("nr1_stage_last_success_timestamp_seconds", "When the stage last succeeded (Unix time); absent before its first success.", []string{"stage"}, nil),
	}
}

// Describe sends the descriptors.
func (c *StageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.success
}

// Collect reads every stage's health now.
func (c *StageCollector) Collect(ch chan<- prometheus.Metric) {
	names := make([]string, 0, len(c.stages))
	for n := range c.stages {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		last, err := c.stages[n].Health()
		up := 0.0
		if err == nil && !last.IsZero() {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, n)
		if !last.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.success, prometheus.GaugeValue, float64(last.UnixNano())/1e9, n)
		}
	}
}
