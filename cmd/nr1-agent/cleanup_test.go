package main

import (
	"bytes"
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

// helper is what the test binary does inside the test's cgroups: "open" opens the queue
// device once and exits with the errno; "hold" counts every 20 ms in its counter file,
// so that a frozen holder is seen to stop.
func helper(mode string) {
	switch mode {
	case "open":
		f, err := os.OpenFile(os.Getenv("NR1_QUEUE"), os.O_RDWR, 0)
		var errno syscall.Errno
		if errors.As(err, &errno) {
			os.Exit(int(errno))
		}
		if err != nil {
			os.Exit(100)
		}
		f.Close()
		os.Exit(0)
	case "hold":
		out := os.Getenv("NR1_COUNTER")
		for n := 1; ; n++ {
			_ = os.WriteFile(out+".tmp", []byte(strconv.Itoa(n)), 0o644)
			_ = os.Rename(out+".tmp", out)
			time.Sleep(20 * time.Millisecond)
		}
	}
	os.Exit(101)
}

// throttledNode is a throttled node's state, private to the test: a bpffs, a queue device, and a
// kubepods tree in its own v2 cgroup, which stands for the host's cgroupfs root.
type throttledNode struct {
	t                       *testing.T
	bpffs, queue, counter   string
	state                   string // the agent's state directory
	cgroupfs                string
	hierarchy               cgroup.Hierarchy
	throttled, other, quiet string // pod cgroups: throttled and frozen, only frozen, only throttled
}

const (
	throttledUID = "5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b11"
	otherUID     = "0b3e7d21-8c44-4f0e-a1f2-6d9e5c7b3a08"
	quietUID     = "6a3c1b9e0f8d4e2a" // a static pod's UID
)

func newNode(t *testing.T) *throttledNode {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mknod, cgroups, bpffs, BPF")
	}
	h, err := cgroup.Detect("/sys/fs/cgroup")
	if err != nil || h.V2 == "" {
		t.Skipf("no cgroup v2 tree on this host: %v", err)
	}
	dir := t.TempDir()
	n := &throttledNode{t: t, bpffs: filepath.Join(dir, "bpffs"), queue: filepath.Join(dir, "hv_queue"), counter: filepath.Join(dir, "counter"), state: filepath.Join(dir, "state"), hierarchy: h}
	if err := os.Mkdir(n.state, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"enforcement.json", ".checkpoint-123"} { // the checkpoint, and a crash's leftover
		if err := os.WriteFile(filepath.Join(n.state, f), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mknod(n.queue, unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200))); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(n.bpffs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("bpf", n.bpffs, "bpf", 0, ""); err != nil {
		t.Fatalf("mounting bpffs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(n.bpffs, unix.MNT_DETACH) })
	n.cgroupfs = filepath.Join(h.V2, fmt.Sprintf("nr1-cleanup-test-%d", os.Getpid()))
	burstable := filepath.Join(n.cgroupfs, "kubepods", "burstable")
	n.throttled, n.other, n.quiet = filepath.Join(burstable, "pod"+throttledUID), filepath.Join(burstable, "pod"+otherUID), filepath.Join(n.cgroupfs, "kubepods", "pod"+quietUID)
	dirs := []string{filepath.Join(n.throttled, "ctr"), n.other, n.quiet}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = h.Thaw(n.throttled)
		_ = h.Thaw(n.other)
		for _, d := range append(dirs, n.throttled, burstable, filepath.Dir(burstable), n.cgroupfs) {
			for range 50 {
				if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	return n
}

func (n *throttledNode) helper(cg, mode string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		n.t.Fatal(err)
	}
	fd, err := unix.Open(cg, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { unix.Close(fd) })
	c := exec.Command(exe)
	c.Env = append(os.Environ(), "NR1_CLEANUP_HELPER="+mode, "NR1_QUEUE="+n.queue, "NR1_COUNTER="+n.counter)
	c.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	return c
}

// open tries a new open of the queue device from inside cg and returns the errno.
func (n *throttledNode) open(cg string) syscall.Errno {
	n.t.Helper()
	err := n.helper(cg, "open").Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return syscall.Errno(exit.ExitCode())
	}
	if err != nil {
		n.t.Fatal(err)
	}
	return 0
}

func (n *throttledNode) count() int {
	b, _ := os.ReadFile(n.counter)
	c, _ := strconv.Atoi(string(b))
	return c
}

// runs reports whether the holder counts on over d.
func (n *throttledNode) runs(d time.Duration) bool {
	before := n.count()
	time.Sleep(d)
	return n.count() > before
}

func (n *throttledNode) frozen(cg string) bool {
	n.t.Helper()
	b, err := os.ReadFile(filepath.Join(cg, "cgroup.events"))
	if err != nil {
		n.t.Fatal(err)
	}
	return strings.Contains(string(b), "frozen 1")
}

func (n *throttledNode) devicePrograms(cg string) int {
	n.t.Helper()
	f, err := os.Open(cg)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		n.t.Fatal(err)
	}
	return len(res.Programs)
}

// cleanup runs `nr1-agent cleanup` on the node and returns its exit code and output.
func (n *throttledNode) cleanup(extra ...string) (code int, stdout, stderr string) {
	n.t.Helper()
	return runBinary(n.t, append([]string{"cleanup", "--path.bpffs", n.bpffs, "--path.cgroupfs", n.cgroupfs, "--path.state", n.state}, extra...)...)
}

func runBinary(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// An agent throttled and froze a pod, then went away; cleanup lifts both, and leaves
// alone a frozen pod the agent never throttled.
func TestCleanupLiftsThrottlesAndThawsWhatTheAgentFroze(t *testing.T) {
	n := newNode(t)
	holder := n.helper(filepath.Join(n.throttled, "ctr"), "hold")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.hierarchy.Thaw(n.throttled); _ = holder.Process.Kill(); _ = holder.Wait() })
	for deadline := time.Now().Add(5 * time.Second); n.count() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("holder never started")
		}
	}
	ctr := filepath.Join(n.throttled, "ctr")
	if e := n.open(ctr); e != 0 {
		t.Fatalf("open before any throttle: %v", e)
	}

	// The agent, as it throttles (pins named by pod UID) and freezes, then is gone.
	pins := filepath.Join(n.bpffs, "nr1-agent", "throttle")
	thr, err := bpf.LoadThrottle(pins, []bpf.Device{{Major: 10, Minor: 200}})
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("kernel lacks cgroup device programs: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for uid, cg := range map[string]string{throttledUID: n.throttled, quietUID: n.quiet} {
		if err := thr.Attach(uid, cg); err != nil {
			t.Fatal(err)
		}
	}
	if err := thr.Close(); err != nil {
		t.Fatal(err)
	}
	if e := n.open(ctr); e != syscall.EPERM {
		t.Fatalf("open in the throttled pod: %v, want EPERM", e)
	}
	for _, cg := range []string{n.throttled, n.other} {
		if err := n.hierarchy.Freeze(cg); err != nil {
			t.Fatal(err)
		}
	}
	if !n.frozen(n.throttled) || n.runs(200*time.Millisecond) {
		t.Fatal("the throttled pod is not frozen")
	}

	code, stdout, stderr := n.cleanup()
	if code != 0 {
		t.Fatalf("cleanup exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	t.Logf("cleanup:\n%s", stdout)
	for _, want := range []string{
		"thawed pod " + throttledUID + " (" + n.throttled + ")",
		"removed the throttle of pod " + throttledUID + " (" + filepath.Join(pins, throttledUID) + ")",
		"removed the throttle of pod " + quietUID,
		"removed " + pins + "\n",
		"removed " + filepath.Dir(pins) + "\n",
		"removed " + filepath.Join(n.state, "enforcement.json") + "\n",
		"removed " + filepath.Join(n.state, ".checkpoint-123") + "\n",
		"removed " + n.state + "\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("cleanup output lacks %q", want)
		}
	}
	if strings.Contains(stdout, otherUID) {
		t.Errorf("cleanup touched pod %s, which was never throttled", otherUID)
	}
	if _, err := os.Stat(filepath.Dir(pins)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the agent's bpffs directory is left: %v", err)
	}
	for _, cg := range []string{n.throttled, n.quiet} {
		if p := n.devicePrograms(cg); p != 0 {
			t.Errorf("%d device programs left on %s", p, cg)
		}
	}
	if n.frozen(n.throttled) || !n.runs(200*time.Millisecond) {
		t.Error("the throttled pod is still frozen")
	}
	if e := n.open(ctr); e != 0 {
		t.Errorf("open in the formerly throttled pod: %v, want success", e)
	}
	if !n.frozen(n.other) {
		t.Error("cleanup thawed a pod the agent never throttled")
	}

	code, stdout, stderr = n.cleanup()
	if code != 0 || stdout != "nothing to clean up\n" {
		t.Errorf("second cleanup: exit %d, stdout %q, stderr %q; want 0 and nothing to clean up", code, stdout, stderr)
	}
}

func TestCleanupReportsWhatItCouldNotUndo(t *testing.T) {
	n := newNode(t)
	// Something in the pin directory that is not a throttle link.
	stray := filepath.Join(n.bpffs, "nr1-agent", "throttle", "stray")
	if err := os.MkdirAll(stray, 0o700); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := n.cleanup()
	if code != 1 || !strings.Contains(stderr, "nr1-agent cleanup: loading throttle of stray") {
		t.Errorf("cleanup with a stray pin: exit %d, stderr %q; want 1 naming it", code, stderr)
	}
	if strings.Contains(stdout, "removed") {
		t.Errorf("cleanup claims it removed something: %q", stdout)
	}
	// Frozen pods cannot be looked for: every throttle is kept for a second run.
	code, _, stderr = n.cleanup("--path.cgroupfs", "/nonexistent")
	if code != 1 || !strings.Contains(stderr, "/nonexistent") || !strings.Contains(stderr, "every throttle kept") {
		t.Errorf("cleanup without cgroups: exit %d, stderr %q; want 1 naming the path", code, stderr)
	}
	if _, err := os.Stat(stray); err != nil {
		t.Errorf("pin gone although its pod could not be looked for: %v", err)
	}
	if _, err := os.Stat(filepath.Join(n.state, "enforcement.json")); err != nil {
		t.Errorf("checkpoint gone although a throttle is kept: %v", err)
	}
}

func TestCleanupWithNothingToDo(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runBinary(t, "cleanup", "--path.bpffs", dir, "--path.cgroupfs", dir, "--path.state", filepath.Join(dir, "state"))
	if code != 0 || stdout != "nothing to clean up\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0 and nothing to clean up", code, stdout, stderr)
	}
	code, _, stderr = runBinary(t, "cleanup", "--path.bpffs", "relative")
	if code != 2 || !strings.Contains(stderr, "paths.bpffs") {
		t.Errorf("bad flag: exit %d, stderr %q; want 2 naming the field", code, stderr)
	}
}
