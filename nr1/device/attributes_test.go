// SPDX-License-Identifier: Apache-2.0

package device

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
)

func TestAttributes(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "class/neureality/nr1_0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	inv := NewInventory(DefaultConfig(), root, "/dev")
	if got := inv.Attributes(); !maps.Equal(got, map[string]string{"model": "NR1"}) {
		t.Errorf("without the driver's attributes: %v", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "serial"), []byte("NR1-00042\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../0000:3b:00.0", filepath.Join(dir, "device")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"model": "NR1", "serial": "NR1-00042", "resource.kubernetes.io/pciBusID": "0000:3b:00.0"}
	if got := inv.Attributes(); !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// What is not a serial number or a PCI address is left out.
	if err := os.WriteFile(filepath.Join(dir, "serial"), []byte("a\x00b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "device")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../virtual", filepath.Join(dir, "device")); err != nil {
		t.Fatal(err)
	}
	if got := inv.Attributes(); !maps.Equal(got, map[string]string{"model": "NR1"}) {
		t.Errorf("refused attributes read as %v", got)
	}
}
