// SPDX-License-Identifier: Apache-2.0

package nr1

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestResourceNames(t *testing.T) {
	want := map[Resource][3]string{
		ComputeDMAMemory: {"neureality.ai/compute_dma_memory_in_mb", "compute_dma_memory", "NR1_COMPUTE_DMA_MEMORY_MB"},
		CPUDMAMemory:     {"neureality.ai/cpu_dma_memory_in_mb", "cpu_dma_memory", "NR1_CPU_DMA_MEMORY_MB"},
		DockerPartition:  {"neureality.ai/docker_partition_in_mb", "docker_partition", "NR1_DOCKER_PARTITION_MB"},
		HypervisorQueue:  {"neureality.ai/ai_hypervisor_queue", "ai_hypervisor_queue", "NR1_AI_HYPERVISOR_QUEUES"},
	}
	for r, w := range want {
		if got := [3]string{r.Name(), r.Short(), r.EnvVar()}; got != w {
			t.Errorf("%d: got %v, want %v", r, got, w)
		}
		for _, s := range w[:2] {
			if p, err := ParseResource(s); err != nil || p != r {
				t.Errorf("ParseResource(%q) = %v, %v; want %v", s, p, err, r)
			}
		}
	}
	if _, err := ParseResource("neureality.ai/gpu"); err == nil || !strings.Contains(err.Error(), `"neureality.ai/gpu"`) {
		t.Errorf("ParseResource of unknown name: err = %v", err)
	}
	if HypervisorQueue.UnitBytes() != 1 || ComputeDMAMemory.UnitBytes() != 1<<20 {
		t.Error("unit sizes wrong")
	}
	// A metric family of one base unit holds each resource's base amount: an MB is
	// exported as its bytes, a queue as one.
	for _, r := range All {
		want := map[string]int64{"bytes": 1 << 20, "queues": 1}
		if got, ok := want[r.BaseUnit()]; !ok || got != r.UnitBytes() {
			t.Errorf("%s: base unit %q with %d bytes a unit", r.Short(), r.BaseUnit(), r.UnitBytes())
		}
	}
}

func TestAmounts(t *testing.T) {
	resnet := Amounts{3, 0, 2392, 7}
	if got := Add(resnet, resnet); got != (Amounts{6, 0, 4784, 14}) {
		t.Errorf("Add = %v", got)
	}
	if got := Max(resnet, Amounts{5, 1, 0, 7}); got != (Amounts{5, 1, 2392, 7}) {
		t.Errorf("Max = %v", got)
	}
	b, err := json.Marshal(resnet)
	if err != nil || string(b) != `{"compute_dma_memory":3,"cpu_dma_memory":0,"docker_partition":2392,"ai_hypervisor_queue":7}` {
		t.Errorf("JSON %s %v", b, err)
	}
	var back Amounts
	if err := json.Unmarshal(b, &back); err != nil || back != resnet {
		t.Errorf("JSON round trip %v %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"gpu":1}`), &back); err == nil {
		t.Error("unknown resource accepted")
	}
	if s := resnet.String(); s != "compute_dma_memory=3 cpu_dma_memory=0 docker_partition=2392 ai_hypervisor_queue=7" {
		t.Errorf("String = %q", s)
	}
}

func TestPerResourceJSON(t *testing.T) {
	type ladder struct {
		Steps int    `json:"steps"`
		Kind  string `json:"kind"`
	}
	p := PerResource[ladder]{{1, "a"}, {2, "b"}, {3, "c"}, {4, "d"}}
	// A key present is decoded over what is held: fields and resources it does not
	// name keep their values, as a configuration file overrides defaults.
	if err := json.Unmarshal([]byte(`{"cpu_dma_memory":{"steps":9}}`), &p); err != nil {
		t.Fatal(err)
	}
	if want := (PerResource[ladder]{{1, "a"}, {9, "b"}, {3, "c"}, {4, "d"}}); p != want {
		t.Errorf("merged %v, want %v", p, want)
	}
	for doc, want := range map[string]string{
		`{"gpu":{}}`: `unknown NR1 resource "gpu"`,
		`{"neureality.ai/ai_hypervisor_queue":{}}`: `unknown NR1 resource "neureality.ai/ai_hypervisor_queue"`,
		`{"ai_hypervisor_queue":{"stpes":1}}`:      `ai_hypervisor_queue: json: unknown field "stpes"`,
		`{"ai_hypervisor_queue":{"steps":"many"}}`: `ai_hypervisor_queue: json: cannot unmarshal`,
		`["compute_dma_memory"]`:                   `cannot unmarshal array`,
	} {
		err := json.Unmarshal([]byte(doc), &p)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", doc, err, want)
		}
	}
	b, err := json.Marshal(PerResource[ladder]{{Steps: 1}})
	if err != nil || string(b) != `{"compute_dma_memory":{"steps":1,"kind":""},"cpu_dma_memory":{"steps":0,"kind":""},"docker_partition":{"steps":0,"kind":""},"ai_hypervisor_queue":{"steps":0,"kind":""}}` {
		t.Errorf("JSON %s %v", b, err)
	}
	if got := ComputeDMAMemory.InBase(3); got != 3<<20 || HypervisorQueue.InBase(7) != 7 || ComputeDMAMemory.InUnits(3<<19) != 1.5 {
		t.Errorf("unit conversions wrong: 3 MB = %d bytes", got)
	}
}

func TestParseUnits(t *testing.T) {
	for _, r := range All {
		most := r.MaxUnits()
		if b := r.InBase(most); b < 0 || int64(b)/r.UnitBytes() != int64(most) || math.MaxInt64-int64(b) >= r.UnitBytes() {
			t.Errorf("%s: MaxUnits %d is %d in base units: not the largest that fits", r.Name(), most, b)
		}
		for in, want := range map[string]Units{"0": 0, "7": 7, "0042": 42, strconv.FormatInt(int64(most), 10): most} {
			if got, err := r.ParseUnits(in); err != nil || got != want {
				t.Errorf("%s.ParseUnits(%q) = %d, %v; want %d", r.Name(), in, got, err, want)
			}
		}
		for _, bad := range []string{"", "-1", "+1", " 1", "1 ", "1e3", "0x10", "１", strconv.FormatInt(int64(most)+1, 10), "99999999999999999999"} {
			if got, err := r.ParseUnits(bad); err == nil {
				t.Errorf("%s.ParseUnits(%q) = %d, want an error", r.Name(), bad, got)
			}
		}
	}
}
