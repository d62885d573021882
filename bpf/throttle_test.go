// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// v2CgroupOrSkip makes an empty cgroup in the host's v2 tree.
func v2CgroupOrSkip(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: cgroups, bpffs, BPF")
	}
	for _, mnt := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(mnt, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			dir := filepath.Join(mnt, fmt.Sprintf("nr1-bpf-test-%d", os.Getpid()))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Remove(dir) })
			return dir
		}
	}
	t.Skip("no cgroup v2 tree on this host")
	return ""
}

// bpffs mounts a private bpffs, so the test never touches the host's.
func bpffs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		t.Fatalf("mounting bpffs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func devicePrograms(t *testing.T, cg string) int {
	t.Helper()
	f, err := os.Open(cg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		t.Fatal(err)
	}
	return len(res.Programs)
}

// podUID names the test's throttle, as a pod's UID does the agent's.
const podUID = "5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b11"

// What the agent pinned is lifted after it is gone, without its program loaded.
func TestUnpinLiftsAThrottleWithoutTheAgent(t *testing.T) {
	cg := v2CgroupOrSkip(t)
	pins := filepath.Join(bpffs(t), "nr1-agent", "throttle")
	if names, _, err := Pinned(pins); err != nil || len(names) != 0 {
		t.Fatalf("Pinned before any agent ran = %v, %v; want none", names, err)
	}
	thr, err := LoadThrottle(pins, []Device{{Major: 10, Minor: 200}})
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("kernel lacks cgroup device programs: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := thr.Attach(podUID, cg); err != nil {
		t.Fatal(err)
	}
	if err := thr.Close(); err != nil { // the agent is gone
		t.Fatal(err)
	}
	if n := devicePrograms(t, cg); n != 1 {
		t.Fatalf("%d device programs on the cgroup once the agent is gone, want the pinned 1", n)
	}
	if names, _, err := Pinned(pins); err != nil || !slices.Equal(names, []string{podUID}) {
		t.Fatalf("Pinned = %v, %v", names, err)
	}
	if err := Unpin(pins, podUID); err != nil {
		t.Fatal(err)
	}
	if n := devicePrograms(t, cg); n != 0 {
		t.Errorf("%d device programs left after Unpin", n)
	}
	if names, _, err := Pinned(pins); err != nil || len(names) != 0 {
		t.Errorf("Pinned after Unpin = %v, %v", names, err)
	}
	if err := Unpin(pins, podUID); err != nil {
		t.Errorf("Unpin of a pin already gone: %v", err)
	}
}

func TestUnpinReportsWhatIsNotAThrottle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: bpffs")
	}
	pins := bpffs(t)
	if err := os.Mkdir(filepath.Join(pins, podUID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Unpin(pins, podUID); err == nil {
		t.Error("Unpin of a directory succeeded")
	}
}

// A name that is not a pod UID never becomes a path: what it would name is left as it
// is, and the pin directory's entries named otherwise are listed apart.
func TestPinNamesArePodUIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: bpffs")
	}
	root := bpffs(t)
	pins := filepath.Join(root, "nr1-agent", "throttle")
	if err := os.MkdirAll(filepath.Join(pins, podUID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(pins, "stray"), 0o700); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(root, "other")
	if err := os.Mkdir(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../../other", "..", "", "stray", "a/b"} {
		if err := Unpin(pins, name); err == nil || !strings.Contains(err.Error(), "pod UID") {
			t.Errorf("Unpin(%q) = %v, want a refusal naming the pod UID", name, err)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a refused name reached outside the pin directory: %v", err)
	}
	names, strays, err := Pinned(pins)
	if err != nil || !slices.Equal(names, []string{podUID}) || !slices.Equal(strays, []string{"stray"}) {
		t.Errorf("Pinned = %v, strays %v, %v; want [%s], strays [stray]", names, strays, err, podUID)
	}
}
