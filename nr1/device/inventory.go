package device

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

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
		n, err := inv.readCapacityAttribute(rc.CapacityAttribute)
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

func (inv *Inventory) readCapacityAttribute(name string) (nr1.Units, error) {
	p := inv.attributePath(name)
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("sysfs attribute: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("sysfs attribute %s: want a non-negative integer, got %q", p, strings.TrimSpace(string(b)))
	}
	return nr1.Units(n), nil
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
	b, err := os.ReadFile(p)
	if err != nil {
		return Status{Reason: fmt.Sprintf("health attribute %s: %v", p, unwrapPathError(err))}
	}
	v := strings.TrimSpace(string(b))
	for _, ok := range inv.cfg.HealthyValues {
		if strings.EqualFold(v, ok) {
			return Status{Healthy: true}
		}
	}
	return Status{Reason: fmt.Sprintf("health attribute %s reads %q", p, v)}
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
