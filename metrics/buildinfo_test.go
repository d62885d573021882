// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The agent is watched as any program: its build (version, revision, Go release), the Go
// runtime's and its process's metrics.
func TestBuildInfoAndProcessMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewBuildInfo("v1.2.3"))
	reg.MustRegister(NewProcessCollectors()...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for _, f := range families {
		labels := map[string]string{}
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		got[f.GetName()] = labels
	}
	info := got["nr1_build_info"]
	if info["version"] != "v1.2.3" || info["goversion"] != runtime.Version() || info["goarch"] != runtime.GOARCH || info["revision"] == "" {
		t.Errorf("nr1_build_info labels %v", info)
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds"} {
		if _, ok := got[name]; !ok {
			t.Errorf("%s not exported", name)
		}
	}
}
