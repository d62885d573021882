// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/neureality-sdk/nr1-agent/agent/measure/sampler"
	"github.com/neureality-sdk/nr1-agent/agent/observe/inventory"
	"github.com/neureality-sdk/nr1-agent/agent/view"
)

// One /debug/cgs answer holds a bounded page, whatever the node runs.
const (
	debugDefaultLimit = 50
	debugMaxLimit     = 500
)

// debugView is one page of the latest sample: the CGs selected, from offset, and how
// many were selected in all.
type debugView struct {
	*view.Sample
	CGs    []debugCG `json:"cgs"`
	Total  int       `json:"cgsTotal"`
	Offset int       `json:"offset"`
}

// debugCG is one CG of the sample with the records behind its usage.
type debugCG struct {
	*view.Measured
	*sampler.Detail
}

// debugCGs serves /debug/cgs: the latest sample, with every CG's allocation, usage,
// ratio, containers, cgroups, processes (read at the request), and the largest records
// behind the usage.
// ?namespace= and ?pod= select CGs; ?limit= (default 50, at most 500) and ?offset= page
// through them.
func debugCGs(samples sampler.Samples) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		limit, err := queryInt(q.Get("limit"), debugDefaultLimit, debugMaxLimit)
		if err != nil {
			http.Error(w, "limit: "+err.Error(), http.StatusBadRequest)
			return
		}
		offset, err := queryInt(q.Get("offset"), 0, -1)
		if err != nil {
			http.Error(w, "offset: "+err.Error(), http.StatusBadRequest)
			return
		}
		snap, _ := samples.Load()
		if snap == nil {
			http.Error(w, "no sample taken yet", http.StatusServiceUnavailable)
			return
		}
		v := debugView{Sample: snap.Sample, Offset: offset, CGs: []debugCG{}}
		for _, cg := range snap.CGs {
			if ns := q.Get("namespace"); ns != "" && cg.Namespace != ns {
				continue
			}
			if pod := q.Get("pod"); pod != "" && cg.Name != pod {
				continue
			}
			if v.Total >= offset && len(v.CGs) < limit {
				v.CGs = append(v.CGs, debugCG{withProcesses(cg), snap.Detail[cg.UID]})
			}
			v.Total++
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
	})
}

// withProcesses is cg with its containers' processes read now: a sample does not read
// them (only a scan out of time needs them), and a sample is never modified.
func withProcesses(cg *view.Measured) *view.Measured {
	out, icg := *cg, *cg.CG
	icg.Containers = make([]*view.Container, len(cg.Containers))
	for i, c := range cg.Containers {
		cc := *c
		// A container gone since the sample has none.
		cc.PIDs, _ = inventory.Processes(c)
		icg.Containers[i] = &cc
	}
	out.CG = &icg
	return &out
}

// queryInt reads a non-negative integer, def when absent, refused above most (unless
// most is negative).
func queryInt(s string, def, most int) (int, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	switch {
	case err != nil || n < 0:
		return 0, fmt.Errorf("want a non-negative integer, got %q", s)
	case most >= 0 && n > most:
		return 0, fmt.Errorf("at most %d, got %d", most, n)
	}
	return n, nil
}
