package agent

import (
	"encoding/json"
	"net/http"

	"github.com/neureality-sdk/nr1-agent/agent/sampler"
)

// debugCGs serves /debug/cgs: the latest sample, with every CG's allocation, usage,
// ratio, containers, cgroups, processes, and the mappings and handles behind the usage.
func debugCGs(s *sampler.Sampler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		snap, _ := s.Load()
		if snap == nil {
			http.Error(w, "no sample taken yet", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(snap)
	})
}
