// SPDX-License-Identifier: Apache-2.0

package deviceplugin

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

func TestListSizeIsExact(t *testing.T) {
	for _, capacity := range []int64{0, 1, 61, 62, 63, 512, 3843, 3844, 3845, 13417, 65536, 116244} {
		for _, healthy := range []bool{true, false} {
			want := int64(proto.Size(buildList(capacity, healthy)))
			if got := ListSize(capacity, healthy); got != want {
				t.Errorf("ListSize(%d, %v) = %d, proto.Size = %d", capacity, healthy, got, want)
			}
		}
	}
}

func TestCheckListSize(t *testing.T) {
	for _, capacity := range []nr1.Units{116244, 65536, 13417, 512, 170000} {
		if err := CheckListSize(nr1.ComputeDMAMemory, capacity); err != nil {
			t.Errorf("capacity %d refused: %v", capacity, err)
		}
	}
	err := CheckListSize(nr1.ComputeDMAMemory, 400000)
	if err == nil || !strings.Contains(err.Error(), "neureality.ai/compute_dma_memory_in_mb: 400000 devices") ||
		!strings.Contains(err.Error(), "over the safe limit") {
		t.Fatalf("err = %v", err)
	}
	// A huge capacity is refused without building the list.
	if err := CheckListSize(nr1.HypervisorQueue, 1<<40); err == nil {
		t.Fatal("2^40 queues accepted")
	}
}
