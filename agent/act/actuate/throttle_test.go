// SPDX-License-Identifier: Apache-2.0

package actuate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/neureality-sdk/nr1-agent/agent/observe/cgroup/cgrouptest"
	"github.com/neureality-sdk/nr1-agent/bpf"
)

func TestMain(m *testing.M) {
	cgrouptest.Main()
	os.Exit(m.Run())
}

// podUID names the test's throttle, as a pod's UID does the agent's.
const podUID = "5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b11"

func TestThrottleFreezeAndRestart(t *testing.T) {
	r := cgrouptest.New(t)
	root := r.Cgroups("nr1-throttle-test", "pod/ctr", "other")
	pod, ctr, other := filepath.Join(root, "pod"), filepath.Join(root, "pod", "ctr"), filepath.Join(root, "other")
	devices := []bpf.Device{{Major: 10, Minor: 200}}
	pinDir := filepath.Join(r.Bpffs(), "throttle")
	thr, err := bpf.LoadThrottle(pinDir, devices)
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("kernel lacks cgroup device programs: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.Hold(ctr)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, _ := r.Count(); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("holder never started")
		}
	}
	if e := r.Open(ctr); e != 0 {
		t.Fatalf("open before the throttle: %v", e)
	}

	if err := thr.Attach(podUID, pod); err != nil {
		t.Fatal(err)
	}
	if e := r.Open(ctr); e != syscall.EPERM {
		t.Errorf("new open in the throttled CG's container: %v, want EPERM", e)
	}
	if e := r.Open(other); e != 0 {
		t.Errorf("new open in another cgroup: %v, want success", e)
	}
	if !r.KeepsGoing(5 * time.Second) {
		t.Error("the throttled CG's existing handle and mapping stopped working")
	}

	if err := r.Hierarchy.Freeze(pod); err != nil {
		t.Fatal(err)
	}
	if r.Progresses(300 * time.Millisecond) {
		t.Error("frozen CG still runs")
	}
	if err := r.Hierarchy.Thaw(pod); err != nil {
		t.Fatal(err)
	}
	if !r.KeepsGoing(5 * time.Second) {
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
	names, _, err := thr.Attached()
	if err != nil || strings.Join(names, ",") != podUID {
		t.Fatalf("pinned throttles after restart: %v %v", names, err)
	}
	if e := r.Open(ctr); e != syscall.EPERM {
		t.Errorf("throttle dropped by the restart: open %v", e)
	}
	if err := thr.Attach(podUID, pod); err != nil {
		t.Fatal(err)
	}
	if n := r.DevicePrograms(pod); n != 1 {
		t.Errorf("%d device programs on the pod cgroup after throttling again, want 1", n)
	}

	if err := thr.Detach(podUID); err != nil {
		t.Fatal(err)
	}
	if e := r.Open(ctr); e != 0 {
		t.Errorf("open after lifting: %v", e)
	}
	if n := r.DevicePrograms(pod); n != 0 {
		t.Errorf("%d device programs left after lifting", n)
	}
	if names, _, _ := thr.Attached(); len(names) != 0 {
		t.Errorf("pins left: %v", names)
	}
}

// A kill at once ends every process of the container's cgroup by SIGKILL, on the real
// kernel: none can take a signal first and exit 0.
func TestKillEndsTheCgroupBySIGKILL(t *testing.T) {
	r := cgrouptest.New(t)
	root := r.Cgroups("nr1-kill-test", "pod/ctr")
	ctr := filepath.Join(root, "pod", "ctr")
	if _, err := os.Stat(filepath.Join(ctr, "cgroup.kill")); err != nil {
		t.Skipf("the kernel has no cgroup.kill (Linux 5.14): %v", err)
	}
	c := r.Start(ctr, "hold")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, _ := r.Count(); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the holder never started")
		}
	}
	if err := r.Hierarchy.Kill(ctr); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = c.Process.Kill()
		t.Fatal("the holder outlived its cgroup's kill")
	}
	ws, ok := c.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the holder ended %v, want by SIGKILL", c.ProcessState)
	}
	if err := r.Hierarchy.Kill(filepath.Join(root, "gone")); err != nil {
		t.Errorf("a cgroup gone: %v, want nothing to kill", err)
	}
	if err := r.Hierarchy.Kill("/tmp"); err == nil {
		t.Error("a directory outside the v2 tree killed")
	}
}
