// SPDX-License-Identifier: Apache-2.0

package manifest

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// What a claim consumed reads back in units, its capacities named with or without the
// driver's domain; anything the NR1 has not, or not a whole number of units, is refused.
func TestAmounts(t *testing.T) {
	got, err := Amounts(map[resourceapi.QualifiedName]resource.Quantity{
		"computeDMA": resource.MustParse("3Mi"), "cpuDMA": resource.MustParse("0"),
		"nr1.neureality.ai/dockerPartition": resource.MustParse("2392Mi"), "hvQueues": resource.MustParse("7"),
	})
	if err != nil || got != (nr1.Amounts{3, 0, 2392, 7}) {
		t.Errorf("ResNet-50's consumption read as %v, %v", got, err)
	}
	for _, bad := range []map[resourceapi.QualifiedName]resource.Quantity{
		{"gpuMemory": resource.MustParse("1Gi")},
		{"computeDMA": resource.MustParse("1.5Mi")},
		{"computeDMA": resource.MustParse("-1Mi")},
		{"hvQueues": resource.MustParse("500m")},
	} {
		if a, err := Amounts(bad); err == nil {
			t.Errorf("%v read as %v", bad, a)
		}
	}
}
