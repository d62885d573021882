// SPDX-License-Identifier: Apache-2.0

//go:build quickstart

package e2e

import (
	"os"
	"regexp"
	"testing"
)

// expectation is one thing the README says `make run` shows.
type expectation struct {
	what string
	re   *regexp.Regexp
}

func expect(what, re string) expectation {
	return expectation{what, regexp.MustCompile("(?m)" + re)}
}

// quickStartShows is what `make run` must print in each mode: the README's account of it
// (ready, the node's NR1, the ResNet-50 CG running with its budget, the oversized CG
// pending with its reason, the metrics, kubectl nr1 top, the agent's log).
var quickStartShows = map[string][]expectation{
	"devicePlugin": {
		expect("ready", `^== ready in \d+ s \(devicePlugin mode\)$`),
		expect("the node's capacity and allocatable of each resource", `^ +neureality\.ai/compute_dma_memory_in_mb: +116244\n(?:.*\n)*? +neureality\.ai/compute_dma_memory_in_mb: +116244$`),
		expect("the node's cpu DMA capacity", `^ +neureality\.ai/cpu_dma_memory_in_mb: +512$`),
		expect("the node's docker partition capacity", `^ +neureality\.ai/docker_partition_in_mb: +13417$`),
		expect("the node's queue capacity", `^ +neureality\.ai/ai_hypervisor_queue: +65536$`),
		expect("the ResNet-50 CG's allocation on the node", `^ +neureality\.ai/docker_partition_in_mb +2392 +2392$`),
		expect("the oversized CG's reason", `Insufficient neureality\.ai/compute_dma_memory_in_mb`),
	},
	"dra": {
		expect("ready", `^== ready in \d+ s \(dra mode\)$`),
		expect("the NR1 device's capacities in the node's ResourceSlice", `^nr1-0: computeDMA=116244Mi cpuDMA=512Mi dockerPartition=13417Mi hvQueues=65536$`),
		expect("what the ResNet-50 CG's claim consumed", `^default/resnet50-nr1-\w+: computeDMA=3Mi( cpuDMA=0)? dockerPartition=2392Mi hvQueues=7$`),
		expect("the oversized CG's reason", `cannot allocate all claims`),
	},
}

// Both modes.
var quickStartShowsAlways = []expectation{
	expect("the ResNet-50 CG running", `^default +resnet50 +2/2 +Running `),
	expect("the oversized CG pending", `^default +oversized +0/1 +Pending `),
	expect("the oversized CG's phase", `^== the oversized CG: Pending$`),
	expect("the ResNet-50 CG's budget, as its health-handler read it", `budget NR1_AI_HYPERVISOR_QUEUES=7 NR1_COMPUTE_DMA_MEMORY_MB=3 (NR1_CPU_DMA_MEMORY_MB=0 )?NR1_DOCKER_PARTITION_MB=2392$`),
	expect("the node's capacity in the metrics, 116244 MB in bytes", `^nr1_capacity_bytes\{resource="compute_dma_memory"\} 1\.21890668544e\+11$`),
	expect("the ResNet-50 CG's usage in the metrics", `^nr1_cg_usage_queues\{namespace="default",pod="resnet50",resource="ai_hypervisor_queue"\} \d+$`),
	expect("kubectl nr1 top's node table", `^NODE +RESOURCE +CAPACITY +ALLOCATABLE +ALLOCATED +USED +UNATTRIBUTED$`),
	expect("kubectl nr1 top's node capacity", `^\S+ +compute_dma_memory +116244 +116244 +3 `),
	expect("kubectl nr1 top's ResNet-50 CG with its budget, measured", `^default +resnet50 +\S+ +[\d.]+/3 +[\d.]+/0 +[\d.]+/2392 +\d+/7 `),
	expect("the ResNet-50 CG's docker partition in the metrics", `^nr1_cg_usage_bytes\{namespace="default",pod="resnet50",resource="docker_partition"\} [\d.e+]+$`),
	expect("the agent's log", `^== agent log .*\n.*level=`),
}

// TestQuickStartOutput checks what `make run` printed ($NR1_QUICKSTART_LOG) in the mode
// it ran ($NR1_QUICKSTART_MODE); deploy/ci/quickstart.sh runs it.
func TestQuickStartOutput(t *testing.T) {
	mode := os.Getenv("NR1_QUICKSTART_MODE")
	want, ok := quickStartShows[mode]
	if !ok {
		t.Fatalf("NR1_QUICKSTART_MODE=%q: want devicePlugin or dra", mode)
	}
	out, err := os.ReadFile(os.Getenv("NR1_QUICKSTART_LOG"))
	if err != nil {
		t.Fatalf("NR1_QUICKSTART_LOG: %v", err)
	}
	for _, e := range append(want, quickStartShowsAlways...) {
		if !e.re.Match(out) {
			t.Errorf("make run (%s mode) does not show %s: no line matches %s", mode, e.what, e.re)
		}
	}
}
