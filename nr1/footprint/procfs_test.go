// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// fakeProc lays out a procfs tree for two processes, pointing at real target files (so
// their device and inode numbers are real), and a cgroup v2 tree.
func TestProcfsSourceOnAFixtureTree(t *testing.T) {
	dir := t.TempDir()
	dma := filepath.Join(dir, "compute_dma")
	queue := filepath.Join(dir, "queue")
	other := filepath.Join(dir, "other")
	client := filepath.Join(dir, "drm_client") // a driver reporting per-client usage in fdinfo
	for _, p := range []string{dma, queue, other, client} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	targets, err := resolve([]TargetSpec{
		{Resource: nr1.ComputeDMAMemory, Path: dma, Measure: MappedBytes},
		{Resource: nr1.HypervisorQueue, Path: queue, Measure: OpenHandles},
		{Resource: nr1.CPUDMAMemory, Path: client, Measure: FdinfoKey, Key: "drm-memory-dma"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dma, &st); err != nil {
		t.Fatal(err)
	}
	proc := filepath.Join(dir, "proc")
	cgroups := filepath.Join(dir, "cgroup")
	mk := func(pid int, cgroup string, maps string, fds map[int]string) {
		base := filepath.Join(proc, fmt.Sprint(pid))
		must(t, os.MkdirAll(filepath.Join(base, "fd"), 0o755))
		must(t, os.MkdirAll(filepath.Join(cgroups, cgroup), 0o755))
		must(t, os.WriteFile(filepath.Join(base, "cgroup"), []byte("12:memory:/x\n0::/"+cgroup+"\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(base, "maps"), []byte(maps), 0o644))
		for fd, target := range fds {
			must(t, os.Symlink(target, filepath.Join(base, "fd", fmt.Sprint(fd))))
		}
	}
	dev := fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev))
	mk(100, "pod-a/c1", fmt.Sprintf("1000-4000 rw-s 00000000 %s %d %s\n5000-6000 rw-s 00003000 %s %d %s\n7000-8000 r--p 0 %s %d /other\n",
		dev, st.Ino, dma, dev, st.Ino, dma, dev, st.Ino+1000), map[int]string{3: queue, 4: queue, 5: other})
	mk(200, "pod-b/c1", "", map[int]string{7: queue, 8: client})
	must(t, os.MkdirAll(filepath.Join(proc, "200", "fdinfo"), 0o755))
	must(t, os.WriteFile(filepath.Join(proc, "200", "fdinfo", "8"), []byte("pos:\t0\ndrm-driver:\tnr1\ndrm-memory-dma:\t2048 KiB\n"), 0o644))
	// A process outside the reader's cgroup namespace: its path leaves the v2 mount.
	mk(400, "../outside", "", map[int]string{3: queue})
	must(t, os.MkdirAll(filepath.Join(proc, "self"), 0o755)) // not a PID: skipped
	must(t, os.MkdirAll(filepath.Join(proc, "300"), 0o755))  // exited mid-scan: no files, skipped

	src := NewProcfs(proc, cgroups, targets)
	// Where kcmp is refused, fds cannot be told apart: the scan fails rather than
	// count every fd as a description of its own.
	src.compare = func(int, int, int, int) (int, error) { return 0, fmt.Errorf("%w: %s", ErrNoKcmp, unix.EPERM.Error()) }
	if _, err := src.Scan(context.Background()); !errors.Is(err, ErrNoKcmp) {
		t.Errorf("kcmp refused: scan error %v", err)
	}
	// The fixture's PIDs are no processes for kcmp: each fd is a description of its own.
	src.compare = func(pid1, pid2, fd1, fd2 int) (int, error) {
		return cmp.Or(cmp.Compare(pid1, pid2), cmp.Compare(fd1, fd2)), nil
	}
	s, err := src.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	idA, idB := inode(t, filepath.Join(cgroups, "pod-a/c1")), inode(t, filepath.Join(cgroups, "pod-b/c1"))
	by := byCgroup(s, targets)
	if got := by[idA]; got[nr1.ComputeDMAMemory] != 0x4000 || got[nr1.HypervisorQueue] != 2 {
		t.Errorf("pod-a usage %v", got)
	}
	if got := by[idB]; got[nr1.HypervisorQueue] != 1 || got[nr1.ComputeDMAMemory] != 0 || got[nr1.CPUDMAMemory] != 2<<20 {
		t.Errorf("pod-b usage %v", got)
	}
	if got, outside := by[0], by[inode(t, filepath.Join(dir, "outside"))]; got[nr1.HypervisorQueue] != 1 || outside != (nr1.Usage{}) {
		t.Errorf("a process whose cgroup path leaves the mount: no container's %v, counted for the directory it names %v", got, outside)
	}
	if len(s.Mappings) != 2 || s.Mappings[1].Offset != 0x3000 || s.Mappings[1].PID != 100 {
		t.Errorf("mappings %+v", s.Mappings)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Stat(p, &st))
	return st.Ino
}
