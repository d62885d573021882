// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// NewBuildInfo is the nr1_build_info gauge, always 1, labelled with the version, the
// source revision it was built from ("unknown" without one: a build outside a checkout)
// and the Go release and architecture it was built with.
func NewBuildInfo(version string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nr1_build_info", Help: "Build of the running nr1-agent.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision(), "goversion": runtime.Version(), "goarch": runtime.GOARCH},
	})
	g.Set(1)
	return g
}

// revision is the VCS revision the Go toolchain stamped into the binary, "-dirty" when
// the tree had changes.
func revision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "unknown", ""
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	return rev + dirty
}

// NewProcessCollectors are the Go runtime's and the process's own metrics (go_*,
// process_*): the agent watched as any other program is.
func NewProcessCollectors() []prometheus.Collector {
	return []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
}
