// SPDX-License-Identifier: Apache-2.0

package inventory

import "github.com/prometheus/client_golang/prometheus"

// MismatchesCounter exports how many containers' Allocate annotations disagreed with
// the kubelet.
func (b *Builder) MismatchesCounter() prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "nr1_allocation_mismatches_total", Help: "Containers whose Allocate annotations disagreed with the kubelet's pod-resources API.",
	}, func() float64 { return float64(b.Mismatches()) })
}
