// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/neureality-sdk/nr1-agent/agent/measure/sampler"
	"github.com/neureality-sdk/nr1-agent/agent/view"
)

type fixedSamples struct{ s *sampler.Snapshot }

func (f fixedSamples) Load() (*sampler.Snapshot, <-chan struct{}) { return f.s, nil }

// /debug/cgs answers one bounded page, whatever the node runs, and selects by
// namespace and pod.
func TestDebugCGsPages(t *testing.T) {
	snap := &sampler.Snapshot{Sample: &view.Sample{Source: "bpf"}, Detail: map[string]*sampler.Detail{}}
	for i := range 120 {
		ns := "a"
		if i%2 == 1 {
			ns = "b"
		}
		uid := fmt.Sprint(i)
		snap.CGs = append(snap.CGs, &view.Measured{CG: &view.CG{UID: uid, Namespace: ns, Name: fmt.Sprintf("cg-%03d", i)}})
		snap.Detail[uid] = &sampler.Detail{MappingsTotal: i}
	}
	h := debugCGs(fixedSamples{snap})
	get := func(query string) (int, debugPage) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/cgs"+query, nil))
		var p debugPage
		if rec.Code == http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("%s: %v", query, err)
			}
		}
		return rec.Code, p
	}
	for _, c := range []struct {
		query       string
		total, n    int
		first, last string
	}{
		{"", 120, 50, "cg-000", "cg-049"},
		{"?limit=500", 120, 120, "cg-000", "cg-119"},
		{"?offset=100", 120, 20, "cg-100", "cg-119"},
		{"?namespace=b&limit=5&offset=2", 60, 5, "cg-005", "cg-013"},
		{"?pod=cg-007", 1, 1, "cg-007", "cg-007"},
	} {
		code, p := get(c.query)
		if code != http.StatusOK || p.Total != c.total || len(p.CGs) != c.n || p.Source != "bpf" ||
			p.CGs[0].Name != c.first || p.CGs[len(p.CGs)-1].Name != c.last || p.CGs[0].MappingsTotal != snap.Detail[p.CGs[0].UID].MappingsTotal {
			t.Errorf("%q: %d, total %d, %d CGs; want total %d, %d CGs %s…%s", c.query, code, p.Total, len(p.CGs), c.total, c.n, c.first, c.last)
		}
	}
	for _, q := range []string{"?limit=501", "?limit=-1", "?offset=x"} {
		if code, _ := get(q); code != http.StatusBadRequest {
			t.Errorf("%q: %d, want 400", q, code)
		}
	}
	rec := httptest.NewRecorder()
	debugCGs(fixedSamples{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/cgs", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("before the first sample: %d", rec.Code)
	}
}

// A pod's annotations are its owner's and may hold anything (credentials included): the
// agent reads its own from them and shows none.
func TestDebugCGsShowNoAnnotations(t *testing.T) {
	const secret = "s3cr3t-in-an-annotation"
	cg := &view.CG{Namespace: "a", Name: "cg", Annotations: map[string]string{"team/token": secret}}
	snap := &sampler.Snapshot{Sample: &view.Sample{CGs: []*view.Measured{{CG: cg}}}}
	rec := httptest.NewRecorder()
	debugCGs(fixedSamples{snap}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/cgs", nil))
	if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), secret) || strings.Contains(rec.Body.String(), "team/token") {
		t.Errorf("/debug/cgs: %d, shows an annotation:\n%s", rec.Code, rec.Body.String())
	}
}

// debugPage reads a debugView back.
type debugPage struct {
	Source string `json:"source"`
	CGs    []struct {
		UID           string `json:"uid"`
		Name          string `json:"name"`
		MappingsTotal int    `json:"mappingsTotal"`
	} `json:"cgs"`
	Total  int `json:"cgsTotal"`
	Offset int `json:"offset"`
}
