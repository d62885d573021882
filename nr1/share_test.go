// SPDX-License-Identifier: Apache-2.0

package nr1

import "testing"

func TestShareOfMountReadsBackShareMount(t *testing.T) {
	src, dst := ShareMount("/var/run/cdi", "0b0d-c1", "0b0d-c1-0")
	if src != "/var/run/cdi/nr1.neureality.ai_0b0d-c1.json" || dst != "/run/nr1.neureality.ai/shares/0b0d-c1-0.json" {
		t.Fatalf("mount %s → %s", src, dst)
	}
	if dev, ok := ShareOfMount("/var/run/cdi/", src, dst); !ok || dev != "neureality.ai/nr1=0b0d-c1-0" {
		t.Errorf("ShareOfMount = %q, %v", dev, ok)
	}
}

// Only the driver's own mount marks a share: a pod's volume at the same destination,
// a spec of another claim, another directory or a name without a share are nothing.
func TestShareOfMountRefusesWhatThePodCouldMake(t *testing.T) {
	for _, m := range []struct{ source, destination string }{
		{"/var/lib/kubelet/pods/p/volumes/kubernetes.io~empty-dir/x/c1-0.json", "/run/nr1.neureality.ai/shares/c1-0.json"},
		{"/var/run/cdi/nr1.neureality.ai_c2.json", "/run/nr1.neureality.ai/shares/c1-0.json"},
		{"/etc/cdi/nr1.neureality.ai_c1.json", "/run/nr1.neureality.ai/shares/c1-0.json"},
		{"/var/run/cdi/nr1.neureality.ai_c1.json", "/run/nr1.neureality.ai/shares/c1-.json"},
		{"/var/run/cdi/nr1.neureality.ai_c1.json", "/run/nr1.neureality.ai/shares/c1-0"},
		{"/var/run/cdi/nr1.neureality.ai_c1.json", "/run/nr1.neureality.ai/c1-0.json"},
		{"/var/run/cdi/nr1.neureality.ai_c1.json", "/run/nr1.neureality.ai/shares/sub/c1-0.json"},
		{"/var/run/cdi/nr1.neureality.ai_.json", "/run/nr1.neureality.ai/shares/-0.json"},
		{"/var/run/cdi/other_c1.json", "/run/nr1.neureality.ai/shares/c1-0.json"},
	} {
		if dev, ok := ShareOfMount("/var/run/cdi", m.source, m.destination); ok {
			t.Errorf("%s at %s read as share %s", m.source, m.destination, dev)
		}
	}
}
