// SPDX-License-Identifier: Apache-2.0

package device

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Config says where the NR1 driver exposes itself. Paths in sysfs are relative to the
// sysfs root, which is the agent's --path.sysfs.
type Config struct {
	// SysfsDevice is the NR1's sysfs directory, relative to the sysfs root.
	SysfsDevice string `json:"sysfsDevice"`
	// HealthAttribute is a file in SysfsDevice whose content says whether the NR1 is
	// healthy; empty means health is only the presence of the device files.
	HealthAttribute string `json:"healthAttribute"`
	// HealthyValues are the contents of HealthAttribute that mean healthy.
	HealthyValues []string  `json:"healthyValues"`
	Resources     Resources `json:"resources"`
}

// Resources configures each resource; the keys are the resources' short names.
type Resources = nr1.PerResource[Resource]

// Resource configures where one resource's capacity comes from and which device files
// carry it.
type Resource struct {
	// CapacityAttribute is a file in SysfsDevice holding the capacity in units. When it
	// exists it wins over every other source.
	CapacityAttribute string `json:"capacityAttribute"`
	// Partition, for the docker partition, measures capacity with statfs.
	Partition *Partition `json:"partition,omitempty"`
	// Capacity is used when the attribute is absent and no partition is configured.
	Capacity *nr1.Units `json:"capacity,omitempty"`
	// Files are the device files a container of a CG gets for this resource.
	Files []File `json:"files"`
}

// Partition measures the image partition's capacity: its size less a reserve.
type Partition struct {
	Path      string `json:"path"`
	ReserveMB int64  `json:"reserveMB"`
}

// File is one NR1 device file: a character device (passed to containers as a device)
// or a regular file (bind-mounted).
type File struct {
	Path string `json:"path"`
	// ContainerPath is where the container sees it; empty means Path.
	ContainerPath string `json:"containerPath,omitempty"`
	// Measure is how a process's use of the file counts: mappedBytes, openHandles, or
	// fdinfo (the value of FdinfoKey in /proc/PID/fdinfo, drm-usage-stats format, for
	// drivers that report per-client usage). Empty: the resource's default (mapped
	// bytes for DMA memory, open handles for queues).
	Measure   string `json:"measure,omitempty" enum:"mappedBytes|openHandles|fdinfo"`
	FdinfoKey string `json:"fdinfoKey,omitempty"`
}

// InContainer is the path the container sees.
func (f File) InContainer() string {
	if f.ContainerPath != "" {
		return f.ContainerPath
	}
	return f.Path
}

// DefaultConfig is the NR1 driver's layout.
func DefaultConfig() Config {
	return Config{
		SysfsDevice:     "class/neureality/nr1_0",
		HealthAttribute: "health",
		HealthyValues:   []string{"ok", "healthy", "1"},
		Resources: Resources{
			nr1.ComputeDMAMemory: {CapacityAttribute: "compute_dma_memory_mb", Files: []File{{Path: "/dev/nr1_0_compute_dma"}}},
			nr1.CPUDMAMemory:     {CapacityAttribute: "cpu_dma_memory_mb", Files: []File{{Path: "/dev/nr1_0_cpu_dma"}}},
			nr1.DockerPartition:  {CapacityAttribute: "docker_partition_mb"},
			nr1.HypervisorQueue:  {CapacityAttribute: "ai_hypervisor_queues", Files: []File{{Path: "/dev/nr1_0_hv_queue"}}},
		},
	}
}

// Validate checks the configuration; field names in errors are prefixed with prefix.
func (c *Config) Validate(prefix string) error {
	var errs []error
	field := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: "+format, append([]any{prefix, name}, args...)...))
	}
	if !relativeClean(c.SysfsDevice) {
		field("sysfsDevice", "must be a relative path inside the sysfs root, got %q", c.SysfsDevice)
	}
	if c.HealthAttribute != "" && !relativeClean(c.HealthAttribute) {
		field("healthAttribute", "must be a relative path, got %q", c.HealthAttribute)
	}
	if c.HealthAttribute != "" && len(c.HealthyValues) == 0 {
		field("healthyValues", "must not be empty when healthAttribute is set")
	}
	for _, r := range nr1.All {
		rc := &c.Resources[r]
		name := "resources." + r.Short()
		if rc.CapacityAttribute != "" && !relativeClean(rc.CapacityAttribute) {
			field(name+".capacityAttribute", "must be a relative path, got %q", rc.CapacityAttribute)
		}
		if rc.Capacity != nil && *rc.Capacity < 0 {
			field(name+".capacity", "must not be negative, got %d", *rc.Capacity)
		}
		// The capacity is offered (DRA) and exported in bytes: as a sysfs attribute's,
		// its bytes must fit in 64 bits.
		if rc.Capacity != nil && *rc.Capacity > r.MaxUnits() {
			field(name+".capacity", "must be at most %d, got %d", r.MaxUnits(), *rc.Capacity)
		}
		if p := rc.Partition; p != nil {
			if r != nr1.DockerPartition {
				field(name+".partition", "only the docker_partition resource is measured from a partition")
			}
			if !path.IsAbs(p.Path) {
				field(name+".partition.path", "must be an absolute path, got %q", p.Path)
			}
			if p.ReserveMB < 0 {
				field(name+".partition.reserveMB", "must not be negative, got %d", p.ReserveMB)
			}
		}
		if rc.CapacityAttribute == "" && rc.Partition == nil && rc.Capacity == nil {
			field(name, "has no capacity source: set capacityAttribute, capacity or partition")
		}
		for i, f := range rc.Files {
			// Clean, so that a file of the host's /dev stays under --path.dev once joined to it.
			if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
				field(fmt.Sprintf("%s.files[%d].path", name, i), "must be a clean absolute path, got %q", f.Path)
			}
			if f.ContainerPath != "" && !path.IsAbs(f.ContainerPath) {
				field(fmt.Sprintf("%s.files[%d].containerPath", name, i), "must be an absolute path, got %q", f.ContainerPath)
			}
			switch f.Measure {
			case "", "mappedBytes", "openHandles":
				if f.FdinfoKey != "" {
					field(fmt.Sprintf("%s.files[%d].fdinfoKey", name, i), "is only used with measure fdinfo")
				}
			case "fdinfo":
				if f.FdinfoKey == "" {
					field(fmt.Sprintf("%s.files[%d].fdinfoKey", name, i), "must name the fdinfo key to sum, e.g. drm-memory-dma")
				}
			default:
				field(fmt.Sprintf("%s.files[%d].measure", name, i), "must be mappedBytes, openHandles or fdinfo; got %q", f.Measure)
			}
		}
	}
	return errors.Join(errs...)
}

func relativeClean(p string) bool {
	return p != "" && !path.IsAbs(p) && path.Clean(p) == p && !strings.HasPrefix(p, "..")
}
