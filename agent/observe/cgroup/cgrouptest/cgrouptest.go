// SPDX-License-Identifier: Apache-2.0

// Package cgrouptest runs a test binary's helper processes inside real cgroups, beside a
// simulated NR1 queue device and DMA file, for the privileged tests of throttling,
// freezing and cleanup. It is for tests only.
package cgrouptest

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

	"github.com/neureality-sdk/nr1-agent/agent/observe/cgroup"
)

const (
	modeEnv    = "NR1_CGROUPTEST_MODE"
	queueEnv   = "NR1_CGROUPTEST_QUEUE"
	dmaEnv     = "NR1_CGROUPTEST_DMA"
	counterEnv = "NR1_CGROUPTEST_COUNTER"
)

// Main runs the helper the environment names and never returns then; in the test process
// itself it returns at once. Call it first in TestMain.
func Main() {
	switch os.Getenv(modeEnv) {
	case "":
		return
	case "open":
		os.Exit(openOnce())
	case "hold":
		hold()
	}
	os.Exit(101)
}

// openOnce opens the queue device and reports the errno as the exit code.
func openOnce() int {
	f, err := os.OpenFile(os.Getenv(queueEnv), os.O_RDWR, 0) //nolint:gosec // the test's own device node
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return int(errno)
	}
	if err != nil {
		return 100
	}
	_ = f.Close()
	return 0
}

// hold keeps a queue handle and a shared mapping of the DMA file, and every 20 ms uses
// both and writes how many times it did to its counter file: a frozen holder stops
// counting, a holder whose handle stopped working writes the error.
func hold() {
	q, err := os.OpenFile(os.Getenv(queueEnv), os.O_RDWR, 0) //nolint:gosec // the test's own device node
	if err != nil {
		os.Exit(1)
	}
	dma, err := os.OpenFile(os.Getenv(dmaEnv), os.O_RDWR, 0) //nolint:gosec // the test's own file
	if err != nil {
		os.Exit(2)
	}
	m, err := unix.Mmap(int(dma.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		os.Exit(3)
	}
	out := os.Getenv(counterEnv)
	for n := 1; ; n++ {
		msg := strconv.Itoa(n)
		if _, err := unix.FcntlInt(q.Fd(), unix.F_GETFL, 0); err != nil {
			msg = "handle: " + err.Error()
		}
		m[0]++
		_ = os.WriteFile(out+".tmp", []byte(msg), 0o600) //nolint:gosec // the test's own counter
		_ = os.Rename(out+".tmp", out)                   //nolint:gosec // the test's own counter
		time.Sleep(20 * time.Millisecond)
	}
}

// Rig is one test's simulated node: a queue device (tun's 10:200), a DMA file, the
// holder's counter, and the host's cgroup v2 tree.
type Rig struct {
	T                   *testing.T
	Queue, DMA, Counter string
	Hierarchy           cgroup.Hierarchy
	dir                 string
}

// New makes the rig, skipping the test where it cannot run (not root, no cgroup v2).
func New(t *testing.T) *Rig {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mknod, cgroups, bpffs, BPF")
	}
	h, err := cgroup.Detect("/sys/fs/cgroup")
	if err != nil || h.V2 == "" {
		t.Skipf("no cgroup v2 tree on this host: %v", err)
	}
	dir := t.TempDir()
	r := &Rig{T: t, Hierarchy: h, dir: dir, Queue: filepath.Join(dir, "hv_queue"), DMA: filepath.Join(dir, "dma"), Counter: filepath.Join(dir, "counter")}
	if err := unix.Mknod(r.Queue, unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200))); err != nil { //nolint:gosec // 10:200 fits
		t.Fatal(err)
	}
	if err := os.WriteFile(r.DMA, make([]byte, 4096), 0o666); err != nil {
		t.Fatal(err)
	}
	return r
}

// Bpffs mounts a private bpffs for the test's pins, so that it never touches the host's.
func (r *Rig) Bpffs() string {
	r.T.Helper()
	d := filepath.Join(r.dir, "bpffs")
	if err := os.Mkdir(d, 0o700); err != nil {
		r.T.Fatal(err)
	}
	if err := unix.Mount("bpf", d, "bpf", 0, ""); err != nil {
		r.T.Fatalf("mounting bpffs: %v", err)
	}
	r.T.Cleanup(func() { _ = unix.Unmount(d, unix.MNT_DETACH) })
	return d
}

// Cgroups makes a tree of cgroups under a root of its own in the v2 hierarchy (name and
// the test's PID), with the leaves given relative to it, and returns the root. At the
// end every cgroup made is thawed and removed, leaves first.
func (r *Rig) Cgroups(name string, leaves ...string) string {
	r.T.Helper()
	root := filepath.Join(r.Hierarchy.V2, fmt.Sprintf("%s-%d", name, os.Getpid()))
	made := []string{root}
	for _, l := range leaves {
		for d := filepath.Join(root, l); d != root; d = filepath.Dir(d) {
			made = append(made, d)
		}
		if err := os.MkdirAll(filepath.Join(root, l), 0o755); err != nil {
			r.T.Fatal(err)
		}
	}
	r.T.Cleanup(func() {
		// Deepest first; a cgroup is removable once its processes are gone.
		for len(made) > 0 {
			d := deepest(made)
			made = remove(made, d)
			_ = r.Hierarchy.Thaw(d)
			for range 50 {
				if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	return root
}

func deepest(dirs []string) string {
	best := dirs[0]
	for _, d := range dirs {
		if strings.Count(d, "/") > strings.Count(best, "/") {
			best = d
		}
	}
	return best
}

func remove(dirs []string, d string) []string {
	out := dirs[:0]
	for _, x := range dirs {
		if x != d {
			out = append(out, x)
		}
	}
	return out
}

// Cmd is the test binary as a helper in mode ("open" or "hold"), started inside cg.
func (r *Rig) Cmd(cg, mode string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		r.T.Fatal(err)
	}
	fd, err := unix.Open(cg, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		r.T.Fatal(err)
	}
	r.T.Cleanup(func() { _ = unix.Close(fd) })
	c := exec.Command(exe)
	c.Env = append(os.Environ(), modeEnv+"="+mode, queueEnv+"="+r.Queue, dmaEnv+"="+r.DMA, counterEnv+"="+r.Counter)
	c.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	return c
}

// skipWithoutClone3 skips the test when a helper could not start for want of clone3,
// the only way to place a process in a cgroup as it starts: kernels before 5.7 and
// qemu-user lack it.
func (r *Rig) skipWithoutClone3(err error) {
	r.T.Helper()
	if errors.Is(err, syscall.ENOSYS) {
		r.T.Skipf("no clone3(CLONE_INTO_CGROUP) to start a helper inside a cgroup: %v", err)
	}
}

// Open tries a new open of the queue device from inside cg and returns the errno.
func (r *Rig) Open(cg string) syscall.Errno {
	r.T.Helper()
	err := r.Cmd(cg, "open").Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return syscall.Errno(exit.ExitCode())
	}
	r.skipWithoutClone3(err)
	if err != nil {
		r.T.Fatal(err)
	}
	return 0
}

// Start starts a helper in mode inside cg; the caller waits for it.
func (r *Rig) Start(cg, mode string) *exec.Cmd {
	r.T.Helper()
	c := r.Cmd(cg, mode)
	if err := c.Start(); err != nil {
		r.skipWithoutClone3(err)
		r.T.Fatal(err)
	}
	return c
}

// Hold starts a holder inside cg, stopped at the end of the test.
func (r *Rig) Hold(cg string) *exec.Cmd {
	r.T.Helper()
	c := r.Cmd(cg, "hold")
	if err := c.Start(); err != nil {
		r.skipWithoutClone3(err)
		r.T.Fatal(err)
	}
	r.T.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	return c
}

// Count is the holder's counter, or what it reported instead.
func (r *Rig) Count() (int, string) {
	b, _ := os.ReadFile(r.Counter)
	n, err := strconv.Atoi(string(b))
	if err != nil {
		return 0, string(b)
	}
	return n, ""
}

// KeepsGoing reports whether the holder counts on within d, failing on a holder error:
// for a holder that must not be stopped, it waits as long as a loaded machine may take
// to schedule it, and no longer than it does.
func (r *Rig) KeepsGoing(d time.Duration) bool {
	r.T.Helper()
	before, bad := r.Count()
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		after, bad2 := r.Count()
		if bad != "" || bad2 != "" {
			r.T.Fatalf("holder reports %q %q", bad, bad2)
		}
		if after > before {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// Progresses reports whether the holder counts on over d, failing on a holder error:
// for a holder that must be stopped, which only a whole window can show.
func (r *Rig) Progresses(d time.Duration) bool {
	r.T.Helper()
	before, bad := r.Count()
	time.Sleep(d)
	after, bad2 := r.Count()
	if bad != "" || bad2 != "" {
		r.T.Fatalf("holder reports %q %q", bad, bad2)
	}
	return after > before
}

// Frozen reports whether the kernel says every task of cg is frozen.
func (r *Rig) Frozen(cg string) bool {
	r.T.Helper()
	b, err := os.ReadFile(filepath.Join(cg, "cgroup.events"))
	if err != nil {
		r.T.Fatal(err)
	}
	return strings.Contains(string(b), "frozen 1")
}

// DevicePrograms counts the device programs attached to cg.
func (r *Rig) DevicePrograms(cg string) int {
	r.T.Helper()
	f, err := os.Open(cg)
	if err != nil {
		r.T.Fatal(err)
	}
	defer f.Close()
	res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		r.T.Fatal(err)
	}
	return len(res.Programs)
}
