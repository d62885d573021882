package sampler

import "github.com/prometheus/client_golang/prometheus"

// ChangeCounts counts the changes a footprint source reported as they happened.
type ChangeCounts interface {
	Seen() uint64
	Lost() uint64
}

// NewChangeCollectors exports the counts of changes that woke the sampler.
func NewChangeCollectors(c ChangeCounts) []prometheus.Collector {
	return []prometheus.Collector{
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
