// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/neureality-sdk/nr1-agent/agent/observe/cgroup/cgrouptest"
	"github.com/neureality-sdk/nr1-agent/bpf"
)

// throttledNode is a throttled node's state, private to the test: a bpffs, a queue device,
// and a kubepods tree in its own v2 cgroup, which stands for the host's cgroupfs root.
type throttledNode struct {
	*cgrouptest.Rig
	bpffs, state, cgroupfs  string
	throttled, other, quiet string // pod cgroups: throttled and frozen, only frozen, only throttled
}

const (
	throttledUID = "5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b11"
	otherUID     = "0b3e7d21-8c44-4f0e-a1f2-6d9e5c7b3a08"
	quietUID     = "6a3c1b9e0f8d4e2a" // a static pod's UID
)

func newNode(t *testing.T) *throttledNode {
	t.Helper()
	r := cgrouptest.New(t)
	n := &throttledNode{Rig: r, bpffs: r.Bpffs(), state: filepath.Join(t.TempDir(), "state")}
	if err := os.Mkdir(n.state, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"enforcement.json", ".checkpoint-123"} { // the checkpoint, and a crash's leftover
		if err := os.WriteFile(filepath.Join(n.state, f), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	throttled, other, quiet := "kubepods/burstable/pod"+throttledUID, "kubepods/burstable/pod"+otherUID, "kubepods/pod"+quietUID
	n.cgroupfs = r.Cgroups("nr1-cleanup-test", throttled+"/ctr", other, quiet)
	n.throttled, n.other, n.quiet = filepath.Join(n.cgroupfs, throttled), filepath.Join(n.cgroupfs, other), filepath.Join(n.cgroupfs, quiet)
	return n
}

// cleanup runs `nr1-agent cleanup` on the node and returns its exit code and output.
func (n *throttledNode) cleanup(extra ...string) (code int, stdout, stderr string) {
	n.T.Helper()
	return runBinary(n.T, append([]string{"cleanup", "--path.bpffs", n.bpffs, "--path.cgroupfs", n.cgroupfs, "--path.state", n.state}, extra...)...)
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
	n.Hold(filepath.Join(n.throttled, "ctr"))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, _ := n.Count(); c > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("holder never started")
		}
	}
	ctr := filepath.Join(n.throttled, "ctr")
	if e := n.Open(ctr); e != 0 {
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
	if e := n.Open(ctr); e != syscall.EPERM {
		t.Fatalf("open in the throttled pod: %v, want EPERM", e)
	}
	for _, cg := range []string{n.throttled, n.other} {
		if err := n.Hierarchy.Freeze(cg); err != nil {
			t.Fatal(err)
		}
	}
	if !n.Frozen(n.throttled) || n.Progresses(200*time.Millisecond) {
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
		if p := n.DevicePrograms(cg); p != 0 {
			t.Errorf("%d device programs left on %s", p, cg)
		}
	}
	if n.Frozen(n.throttled) || !n.KeepsGoing(5*time.Second) {
		t.Error("the throttled pod is still frozen")
	}
	if e := n.Open(ctr); e != 0 {
		t.Errorf("open in the formerly throttled pod: %v, want success", e)
	}
	if !n.Frozen(n.other) {
		t.Error("cleanup thawed a pod the agent never throttled")
	}

	code, stdout, stderr = n.cleanup()
	if code != 0 || stdout != "nothing to clean up\n" {
		t.Errorf("second cleanup: exit %d, stdout %q, stderr %q; want 0 and nothing to clean up", code, stdout, stderr)
	}
}

func TestCleanupReportsWhatItCouldNotUndo(t *testing.T) {
	n := newNode(t)
	// Something in the pin directory, named as a pin, that is not a throttle link; and
	// something not named by a pod UID, which the agent never pins.
	pins := filepath.Join(n.bpffs, "nr1-agent", "throttle")
	stray, foreign := filepath.Join(pins, otherUID), filepath.Join(pins, "foreign")
	for _, d := range []string{stray, foreign} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr := n.cleanup()
	if code != 1 || !strings.Contains(stderr, "nr1-agent cleanup: loading throttle of "+otherUID) {
		t.Errorf("cleanup with a stray pin: exit %d, stderr %q; want 1 naming it", code, stderr)
	}
	if !strings.Contains(stdout, "left \""+foreign+"\": not named by a pod UID") {
		t.Errorf("cleanup does not report the entry not named by a pod UID: %q", stdout)
	}
	if strings.Contains(stdout, "removed") {
		t.Errorf("cleanup claims it removed something: %q", stdout)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("cleanup removed what the agent never pinned: %v", err)
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
