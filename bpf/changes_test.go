// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// watchOrSkip attaches the change tracepoints, skipping only when the kernel has none.
func watchOrSkip(t *testing.T, f *Footprint) *Changes {
	t.Helper()
	c, err := f.WatchChanges()
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("kernel lacks the syscall tracepoints: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// reader delivers the changes reported, read by one goroutine for the test's life.
func reader(t *testing.T, c *Changes) <-chan Change {
	got := make(chan Change, 64)
	go func() {
		defer close(got)
		for {
			ch, err := c.Read()
			if errors.Is(err, ringbuf.ErrClosed) {
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			got <- ch
		}
	}()
	return got
}

// changesWithin collects the changes reported until quiet for 200 ms.
func changesWithin(got <-chan Change) []Change {
	var out []Change
	for {
		select {
		case ch, ok := <-got:
			if !ok {
				return out
			}
			out = append(out, ch)
		case <-time.After(200 * time.Millisecond):
			return out
		}
	}
}

// Opening a target, mapping it, and taking its fd from another process (pidfd_getfd) are
// each reported with the process and its cgroup; opening or mapping anything else, a
// failed mapping, an anonymous mapping and an O_PATH fd are not.
func TestChangesReportWhatTakesMoreOfATarget(t *testing.T) {
	f := loadOrSkip(t)
	dir := t.TempDir()
	target, other := filepath.Join(dir, "dma"), filepath.Join(dir, "other")
	for _, p := range []string{target, other} {
		if err := os.WriteFile(p, make([]byte, 1<<16), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.SetTargets(map[TargetKey]uint32{keyOf(t, target): 5}); err != nil {
		t.Fatal(err)
	}
	c := watchOrSkip(t, f)
	changes := reader(t, c)

	// Not reported.
	o, err := unix.Open(other, unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(o)
	if _, err := unix.Mmap(o, 0, 4096, unix.PROT_READ, unix.MAP_SHARED); err != nil {
		t.Fatal(err)
	}
	p, err := unix.Open(target, unix.O_PATH, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p)
	if _, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ, unix.MAP_SHARED|unix.MAP_ANONYMOUS); err != nil {
		t.Fatal(err)
	}
	if got := changesWithin(changes); len(got) != 0 {
		t.Fatalf("reported without a target taken: %+v", got)
	}

	// Reported: one open, one mapping; a mapping past the file's size on a write-only fd
	// fails and is not.
	fd, err := unix.Open(target, unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		t.Fatal(err)
	}
	wo, err := unix.Open(target, unix.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(wo)
	if _, err := unix.Mmap(wo, 0, 4096, unix.PROT_READ, unix.MAP_SHARED); err == nil {
		t.Fatal("mapping a write-only fd for reading succeeded")
	}
	pidfd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	taken, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(taken)
	got := changesWithin(changes)
	want := Change{CgroupId: currentCgroupID(t), Pid: uint32(os.Getpid()), Target: 5}
	if len(got) != 4 {
		t.Fatalf("changes %+v; want the two opens, the one mapping that succeeded and the fd taken, each %+v", got, want)
	}
	for _, ch := range got {
		if ch != want {
			t.Errorf("change %+v, want %+v", ch, want)
		}
	}
	if lost, err := c.Lost(); err != nil || lost != 0 {
		t.Errorf("lost %d, %v", lost, err)
	}
}

// currentCgroupID is the v2 cgroup id of this process: the inode of its directory in the
// unified hierarchy (at /sys/fs/cgroup/unified on a hybrid host).
func currentCgroupID(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		rel, ok := strings.CutPrefix(strings.TrimSpace(line), "0::")
		if !ok {
			continue
		}
		for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
			var fs unix.Statfs_t
			var st unix.Stat_t
			if unix.Statfs(root, &fs) == nil && fs.Type == unix.CGROUP2_SUPER_MAGIC && unix.Stat(filepath.Join(root, rel), &st) == nil {
				return st.Ino
			}
		}
	}
	t.Fatalf("no v2 cgroup in %q", b)
	return 0
}
