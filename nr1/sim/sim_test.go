// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

func TestSimulatorIsAnNR1TheInventoryReads(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating the queue character device needs CAP_MKNOD (run as root)")
	}
	s, err := Create(filepath.Join(t.TempDir(), "nr1"), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	inv := device.NewInventory(s.Config(), s.SysfsRoot(), "/dev")
	capacity, _, err := inv.Capacity()
	if err != nil {
		t.Fatal(err)
	}
	if capacity != DefaultOptions().Capacity {
		t.Fatalf("capacity %v", capacity)
	}
	if h := inv.Probe(); !allHealthy(h) {
		t.Fatalf("health %+v", h)
	}

	var st unix.Stat_t
	if err := unix.Stat(s.File(HypervisorQ), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 10 || unix.Minor(st.Rdev) != 200 || st.Mode&0o777 != 0o666 {
		t.Fatalf("queue node mode %o rdev %d:%d", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	if err := unix.Stat(s.File(ComputeDMA), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 116244<<20 || st.Blocks != 0 {
		t.Fatalf("compute DMA file size %d blocks %d: want sparse %d", st.Size, st.Blocks, int64(116244)<<20)
	}
	// The DMA file maps shared, as a driver's buffers do.
	f, err := os.OpenFile(s.File(ComputeDMA), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, 3<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	m[0] = 1
	_ = unix.Munmap(m)

	if err := s.SetHealthy(false); err != nil {
		t.Fatal(err)
	}
	if h := inv.Probe(); h[nr1.ComputeDMAMemory].Healthy {
		t.Fatal("still healthy after SetHealthy(false)")
	}
	if err := s.SetHealthy(true); err != nil {
		t.Fatal(err)
	}
	if h := inv.Probe(); !allHealthy(h) {
		t.Fatalf("not healthy again: %+v", h)
	}
	// Creating again over an existing simulator works (the local stack's up is idempotent).
	if _, err := Create(s.Dir, DefaultOptions()); err != nil {
		t.Fatal(err)
	}
}

func allHealthy(h device.Health) bool {
	for _, s := range h {
		if !s.Healthy {
			return false
		}
	}
	return true
}
