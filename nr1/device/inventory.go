// SPDX-License-Identifier: Apache-2.0

package device

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/untrusted"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Inventory reads the NR1's capacity and health from the host.
type Inventory struct {
	cfg       Config
	sysfsRoot string
	devRoot   string
	// resolved are the files as Resolve found them; health checks they are still those.
	resolved []ResolvedFile
}

// NewInventory returns an inventory reading sysfs under sysfsRoot and finding the files
// of the host's /dev under devRoot.
func NewInventory(cfg Config, sysfsRoot, devRoot string) *Inventory {
	return &Inventory{cfg: cfg, sysfsRoot: sysfsRoot, devRoot: devRoot}
}

// CapacitySource says where a resource's capacity was read.
type CapacitySource string

// Where capacity can come from, in order of precedence.
const (
	FromSysfs     CapacitySource = "sysfs"
	FromPartition CapacitySource = "statfs"
	FromConfig    CapacitySource = "config"
)

// Capacity reads each resource's capacity, in units, and where it came from.
func (inv *Inventory) Capacity() (nr1.Amounts, nr1.PerResource[CapacitySource], error) {
	var (
		capacity nr1.Amounts
		sources  nr1.PerResource[CapacitySource]
	)
	for _, r := range nr1.All {
		n, src, err := inv.capacityOf(r)
		if err != nil {
			return capacity, sources, fmt.Errorf("capacity of %s: %w", r.Name(), err)
		}
		capacity[r], sources[r] = n, src
	}
	return capacity, sources, nil
}

func (inv *Inventory) capacityOf(r nr1.Resource) (nr1.Units, CapacitySource, error) {
	rc := &inv.cfg.Resources[r]
	if rc.CapacityAttribute != "" {
		n, err := inv.readCapacityAttribute(r, rc.CapacityAttribute)
		switch {
		case err == nil:
			return n, FromSysfs, nil
		case !errors.Is(err, fs.ErrNotExist):
			return 0, "", err
		}
	}
	if p := rc.Partition; p != nil {
		n, err := partitionMB(p)
		return n, FromPartition, err
	}
	if rc.Capacity != nil {
		return *rc.Capacity, FromConfig, nil
	}
	return 0, "", fmt.Errorf("sysfs attribute %s is absent and no capacity is configured",
		inv.attributePath(rc.CapacityAttribute))
}

func (inv *Inventory) attributePath(name string) string {
	return filepath.Join(inv.sysfsRoot, inv.cfg.SysfsDevice, name)
}

func (inv *Inventory) readCapacityAttribute(r nr1.Resource, name string) (nr1.Units, error) {
	p := inv.attributePath(name)
	b, err := readAttribute(p)
	if err != nil {
		return 0, fmt.Errorf("sysfs attribute: %w", err)
	}
	n, err := parseCapacity(r, b)
	if err != nil {
		return 0, fmt.Errorf("sysfs attribute %s: %w", p, err)
	}
	return n, nil
}

// maxAttribute bounds what is read of a sysfs attribute: the kernel serves one in a page.
const maxAttribute = 4096

// readAttribute reads a sysfs attribute; anything longer than a page is not one (a
// path configured by mistake, or not sysfs) and is refused without being read whole.
func readAttribute(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err //nolint:wrapcheck // a *PathError naming p, which callers unwrap
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAttribute+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if len(b) > maxAttribute {
		return nil, fmt.Errorf("%s: longer than a sysfs attribute (%d bytes)", p, maxAttribute)
	}
	return b, nil
}

// parseCapacity reads a capacity attribute: an amount of r in decimal digits, blanks
// around it (the kernel's newline) ignored.
func parseCapacity(r nr1.Resource, b []byte) (nr1.Units, error) {
	return r.ParseUnits(strings.TrimSpace(string(b)))
}

// parseHealth reads a health attribute at p: healthy when its content, blanks around it
// ignored, is one of the healthy values in any case; otherwise the reason quotes the
// content, bounded, since it is the driver's (or whatever the path names).
func parseHealth(p string, b []byte, healthy []string) Status {
	v := strings.TrimSpace(string(b))
	for _, ok := range healthy {
		if strings.EqualFold(v, ok) {
			return Status{Healthy: true}
		}
	}
	return Status{Reason: fmt.Sprintf("health attribute %s reads %s", p, untrusted.Quote(v))}
}

func partitionMB(p *Partition) (nr1.Units, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p.Path, &st); err != nil {
		return 0, fmt.Errorf("statfs of image partition %s: %w", p.Path, err)
	}
	total := int64(st.Blocks) * st.Bsize >> 20 //nolint:gosec // block counts fit in int64
	if total < p.ReserveMB {
		return 0, fmt.Errorf("image partition %s holds %d MB, less than the reserve of %d MB", p.Path, total, p.ReserveMB)
	}
	return nr1.Units(total - p.ReserveMB), nil
}

// Status is the health of one resource.
type Status struct {
	Healthy bool
	// Reason says why the resource is unhealthy; empty when healthy.
	Reason string
}

// Health is the status of each resource.
type Health = nr1.PerResource[Status]

// Probe reads the NR1's health now: the health attribute, when configured, reads one of
// the healthy values, and each resource's device files exist and, once resolved, are
// still the files resolved (a device re-created with another number would be measured
// and throttled under its old one).
func (inv *Inventory) Probe() Health {
	nr1Status := inv.probeAttribute()
	var h Health
	for _, r := range nr1.All {
		h[r] = nr1Status
	}
	if !nr1Status.Healthy {
		return h
	}
	files := inv.resolved
	if files == nil {
		for _, r := range nr1.All {
			for _, f := range inv.cfg.Resources[r].Files {
				files = append(files, ResolvedFile{File: f, Resource: r, Local: Local(inv.devRoot, f.Path)})
			}
		}
	}
	for _, f := range files {
		if !h[f.Resource].Healthy {
			continue
		}
		id, err := Identify(f.Local)
		switch {
		case err != nil:
			h[f.Resource] = Status{Reason: fmt.Sprintf("device file %s: %v", f.Path, unwrapPathError(err))}
		case inv.resolved != nil && id != f.Identity:
			h[f.Resource] = Status{Reason: fmt.Sprintf("device file %s is not the file found at start (%+v, now %+v): restart the agent", f.Path, f.Identity, id)}
		}
	}
	return h
}

func (inv *Inventory) probeAttribute() Status {
	if inv.cfg.HealthAttribute == "" {
		return Status{Healthy: true}
	}
	p := inv.attributePath(inv.cfg.HealthAttribute)
	b, err := readAttribute(p)
	if err != nil {
		return Status{Reason: fmt.Sprintf("health attribute %s: %v", p, unwrapPathError(err))}
	}
	return parseHealth(p, b, inv.cfg.HealthyValues)
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
