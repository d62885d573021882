// SPDX-License-Identifier: Apache-2.0

package allocation

import (
	"strconv"
	"strings"
	"testing"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

func TestFromAnnotations(t *testing.T) {
	a, found, err := FromAnnotations(map[string]string{
		"nr1.neureality.ai/compute_dma_memory":  "3",
		"nr1.neureality.ai/docker_partition":    "2392",
		"nr1.neureality.ai/ai_hypervisor_queue": "7",
		"io.kubernetes.container.hash":          "b4e1",
	})
	if err != nil || !found || a != (nr1.Amounts{3, 0, 2392, 7}) {
		t.Errorf("FromAnnotations = %v, %v, %v", a, found, err)
	}
	if a, found, err := FromAnnotations(map[string]string{"io.kubernetes.container.hash": "b4e1"}); err != nil || found || a != (nr1.Amounts{}) {
		t.Errorf("no Allocate annotations: %v, %v, %v", a, found, err)
	}
	for _, bad := range []string{"", "-1", "+3", " 3", "3\n", "3.0", "many", "8796093022208", strings.Repeat("9", 4096)} {
		a, found, err := FromAnnotations(map[string]string{"nr1.neureality.ai/compute_dma_memory": bad, "nr1.neureality.ai/ai_hypervisor_queue": "7"})
		if err == nil || !found || a != (nr1.Amounts{}) {
			t.Errorf("compute_dma_memory %q: %v, %v, %v; want an error and nothing taken", bad, a, found, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "nr1.neureality.ai/compute_dma_memory") || len(msg) > 1024 {
			t.Errorf("error %q does not name the annotation in a bounded line", msg)
		}
	}
}

func FuzzFromAnnotations(f *testing.F) {
	f.Add("3", "0", "2392", "7", uint8(0b1111))
	f.Add("3", "", "", "", uint8(0b0001))
	f.Add("", "", "", "", uint8(0))
	f.Add("-1", "1e3", " 7", "9223372036854775807", uint8(0b1111))
	f.Add("8796093022207", "8796093022208", "007", "18446744073709551616", uint8(0b1111))
	f.Fuzz(func(t *testing.T, cdma, cpudma, partition, queues string, present uint8) {
		values := [nr1.NumResources]string{cdma, cpudma, partition, queues}
		annotations := map[string]string{"io.kubernetes.container.restartCount": "0"}
		for i, r := range nr1.All {
			if present&(1<<i) != 0 {
				annotations[r.Annotation()] = values[i]
			}
		}
		a, found, err := FromAnnotations(annotations)
		if found != (present&0b1111 != 0) {
			t.Fatalf("found %v with annotations %v", found, annotations)
		}
		if err != nil {
			if a != (nr1.Amounts{}) {
				t.Fatalf("took %v from annotations it refused: %v", a, err)
			}
			if msg := err.Error(); strings.Count(msg, "\n") >= int(nr1.NumResources) || len(msg) > 4096 {
				t.Fatalf("error is not a bounded line per annotation: %q", msg)
			}
			return
		}
		for i, r := range nr1.All {
			if present&(1<<i) == 0 {
				if a[r] != 0 {
					t.Fatalf("%s = %d without its annotation", r.Name(), a[r])
				}
				continue
			}
			if a[r] < 0 || a[r] > r.MaxUnits() || r.InBase(a[r]) < 0 {
				t.Fatalf("%s: accepted %q as %d, which overflows in base units", r.Name(), values[i], a[r])
			}
			// What the device plugin would write for the amount reads the same.
			canonical := strings.TrimLeft(values[i], "0")
			if canonical == "" {
				canonical = "0"
			}
			if canonical != strconv.FormatInt(int64(a[r]), 10) {
				t.Fatalf("%s: accepted %q as %d", r.Name(), values[i], a[r])
			}
		}
	})
}
