// SPDX-License-Identifier: Apache-2.0

package deviceplugin

import "testing"

func TestIDsAreCompactUniqueAndInvertible(t *testing.T) {
	const capacity = 116244
	seen := make(map[string]bool, capacity)
	var buf []byte
	for i := int64(0); i < capacity; i++ {
		buf = appendID(buf[:0], i)
		id := string(buf)
		if len(id) > 3 {
			t.Fatalf("ID of %d is %q: longer than 3", i, id)
		}
		if seen[id] {
			t.Fatalf("ID %q repeats", id)
		}
		seen[id] = true
		if n, ok := idIndex(id, capacity); !ok || n != i {
			t.Fatalf("idIndex(%q) = %d, %v; want %d", id, n, ok, i)
		}
	}
	for _, bad := range []string{"", "00", "0a", "-1", "a b", "zzzzzzzzzzzzz", string(appendID(nil, capacity))} {
		if n, ok := idIndex(bad, capacity); ok {
			t.Errorf("idIndex(%q) accepted as %d", bad, n)
		}
	}
}
