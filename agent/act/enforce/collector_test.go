// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"strings"
	"testing"
	"time"

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

func (fixedRecord) Mode() Mode { return Enforce }

func (fixedRecord) Ladders() []Ladder {
	t := time.Unix(1_700_000_000, 0)
	return []Ladder{
		{UID: "u1", Namespace: "default", Pod: "hog", Throttled: true, Resources: nr1.PerResource[Rung]{
			nr1.HypervisorQueue: {Over: t, Steps: 2, Next: Kill, NextAt: t.Add(15 * time.Second)},
		}},
		{UID: "u2", Namespace: "default", Pod: "ramp", Ended: t.Add(time.Minute), Resources: nr1.PerResource[Rung]{
			nr1.ComputeDMAMemory: {Over: t, Steps: 3, ResetAt: t.Add(70 * time.Second)},
		}},
		{UID: "u3", Namespace: "default", Pod: "gone", Throttled: true},
	}
}

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
nr1_enforcement_actions_total{action="ignored-mark",dry_run="false"} 0
nr1_enforcement_actions_total{action="ignored-mark",dry_run="true"} 0
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
nr1_enforcement_failures_total{action="ignored-mark"} 0
nr1_enforcement_failures_total{action="kill"} 0
nr1_enforcement_failures_total{action="throttle"} 0
nr1_enforcement_failures_total{action="unthrottle"} 0
nr1_enforcement_failures_total{action="warn"} 0
# HELP nr1_enforcement_ended_timestamp_seconds When a CG was killed or evicted; it is left alone until one of its containers starts again.
# TYPE nr1_enforcement_ended_timestamp_seconds gauge
nr1_enforcement_ended_timestamp_seconds{namespace="default",pod="ramp",uid="u2"} 1.70000006e+09
# HELP nr1_enforcement_mode 1 for the enforcement mode in use (enforce or dry-run).
# TYPE nr1_enforcement_mode gauge
nr1_enforcement_mode{mode="enforce"} 1
# HELP nr1_enforcement_next_step_timestamp_seconds When the next step of a CG's ladder is due if it stays over (a hard breach takes the last step sooner).
# TYPE nr1_enforcement_next_step_timestamp_seconds gauge
nr1_enforcement_next_step_timestamp_seconds{action="kill",namespace="default",pod="hog",resource="ai_hypervisor_queue",uid="u1"} 1.700000015e+09
# HELP nr1_enforcement_over_since_timestamp_seconds When a CG went over its allocation of a resource, while its ladder is under way.
# TYPE nr1_enforcement_over_since_timestamp_seconds gauge
nr1_enforcement_over_since_timestamp_seconds{namespace="default",pod="hog",resource="ai_hypervisor_queue",uid="u1"} 1.7e+09
nr1_enforcement_over_since_timestamp_seconds{namespace="default",pod="ramp",resource="compute_dma_memory",uid="u2"} 1.7e+09
# HELP nr1_enforcement_reset_timestamp_seconds When a CG back under its allocation has its ladder start again, if it stays under.
# TYPE nr1_enforcement_reset_timestamp_seconds gauge
nr1_enforcement_reset_timestamp_seconds{namespace="default",pod="ramp",resource="compute_dma_memory",uid="u2"} 1.70000007e+09
# HELP nr1_enforcement_steps_taken Steps of a CG's ladder taken for a resource.
# TYPE nr1_enforcement_steps_taken gauge
nr1_enforcement_steps_taken{namespace="default",pod="hog",resource="ai_hypervisor_queue",uid="u1"} 2
nr1_enforcement_steps_taken{namespace="default",pod="ramp",resource="compute_dma_memory",uid="u2"} 3
# HELP nr1_limit_breaches_total Times a CG went over its allocation.
# TYPE nr1_limit_breaches_total counter
nr1_limit_breaches_total{resource="ai_hypervisor_queue"} 1
nr1_limit_breaches_total{resource="compute_dma_memory"} 2
nr1_limit_breaches_total{resource="cpu_dma_memory"} 0
nr1_limit_breaches_total{resource="docker_partition"} 1
# HELP nr1_throttled 1 while a CG's throttle is attached (new opens of NR1 devices refused).
# TYPE nr1_throttled gauge
nr1_throttled{namespace="default",pod="gone",uid="u3"} 1
nr1_throttled{namespace="default",pod="hog",uid="u1"} 1
`
