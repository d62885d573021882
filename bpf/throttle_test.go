package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// What the agent pinned is lifted after it is gone, without its program loaded.
func TestUnpinLiftsAThrottleWithoutTheAgent(t *testing.T) {
	cg := v2CgroupOrSkip(t)
	pins := filepath.Join(bpffs(t), "nr1-agent", "throttle")
	if names, err := Pinned(pins); err != nil || len(names) != 0 {
		t.Fatalf("Pinned before any agent ran = %v, %v; want none", names, err)
	}
	thr, err := LoadThrottle(pins, []Device{{Major: 10, Minor: 200}})
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("kernel lacks cgroup device programs: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := thr.Attach("pod-uid", cg); err != nil {
		t.Fatal(err)
	}
	if err := thr.Close(); err != nil { // the agent is gone
		t.Fatal(err)
	}
	if n := devicePrograms(t, cg); n != 1 {
		t.Fatalf("%d device programs on the cgroup once the agent is gone, want the pinned 1", n)
	}
	if names, err := Pinned(pins); err != nil || !slices.Equal(names, []string{"pod-uid"}) {
		t.Fatalf("Pinned = %v, %v", names, err)
	}
	if err := Unpin(pins, "pod-uid"); err != nil {
		t.Fatal(err)
	}
	if n := devicePrograms(t, cg); n != 0 {
		t.Errorf("%d device programs left after Unpin", n)
	}
	if names, err := Pinned(pins); err != nil || len(names) != 0 {
		t.Errorf("Pinned after Unpin = %v, %v", names, err)
	}
	if err := Unpin(pins, "pod-uid"); err != nil {
		t.Errorf("Unpin of a pin already gone: %v", err)
	}
}

func TestUnpinReportsWhatIsNotAThrottle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: bpffs")
	}
	pins := bpffs(t)
	if err := os.Mkdir(filepath.Join(pins, "stray"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Unpin(pins, "stray"); err == nil {
		t.Error("Unpin of a directory succeeded")
	}
}
