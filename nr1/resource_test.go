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
	resnet := Amounts{3, 0, 2392, 7}
	if got := resnet.Add(resnet); got != (Amounts{6, 0, 4784, 14}) {
		t.Errorf("Add = %v", got)
	}
	if got := resnet.Max(Amounts{5, 1, 0, 7}); got != (Amounts{5, 1, 2392, 7}) {
		t.Errorf("Max = %v", got)
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
