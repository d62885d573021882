package actuate

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/agent/cgroup"
	"github.com/neureality-sdk/nr1-agent/bpf"
)

// Helper modes of the test binary, run inside the test's cgroups.
func TestMain(m *testing.M) {
	switch os.Getenv("NR1_THROTTLE_HELPER") {
	case "open":
		f, err := os.OpenFile(os.Getenv("NR1_QUEUE"), os.O_RDWR, 0)
		if err != nil {
			var errno syscall.Errno
			if errors.As(err, &errno) {
				os.Exit(int(errno))
			}
			os.Exit(100)
		}
		f.Close()
		os.Exit(0)
	case "hold":
		hold()
		return
	}
	os.Exit(m.Run())
}

// hold keeps a queue handle and a shared mapping, and every 20 ms uses both and writes
// how many times it did to its counter file: a frozen holder stops counting, a holder
// whose handle or mapping stopped working writes the error.
func hold() {
	q, err := os.OpenFile(os.Getenv("NR1_QUEUE"), os.O_RDWR, 0)
	if err != nil {
		os.Exit(1)
	}
	dma, err := os.OpenFile(os.Getenv("NR1_DMA"), os.O_RDWR, 0)
	if err != nil {
		os.Exit(2)
	}
	m, err := unix.Mmap(int(dma.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		os.Exit(3)
	}
	out := os.Getenv("NR1_COUNTER")
	for n := 1; ; n++ {
		msg := strconv.Itoa(n)
		if _, err := unix.FcntlInt(q.Fd(), unix.F_GETFL, 0); err != nil {
			msg = "handle: " + err.Error()
		}
		m[0]++
		_ = os.WriteFile(out+".tmp", []byte(msg), 0o644)
		_ = os.Rename(out+".tmp", out)
		time.Sleep(20 * time.Millisecond)
	}
}

type rig struct {
	t                   *testing.T
	queue, dma, counter string
	pod, ctr, other     string
	hierarchy           cgroup.Hierarchy
	pins                string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mknod, cgroups, BPF")
	}
	h, err := cgroup.Detect("/sys/fs/cgroup")
	if err != nil || h.V2 == "" {
		t.Skipf("no cgroup v2 hierarchy on this host: %v", err)
	}
	dir := t.TempDir()
	r := &rig{t: t, hierarchy: h, queue: filepath.Join(dir, "hv_queue"), dma: filepath.Join(dir, "dma"), counter: filepath.Join(dir, "counter")}
	if err := unix.Mknod(r.queue, unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.dma, make([]byte, 4096), 0o666); err != nil {
		t.Fatal(err)
	}
	// A private bpffs for the pins, so the test never touches the host's.
	r.pins = filepath.Join(dir, "bpffs")
	if err := os.Mkdir(r.pins, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("bpf", r.pins, "bpf", 0, ""); err != nil {
		t.Fatalf("mounting bpffs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(r.pins, unix.MNT_DETACH) })
	root := filepath.Join(h.V2, fmt.Sprintf("nr1-throttle-test-%d", os.Getpid()))
	r.pod, r.other = filepath.Join(root, "pod"), filepath.Join(root, "other")
	r.ctr = filepath.Join(r.pod, "ctr")
	for _, d := range []string{r.ctr, r.other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, d := range []string{r.ctr, r.pod, r.other, root} {
			for range 50 {
				if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	return r
}

func (r *rig) cmd(cg, mode string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		r.t.Fatal(err)
	}
	fd, err := unix.Open(cg, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { unix.Close(fd) })
	c := exec.Command(exe)
	c.Env = append(os.Environ(), "NR1_THROTTLE_HELPER="+mode, "NR1_QUEUE="+r.queue, "NR1_DMA="+r.dma, "NR1_COUNTER="+r.counter)
	c.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	return c
}

// open tries a new open of the queue device from inside cg and returns the errno.
func (r *rig) open(cg string) syscall.Errno {
	r.t.Helper()
	err := r.cmd(cg, "open").Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return syscall.Errno(exit.ExitCode())
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return 0
}

func (r *rig) count() (int, string) {
	b, _ := os.ReadFile(r.counter)
	n, err := strconv.Atoi(string(b))
	if err != nil {
		return 0, string(b)
	}
	return n, ""
}

// progresses reports whether the holder counts on over d, failing on a holder error.
func (r *rig) progresses(d time.Duration) bool {
	r.t.Helper()
	before, bad := r.count()
	time.Sleep(d)
	after, bad2 := r.count()
	if bad != "" || bad2 != "" {
		r.t.Fatalf("holder reports %q %q", bad, bad2)
	}
	return after > before
}

func (r *rig) programs(dir string) int {
	r.t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		r.t.Fatal(err)
	}
	return len(res.Programs)
}

func TestThrottleFreezeAndRestart(t *testing.T) {
	r := newRig(t)
	devices := []bpf.Device{{Major: 10, Minor: 200}}
	pinDir := filepath.Join(r.pins, "throttle")
	thr, err := bpf.LoadThrottle(pinDir, devices)
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("kernel lacks cgroup device programs: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	holder := r.cmd(r.ctr, "hold")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.hierarchy.Thaw(r.pod); _ = holder.Process.Kill(); _ = holder.Wait() })
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, _ := r.count(); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("holder never started")
		}
	}
	if e := r.open(r.ctr); e != 0 {
		t.Fatalf("open before the throttle: %v", e)
	}

	if err := thr.Attach("pod-uid", r.pod); err != nil {
		t.Fatal(err)
	}
	if e := r.open(r.ctr); e != syscall.EPERM {
		t.Errorf("new open in the throttled CG's container: %v, want EPERM", e)
	}
	if e := r.open(r.other); e != 0 {
		t.Errorf("new open in another cgroup: %v, want success", e)
	}
	if !r.progresses(200 * time.Millisecond) {
		t.Error("the throttled CG's existing handle and mapping stopped working")
	}

	if err := r.hierarchy.Freeze(r.pod); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if r.progresses(300 * time.Millisecond) {
		t.Error("frozen CG still runs")
	}
	if err := r.hierarchy.Thaw(r.pod); err != nil {
		t.Fatal(err)
	}
	if !r.progresses(200 * time.Millisecond) {
		t.Error("thawed CG does not run")
	}

	// The agent restarts: its program goes, the pinned throttle stays, and throttling
	// again does not attach a second program.
	if err := thr.Close(); err != nil {
		t.Fatal(err)
	}
	thr, err = bpf.LoadThrottle(pinDir, devices)
	if err != nil {
		t.Fatal(err)
	}
	defer thr.Close()
	names, err := thr.Attached()
	if err != nil || strings.Join(names, ",") != "pod-uid" {
		t.Fatalf("pinned throttles after restart: %v %v", names, err)
	}
	if e := r.open(r.ctr); e != syscall.EPERM {
		t.Errorf("throttle dropped by the restart: open %v", e)
	}
	if err := thr.Attach("pod-uid", r.pod); err != nil {
		t.Fatal(err)
	}
	if n := r.programs(r.pod); n != 1 {
		t.Errorf("%d device programs on the pod cgroup after throttling again, want 1", n)
	}

	if err := thr.Detach("pod-uid"); err != nil {
		t.Fatal(err)
	}
	if e := r.open(r.ctr); e != 0 {
		t.Errorf("open after lifting: %v", e)
	}
	if n := r.programs(r.pod); n != 0 {
		t.Errorf("%d device programs left after lifting", n)
	}
	if names, _ := thr.Attached(); len(names) != 0 {
		t.Errorf("pins left: %v", names)
	}
}
