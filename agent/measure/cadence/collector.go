// SPDX-License-Identifier: Apache-2.0

package cadence

import "github.com/prometheus/client_golang/prometheus"

// ChangeCounts counts the changes a footprint source reported as they happened.
type ChangeCounts interface {
	Seen() uint64
	Lost() uint64
}

// NewCollectors exports the planned time between samples, and the counts of the changes
// that woke a sample (none without counts: no changes are followed).
func NewCollectors(cad *Cadence, c ChangeCounts) []prometheus.Collector {
	planned := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "nr1_sampling_interval_seconds",
		Help: "The time from one sample to the next when nothing wakes the sampler: sampling.idleInterval while every CG is calm, sampling.interval while a ladder is under way or a CG's allocation or usage is not known.",
	}, func() float64 { d, _ := cad.Planned(); return d.Seconds() })
	if c == nil {
		return []prometheus.Collector{planned}
	}
	return []prometheus.Collector{planned,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "nr1_footprint_changes_total",
			Help: "Processes opening or mapping an NR1 file (or taking an fd of one), reported by the kernel as they happened; each wakes the sampler, at most once per sampling.changeGap.",
		}, func() float64 { return float64(c.Seen()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "nr1_footprint_changes_lost_total",
			Help: "Changes the kernel could not report (its ring buffer full); the sampler was woken by those before them.",
		}, func() float64 { return float64(c.Lost()) }),
	}
}
