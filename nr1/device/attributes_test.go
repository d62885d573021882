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

func TestDriverVersion(t *testing.T) {
	// sysfs as the kernel lays it out: the class directory's device link, the device's
	// driver link, the driver's module link, the module's version.
	sys := t.TempDir()
	mod := filepath.Join(sys, "module", "nr1")
	for _, d := range []string{"class/neureality/nr1_0", "devices/platform/nr1.0", "bus/platform/drivers/nr1", "module/nr1"} {
		if err := os.MkdirAll(filepath.Join(sys, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"class/neureality/nr1_0/device":   "../../../devices/platform/nr1.0",
		"devices/platform/nr1.0/driver":   "../../../bus/platform/drivers/nr1",
		"bus/platform/drivers/nr1/module": "../../../../module/nr1",
	} {
		if err := os.Symlink(target, filepath.Join(sys, link)); err != nil {
			t.Fatal(err)
		}
	}
	inv := NewInventory(Config{SysfsDevice: "class/neureality/nr1_0"}, sys, t.TempDir())
	if got := inv.DriverVersion(); got != "" {
		t.Errorf("a module declaring no version: DriverVersion() = %q", got)
	}
	for content, want := range map[string]string{"2.1.3\n": "2.1.3", "  3.0  \n": "3.0", "bad\x01version\n": "", "": ""} {
		if err := os.WriteFile(filepath.Join(mod, "version"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := inv.DriverVersion(); got != want {
			t.Errorf("module version %q: DriverVersion() = %q, want %q", content, got, want)
		}
	}
	// A platform device is not a PCI address to report.
	if got := inv.Attributes(); !maps.Equal(got, map[string]string{"model": "NR1"}) {
		t.Errorf("Attributes() = %v", got)
	}
}
