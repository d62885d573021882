package agent

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/inventory"
)

// debugCGs serves /debug/cgs: every CG with its allocation, containers, cgroups and
// processes, as the agent sees them now.
func debugCGs(build func(time.Time) *inventory.Snapshot) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(build(time.Now()))
	})
}
