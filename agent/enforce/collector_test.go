package enforce

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

type fixedRecord struct{}

func (fixedRecord) Counts() map[Count]int {
	return map[Count]int{
		{Kind: Warn}: 3, {Kind: Kill}: 1, {Kind: Warn, DryRun: true}: 2,
		{Kind: Evict, Failed: true}: 1,
	}
}

func (fixedRecord) Breaches() nr1.PerResource[int] { return nr1.PerResource[int]{2, 0, 1, 1} }

// Every action and failure series exists at zero from the start, so that increase()
// sees the first one.
func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(fixedRecord{}))
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

const want = `
# HELP nr1_enforcement_actions_total Enforcement actions taken (dry_run="true": reported only).
# TYPE nr1_enforcement_actions_total counter
nr1_enforcement_actions_total{action="bad-annotation",dry_run="false"} 0
nr1_enforcement_actions_total{action="bad-annotation",dry_run="true"} 0
nr1_enforcement_actions_total{action="evict",dry_run="false"} 0
nr1_enforcement_actions_total{action="evict",dry_run="true"} 0
nr1_enforcement_actions_total{action="kill",dry_run="false"} 1
nr1_enforcement_actions_total{action="kill",dry_run="true"} 0
nr1_enforcement_actions_total{action="throttle",dry_run="false"} 0
nr1_enforcement_actions_total{action="throttle",dry_run="true"} 0
nr1_enforcement_actions_total{action="unthrottle",dry_run="false"} 0
nr1_enforcement_actions_total{action="unthrottle",dry_run="true"} 0
nr1_enforcement_actions_total{action="warn",dry_run="false"} 3
nr1_enforcement_actions_total{action="warn",dry_run="true"} 2
# HELP nr1_enforcement_failures_total Enforcement actions that failed.
# TYPE nr1_enforcement_failures_total counter
nr1_enforcement_failures_total{action="bad-annotation"} 0
nr1_enforcement_failures_total{action="evict"} 1
nr1_enforcement_failures_total{action="kill"} 0
nr1_enforcement_failures_total{action="throttle"} 0
nr1_enforcement_failures_total{action="unthrottle"} 0
nr1_enforcement_failures_total{action="warn"} 0
# HELP nr1_limit_breaches_total Times a CG went over its allocation.
# TYPE nr1_limit_breaches_total counter
nr1_limit_breaches_total{resource="ai_hypervisor_queue"} 1
nr1_limit_breaches_total{resource="compute_dma_memory"} 2
nr1_limit_breaches_total{resource="cpu_dma_memory"} 0
nr1_limit_breaches_total{resource="docker_partition"} 1
`
