// SPDX-License-Identifier: Apache-2.0

package device

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// pciAddress is a PCI device's sysfs name: domain:bus:device.function.
var pciAddress = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// Attributes describes the NR1 as a DRA device does: its model, and where the driver
// reports them, its serial number (the serial attribute) and PCI address (the device
// link of the sysfs directory), under the names DRA uses. What is absent or not one of
// those is left out.
func (inv *Inventory) Attributes() map[string]string {
	out := map[string]string{"model": "NR1"}
	if b, err := readAttribute(inv.attributePath("serial")); err == nil {
		if s := strings.TrimSpace(string(b)); s != "" && len(s) <= 64 && strings.IndexFunc(s, notPrintable) < 0 {
			out["serial"] = s
		}
	}
	if target, err := os.Readlink(inv.attributePath("device")); err == nil {
		if addr := filepath.Base(target); pciAddress.MatchString(addr) {
			out["resource.kubernetes.io/pciBusID"] = addr
		}
	}
	return out
}

func notPrintable(r rune) bool { return r > unicode.MaxASCII || !unicode.IsPrint(r) }

// DriverVersion is the version the NR1's kernel module declares, where sysfs shows every
// module's (the device's driver's module's version attribute), or "" when it declares
// none or something unprintable.
func (inv *Inventory) DriverVersion() string {
	b, err := readAttribute(filepath.Join(inv.attributePath("device"), "driver", "module", "version"))
	if err != nil {
		return ""
	}
	v := strings.TrimSpace(string(b))
	if len(v) > 64 || strings.IndexFunc(v, notPrintable) >= 0 {
		return ""
	}
	return v
}
