// SPDX-License-Identifier: Apache-2.0

package sampler

import (
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/metrics"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// BenchmarkMetrics100CGs renders /metrics through the real handler for 100 CGs of two
// containers each.
func BenchmarkMetrics100CGs(b *testing.B) {
	snap := &Snapshot{Sample: &view.Sample{}}
	for i := range 100 {
		cg := &view.Measured{CG: &view.CG{Namespace: "ml", Name: fmt.Sprintf("cg-%03d", i), UID: fmt.Sprint(i), AllocationKnown: true, Ready: true,
			Allocation: nr1.Amounts{3, 0, 2392, 7},
			Containers: []*view.Container{{Name: "health-handler", Allocation: nr1.Amounts{3, 0, 2392, 7}}, {Name: "graph"}}},
			Usage:        nr1.Usage{3 * mib, 0, 1000 * mib, 7},
			PerContainer: map[string]nr1.Usage{"health-handler": {1 * mib, 0, 1000 * mib, 7}, "graph": {2 * mib, 0, 0, 0}}}
		cg.Ratio = view.Ratios(cg.Usage, cg.Allocation)
		snap.CGs = append(snap.CGs, cg)
	}
	reg := registry(&fixedSamples{snap})
	reg.MustRegister(metrics.NewBuildInfo("v"), newSampleDuration())
	h := metrics.NewServer(":0", reg, slog.New(slog.DiscardHandler)).Handler()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
		_, _ = io.Copy(io.Discard, rec.Body)
	}
}
