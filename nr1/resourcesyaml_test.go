// SPDX-License-Identifier: Apache-2.0

package nr1

import (
	"os"
	"strings"
	"testing"
)

func TestParseResourcesYAMLSeedExample(t *testing.T) {
	f, err := os.Open("testdata/resnet50-resources.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParseResourcesYAML(f)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Amounts{3, 0, 2392, 7}); got != want {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestParseResourcesYAMLAccepts(t *testing.T) {
	in := "# written by the NR1 toolchain\n\n" +
		"\"neureality.ai/compute_dma_memory_in_mb\": 3\n" +
		"neureality.ai/cpu_dma_memory_in_mb: '0'\r\n" +
		"neureality.ai/docker_partition_in_mb:   2392   # image\n" +
		"neureality.ai/ai_hypervisor_queue: 7\n"
	got, err := ParseResourcesYAML(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Amounts{3, 0, 2392, 7}); got != want {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestParseResourcesYAMLErrors(t *testing.T) {
	const (
		c = "neureality.ai/compute_dma_memory_in_mb: 3\n"
		p = "neureality.ai/cpu_dma_memory_in_mb: 0\n"
		d = "neureality.ai/docker_partition_in_mb: 2392\n"
		q = "neureality.ai/ai_hypervisor_queue: 7\n"
	)
	tests := []struct {
		name, in, want string
	}{
		{"unknown name", c + p + d + q + "neureality.ai/gpu: 1\n", `line 5: unknown resource name "neureality.ai/gpu"`},
		{"short name is not the toolchain's", "compute_dma_memory: 3\n" + p + d + q, `line 1: unknown resource name "compute_dma_memory"`},
		{"negative", c + p + "neureality.ai/docker_partition_in_mb: -5\n" + q, "line 3: neureality.ai/docker_partition_in_mb: value -5 is negative"},
		{"fraction", "neureality.ai/compute_dma_memory_in_mb: 2.5\n" + p + d + q, `line 1: neureality.ai/compute_dma_memory_in_mb: value "2.5" is not an integer`},
		{"word", c + p + d + "neureality.ai/ai_hypervisor_queue: seven\n", `value "seven" is not an integer`},
		{"duplicate", c + p + d + q + c, "line 5: neureality.ai/compute_dma_memory_in_mb repeats line 1"},
		{"missing", c + p + q, "neureality.ai/docker_partition_in_mb is missing"},
		{"no colon", c + "neureality.ai/cpu_dma_memory_in_mb 0\n" + d + q, `line 2: could not find expected ':'`},
		{"empty value", c + "neureality.ai/cpu_dma_memory_in_mb:\n" + d + q, `line 2: neureality.ai/cpu_dma_memory_in_mb: want "name: integer"`},
		{"list", "- " + c, `line 1: want a mapping`},
		{"two documents", c + p + d + q + "---\n" + c, `line 5: a second document`},
		{"nested", "resources:\n  neureality.ai/compute_dma_memory_in_mb: 3\n", `line 1: `},
		{"indented", "  " + c + p + d + q, "line 1: did not find expected"},
		{"overflow", "neureality.ai/compute_dma_memory_in_mb: 99999999999999999999\n" + p + d + q, "is not an integer"},
		{"empty file", "", "neureality.ai/compute_dma_memory_in_mb is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseResourcesYAML(strings.NewReader(tt.in))
			if err == nil {
				t.Fatalf("no error for %q", tt.in)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func FuzzParseResourcesYAML(f *testing.F) {
	f.Add(FormatResourcesYAML(Amounts{3, 0, 2392, 7}))
	f.Add("neureality.ai/compute_dma_memory_in_mb: -1\n")
	f.Add("# c\n'neureality.ai/ai_hypervisor_queue': \"7\"\n")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseResourcesYAML(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, r := range All {
			if got[r] < 0 {
				t.Fatalf("accepted negative %s in %q", r.Name(), in)
			}
		}
		// What was accepted must survive a round trip through the canonical form.
		again, err := ParseResourcesYAML(strings.NewReader(FormatResourcesYAML(got)))
		if err != nil || again != got {
			t.Fatalf("round trip of %v: %v, %v", got, again, err)
		}
	})
}
