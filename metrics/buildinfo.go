// SPDX-License-Identifier: Apache-2.0

package metrics

import "github.com/prometheus/client_golang/prometheus"

// NewBuildInfo is the nr1_build_info gauge, always 1, labelled with the version.
func NewBuildInfo(version string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nr1_build_info", Help: "Build of the running nr1-agent.", ConstLabels: prometheus.Labels{"version": version},
	})
	g.Set(1)
	return g
}
