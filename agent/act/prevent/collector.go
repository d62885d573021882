// SPDX-License-Identifier: Apache-2.0

package prevent

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the gate's counts at scrape time; with no keeper (prevention off,
// or the gate not loaded) only whether it runs.
type Collector struct {
	keeper                                  *Keeper
	configured                              string
	enabled, held, booked, refused          *prometheus.Desc
	mismatch, fixes, falseRefusals, unknown *prometheus.Desc
}

// NewCollector collects from keeper, nil when the gate does not run; configured says
// whether prevention is turned on.
func NewCollector(keeper *Keeper, configured bool) *Collector {
	pod := []string{"namespace", "pod", "uid", "resource"}
	return &Collector{
		keeper:        keeper,
		configured:    strconv.FormatBool(configured),
		enabled:       prometheus.NewDesc("nr1_gate_enabled", "1 while the budget gate refuses in the kernel an open past a CG's booking, 0 otherwise: prevention off (configured=\"false\"), or on and the gate could not load (the ladders alone act).", []string{"configured"}, nil),
		held:          prometheus.NewDesc("nr1_gate_held", "What the budget gate counts a CG holding.", pod, nil),
		booked:        prometheus.NewDesc("nr1_gate_booked", "What the budget gate holds a CG to.", pod, nil),
		refused:       prometheus.NewDesc("nr1_gate_refused_total", "Opens the budget gate refused a CG: it held all it booked.", pod, nil),
		mismatch:      prometheus.NewDesc("nr1_gate_mismatch", "The budget gate's count of a CG less what the last sample measured (0 once they agree).", pod, nil),
		fixes:         prometheus.NewDesc("nr1_gate_corrections_total", "Times the budget gate's count of a quiet CG differed from what was measured, and was set to it.", nil, nil),
		falseRefusals: prometheus.NewDesc("nr1_gate_false_refusals_total", "Refusals that a measurement then found within the CG's booking: the gate's count was high.", nil, nil),
		unknown:       prometheus.NewDesc("nr1_gate_unknown_opens_total", "Opens by a pod whose booking the gate did not know, by what the policy did.", []string{"outcome"}, nil),
	}
}

// Describe sends the descriptors.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.enabled, c.held, c.booked, c.refused, c.mismatch, c.fixes, c.falseRefusals, c.unknown} {
		ch <- d
	}
}

// Collect reads the gate now.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.keeper == nil {
		ch <- prometheus.MustNewConstMetric(c.enabled, prometheus.GaugeValue, 0, c.configured)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.enabled, prometheus.GaugeValue, 1, c.configured)
	r := Gated.Short()
	for _, b := range c.keeper.Booked() {
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(b.Held), b.Namespace, b.Pod, b.UID, r)
		ch <- prometheus.MustNewConstMetric(c.booked, prometheus.GaugeValue, float64(b.Booked), b.Namespace, b.Pod, b.UID, r)
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(b.Refused), b.Namespace, b.Pod, b.UID, r)
		ch <- prometheus.MustNewConstMetric(c.mismatch, prometheus.GaugeValue, float64(b.Mismatch), b.Namespace, b.Pod, b.UID, r)
	}
	fixes, falseRefusals, allowed, refused := c.keeper.Totals()
	ch <- prometheus.MustNewConstMetric(c.fixes, prometheus.CounterValue, float64(fixes))
	ch <- prometheus.MustNewConstMetric(c.falseRefusals, prometheus.CounterValue, float64(falseRefusals))
	ch <- prometheus.MustNewConstMetric(c.unknown, prometheus.CounterValue, float64(allowed), "allowed")
	ch <- prometheus.MustNewConstMetric(c.unknown, prometheus.CounterValue, float64(refused), "refused")
}
