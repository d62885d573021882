package nr1

import (
	"encoding/json"
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
}

func TestAmounts(t *testing.T) {
	node := Amounts{116244, 512, 13417, 65536}
	resnet := Amounts{3, 0, 2392, 7}
	if got := node.Sub(resnet); got != (Amounts{116241, 512, 11025, 65529}) {
		t.Errorf("Sub = %v", got)
	}
	if got := resnet.Add(resnet); got != (Amounts{6, 0, 4784, 14}) {
		t.Errorf("Add = %v", got)
	}
	if !resnet.Fits(node) || node.Fits(resnet) {
		t.Error("Fits wrong")
	}
	over := Amounts{3, 1, 2000, 8}.Exceeding(resnet)
	if len(over) != 2 || over[0] != CPUDMAMemory || over[1] != HypervisorQueue {
		t.Errorf("Exceeding = %v", over)
	}
	if r, ok := (Amounts{0, 0, -1, 0}).Negative(); !ok || r != DockerPartition {
		t.Errorf("Negative = %v %v", r, ok)
	}
	if !(Amounts{}).IsZero() || resnet.IsZero() {
		t.Error("IsZero wrong")
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
