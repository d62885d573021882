// SPDX-License-Identifier: Apache-2.0

// Package sim is a simulated NR1: the driver's device files and its sysfs-like capacity
// and health tree, in a directory. Everything the agent measures on it is real kernel
// state: the DMA files are real files mapped by real processes, the queue file a real
// character device opened through the device cgroup.
package sim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

// Options shape a simulated NR1.
type Options struct {
	// Capacity of each resource, in units.
	Capacity nr1.Amounts
	// QueueMajor and QueueMinor are the numbers of the queue character device. They reuse
	// a harmless driver present on the host (tun, 10:200) so that opening the node works.
	QueueMajor, QueueMinor uint32
	// DriverVersion is the version the simulated driver's module declares in sysfs.
	DriverVersion string
}

// DefaultOptions is a typical NR1 node.
func DefaultOptions() Options {
	return Options{Capacity: nr1.Amounts{116244, 512, 13417, 65536}, QueueMajor: 10, QueueMinor: 200, DriverVersion: "1.4.0-sim"}
}

// Layout of a simulator directory, matching the NR1 driver's default names.
const (
	SysfsDir      = "sys"
	DeviceDir     = "class/neureality/nr1_0"
	DevDir        = "dev"
	ComputeDMA    = "nr1_0_compute_dma"
	CPUDMA        = "nr1_0_cpu_dma"
	HypervisorQ   = "nr1_0_hv_queue"
	HealthFile    = "health"
	healthyValue  = "ok"
	faultyValue   = "fault"
	ContainerRoot = "/dev" // where containers see the device files
)

// Sim is a simulated NR1 rooted at Dir.
type Sim struct {
	Dir string
}

// Open returns the simulator already created at dir.
func Open(dir string) *Sim { return &Sim{Dir: dir} }

// Create lays out a simulated NR1 in dir (best a tmpfs), replacing what is there.
// Making the queue node needs CAP_MKNOD.
func Create(dir string, opts Options) (*Sim, error) {
	s := &Sim{Dir: dir}
	if err := os.MkdirAll(s.sysfsDevice(), 0o755); err != nil {
		return nil, fmt.Errorf("simulator sysfs: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, DevDir), 0o755); err != nil {
		return nil, fmt.Errorf("simulator dev: %w", err)
	}
	attrs := map[string]string{HealthFile: healthyValue}
	for _, r := range nr1.All {
		attrs[capacityAttribute(r)] = strconv.FormatInt(int64(opts.Capacity[r]), 10)
	}
	for name, v := range attrs {
		if err := os.WriteFile(filepath.Join(s.sysfsDevice(), name), []byte(v+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("simulator attribute %s: %w", name, err)
		}
	}
	if err := s.driver(opts.DriverVersion); err != nil {
		return nil, err
	}
	for name, mb := range map[string]nr1.Units{ComputeDMA: opts.Capacity[nr1.ComputeDMAMemory], CPUDMA: opts.Capacity[nr1.CPUDMAMemory]} {
		if err := sparseFile(filepath.Join(dir, DevDir, name), int64(nr1.ComputeDMAMemory.InBase(mb))); err != nil {
			return nil, err
		}
	}
	q := filepath.Join(dir, DevDir, HypervisorQ)
	if err := os.Remove(q); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("simulator queue device %s: %w", q, err)
	}
	if err := unix.Mknod(q, unix.S_IFCHR|0o666, int(unix.Mkdev(opts.QueueMajor, opts.QueueMinor))); err != nil { //nolint:gosec // device numbers fit
		return nil, fmt.Errorf("simulator queue device %s (%d:%d): %w", q, opts.QueueMajor, opts.QueueMinor, err)
	}
	if err := os.Chmod(q, 0o666); err != nil { // mknod is subject to the umask
		return nil, fmt.Errorf("simulator queue device %s: %w", q, err)
	}
	return s, nil
}

// driver lays out the NR1's device, its driver and the driver's module as sysfs links
// them: a platform device (not PCI: the simulated NR1 has no PCI address to report),
// bound to the driver nr1, whose module declares version.
func (s *Sim) driver(version string) error {
	sys := s.SysfsRoot()
	dev := filepath.Join(sys, "devices", "platform", "nr1-sim.0")
	drv := filepath.Join(sys, "bus", "platform", "drivers", "nr1")
	mod := filepath.Join(sys, "module", "nr1")
	for _, d := range []string{dev, drv, mod} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("simulator sysfs: %w", err)
		}
	}
	links := map[string]string{
		filepath.Join(s.sysfsDevice(), "device"): dev,
		filepath.Join(dev, "driver"):             drv,
		filepath.Join(drv, "module"):             mod,
	}
	for link, target := range links {
		rel, err := filepath.Rel(filepath.Dir(link), target)
		if err == nil {
			err = os.Remove(link)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("simulator sysfs link %s: %w", link, err)
		}
		if err := os.Symlink(rel, link); err != nil {
			return fmt.Errorf("simulator sysfs link %s: %w", link, err)
		}
	}
	if version == "" {
		return nil
	}
	if err := os.WriteFile(filepath.Join(mod, "version"), []byte(version+"\n"), 0o644); err != nil {
		return fmt.Errorf("simulator module version: %w", err)
	}
	return nil
}

// sparseFile makes a file of size bytes that holds no blocks until written.
func sparseFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return fmt.Errorf("simulator DMA file: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("simulator DMA file %s: %w", path, err)
	}
	if err := f.Chmod(0o666); err != nil {
		return fmt.Errorf("simulator DMA file %s: %w", path, err)
	}
	return nil
}

func (s *Sim) sysfsDevice() string { return filepath.Join(s.Dir, SysfsDir, DeviceDir) }

// SysfsRoot is the directory to give the agent as --path.sysfs.
func (s *Sim) SysfsRoot() string { return filepath.Join(s.Dir, SysfsDir) }

// File is the host path of a device file of the simulator.
func (s *Sim) File(name string) string { return filepath.Join(s.Dir, DevDir, name) }

// SetHealthy flips the NR1's health attribute.
func (s *Sim) SetHealthy(healthy bool) error {
	v := faultyValue
	if healthy {
		v = healthyValue
	}
	if err := os.WriteFile(filepath.Join(s.sysfsDevice(), HealthFile), []byte(v+"\n"), 0o644); err != nil {
		return fmt.Errorf("simulator health: %w", err)
	}
	return nil
}

// Remove deletes the simulator's files.
func (s *Sim) Remove() error {
	if err := os.RemoveAll(s.Dir); err != nil {
		return fmt.Errorf("removing simulator: %w", err)
	}
	return nil
}

// Config is the agent's NR1 configuration for this simulator, with containers seeing
// the device files under /dev.
func (s *Sim) Config() device.Config {
	c := device.DefaultConfig()
	c.SysfsDevice = DeviceDir
	files := map[nr1.Resource]string{nr1.ComputeDMAMemory: ComputeDMA, nr1.CPUDMAMemory: CPUDMA, nr1.HypervisorQueue: HypervisorQ}
	for r, name := range files {
		c.Resources[r].Files = []device.File{{Path: s.File(name), ContainerPath: filepath.Join(ContainerRoot, name)}}
	}
	return c
}

func capacityAttribute(r nr1.Resource) string {
	c := device.DefaultConfig()
	return c.Resources[r].CapacityAttribute
}
