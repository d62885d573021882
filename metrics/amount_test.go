// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

type amountCollector struct {
	a      *Amount
	values nr1.Usage
}

func (c amountCollector) Describe(ch chan<- *prometheus.Desc) { c.a.Describe(ch) }

func (c amountCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range nr1.All {
		ch <- c.a.Metric(r, c.values[r], "ml")
	}
}

func TestAmountHasAFamilyPerUnit(t *testing.T) {
	a := NewAmount("nr1_held", "What is held, in %s.", "namespace")
	ch := make(chan *prometheus.Desc, 8)
	a.Describe(ch)
	close(ch)
	var described []string
	for d := range ch {
		described = append(described, d.String())
	}
	if len(described) != 2 || !strings.Contains(described[0], `"nr1_held_bytes"`) || !strings.Contains(described[1], `"nr1_held_queues"`) {
		t.Fatalf("described %q, want nr1_held_bytes and nr1_held_queues once each", described)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(amountCollector{a, nr1.Usage{3 << 20, 0, 1, 7}})
	want := `
# HELP nr1_held_bytes What is held, in bytes (compute_dma_memory, cpu_dma_memory, docker_partition).
# TYPE nr1_held_bytes gauge
nr1_held_bytes{namespace="ml",resource="compute_dma_memory"} 3.145728e+06
nr1_held_bytes{namespace="ml",resource="cpu_dma_memory"} 0
nr1_held_bytes{namespace="ml",resource="docker_partition"} 1
# HELP nr1_held_queues What is held, in queues (ai_hypervisor_queue).
# TYPE nr1_held_queues gauge
nr1_held_queues{namespace="ml",resource="ai_hypervisor_queue"} 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
