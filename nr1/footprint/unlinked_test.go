// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// unlinker is a helper mode of the test binary (NR1_FP_UNLINKER=DIR,FILES,MB,ROOT): it
// writes FILES files of MB in DIR, removes them and keeps them open, keeps one more file
// of DIR named and open, then makes ROOT its root (empty: keeps the host's), says
// "ready" and sleeps.
func unlinker(spec string) {
	f := strings.Split(spec, ",")
	files, _ := strconv.Atoi(f[1])
	mb, _ := strconv.Atoi(f[2])
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var held []*os.File
	block := make([]byte, 1<<20)
	for i := range files + 1 {
		h, err := os.OpenFile(filepath.Join(f[0], fmt.Sprintf("held-%d-%d", os.Getpid(), i)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			fail(err)
		}
		for range mb {
			if _, err := h.Write(block); err != nil {
				fail(err)
			}
		}
		if i < files { // the last one keeps its name
			if err := os.Remove(h.Name()); err != nil {
				fail(err)
			}
		}
		held = append(held, h)
	}
	if f[3] != "" {
		if err := unix.Chroot(f[3]); err != nil {
			fail(err)
		}
	}
	fmt.Println("ready")
	time.Sleep(10 * time.Minute)
	for _, h := range held {
		_ = h.Close()
	}
}

// overlay mounts an overlay on a tmpfs of the test's: what a container's root is, its
// writable layer the upper directory. It returns the merged directory.
func overlay(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=256m"); err != nil {
		t.Fatalf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	merged := filepath.Join(dir, "merged")
	opts := fmt.Sprintf("lowerdir=%s/lower,upperdir=%s/upper,workdir=%s/work", dir, dir, dir)
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Skipf("this kernel mounts no overlay on a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
	return merged
}

// startUnlinker runs an unlinker in cgroup cg and waits until it is ready.
func (p *population) startUnlinker(t *testing.T, cg int, dir string, files, mb int, root string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("NR1_FP_UNLINKER=%s,%d,%d,%s", dir, files, mb, root))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	p.start(t, cg, cmd)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the unlinker in cgroup %d: %q, %v", cg, line, err)
	}
}

// A file removed from a container's writable layer while a process of the container
// keeps it open still takes the layer's blocks, where the runtime's walk of the layer's
// names never finds it: the scan reports it for the holder's cgroup, with its blocks.
// A named file is the runtime's to count; an unlinked file off the process's root (a
// volume, the host's disk) is no layer's; a cgroup holding more unlinked files than a
// scan sizes is named, its figure a lower bound.
func TestUnlinkedFilesInTheWritableLayerAreFound(t *testing.T) {
	p, _ := newCgroups(t, 3)
	b := newBPFOrSkip(t, p)
	merged, other := overlay(t), overlay(t)
	p.startUnlinker(t, 0, merged, 2, 3, merged)           // 2 unlinked files of 3 MB, and a named one
	p.startUnlinker(t, 1, t.TempDir(), 2, 3, "")          // off its root: no layer's
	p.startUnlinker(t, 2, other, MaxUnlinked+2, 0, other) // more than a scan sizes
	s, err := b.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	bytes := map[uint64]int64{}
	files := map[uint64]int{}
	for _, u := range s.Unlinked {
		bytes[u.CgroupID] += u.Bytes
		files[u.CgroupID]++
	}
	const mb = 1 << 20
	if files[p.ids[0]] != 2 || bytes[p.ids[0]] < 6*mb || bytes[p.ids[0]] > 6*mb+64<<10 {
		t.Errorf("the container holding 2 unlinked files of 3 MB: %d files, %d bytes", files[p.ids[0]], bytes[p.ids[0]])
	}
	if files[p.ids[1]] != 0 {
		t.Errorf("unlinked files off a process's root reported: %d", files[p.ids[1]])
	}
	if files[p.ids[2]] != MaxUnlinked || !slices.Contains(s.UnlinkedUnread, p.ids[2]) || slices.Contains(s.UnlinkedUnread, p.ids[0]) {
		t.Errorf("a cgroup holding %d unlinked files: %d sized, unread %v; want %d sized, cgroup %d unread alone", MaxUnlinked+2, files[p.ids[2]], s.UnlinkedUnread, MaxUnlinked, p.ids[2])
	}
}
