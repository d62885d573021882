// SPDX-License-Identifier: Apache-2.0

package deviceplugin

import (
	"fmt"
	"math"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// MaxListBytes is the largest ListAndWatch answer the agent will send. The kubelet's gRPC
// client refuses messages above 4 MiB and then silently sets the resource's allocatable
// to zero; a quarter of margin keeps clear of that and of framing overhead.
const MaxListBytes = 3 << 20

// ListSize is the exact protobuf size of a ListAndWatch answer with capacity devices,
// computed without building it. Unhealthy lists are the larger.
func ListSize(capacity int64, healthy bool) int64 {
	health := int64(len("Unhealthy"))
	if healthy {
		health = int64(len("Healthy"))
	}
	if capacity > math.MaxInt32 {
		return math.MaxInt64 // no list that large can be built, let alone sent
	}
	var size int64
	// IDs of length l are the indices below base^l not covered by shorter ones.
	for l, lo, hi := int64(1), int64(0), idBase; lo < capacity; l, lo, hi = l+1, hi, hi*idBase {
		n := min(hi, capacity) - lo
		inner := (1 + 1 + l) + (1 + 1 + health)            // ID and health fields: tag, length, bytes
		size += n * (1 + varintLen(uint64(inner)) + inner) // the repeated field's tag and length
	}
	return size
}

func varintLen(v uint64) int64 {
	n := int64(1)
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// CheckListSize refuses a capacity whose device list could not be advertised safely.
func CheckListSize(r nr1.Resource, capacity nr1.Units) error {
	if size := ListSize(int64(capacity), false); size > MaxListBytes {
		return fmt.Errorf("%s: %d devices make a ListAndWatch answer of %.2f MiB, over the safe limit of %.2f MiB "+
			"(the kubelet drops answers over 4 MiB and advertises nothing)",
			r.Name(), capacity, float64(size)/(1<<20), float64(MaxListBytes)/(1<<20))
	}
	return nil
}
