// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// netnsOf is the inode number of process pid's network namespace, from /proc.
func netnsOf(pid string) (uint64, bool) {
	link, err := os.Readlink(filepath.Join("/proc", pid, "ns", "net"))
	if err != nil {
		return 0, false
	}
	ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "net:["), "]"), 10, 64)
	return ino, err == nil
}

// TestFilesNameEveryNamespaceAProcessIsIn: the task_file pass names each network
// namespace a process with an open file is in, once per scan and again in the next,
// through a process that is in it: a process started in a namespace of its own among
// them.
func TestFilesNameEveryNamespaceAProcessIsIn(t *testing.T) {
	f := loadOrSkip(t)
	pid, own := inNewNamespace(t)
	for scan := range 2 {
		before := processNamespaces(t, true)
		named := map[uint64]uint32{}
		if err := f.Files(namer(t, scan, named, true)); err != nil {
			t.Fatal(err)
		}
		// Every namespace a process with files is in, as /proc lists them before and
		// after the scan.
		checkNamed(t, scan, named, map[string]uint64{"process " + pid: own}, before, processNamespaces(t, true))
	}
}

// namer collects into named the namespace each KindNetNSMember record names, with its
// task, failing t on one named twice, and on a record of another kind unless others.
func namer(t *testing.T, scan int, named map[uint64]uint32, others bool) func(*Record) error {
	return func(r *Record) error {
		if r.Kind != KindNetNSMember {
			if !others {
				t.Errorf("scan %d: a record of kind %d", scan, r.Kind)
			}
			return nil
		}
		if _, twice := named[r.File]; twice {
			t.Errorf("scan %d: namespace %d named twice", scan, r.File)
		}
		named[r.File] = r.Pid
		return nil
	}
}

// checkNamed checks the namespaces a scan named, each through a task (by id) which, if
// still there, is in it: those of want among them, and each that processes were in both
// before and after the scan.
func checkNamed(t *testing.T, scan int, named map[uint64]uint32, want map[string]uint64, before, after map[uint64]bool) {
	t.Helper()
	for ino, id := range named {
		// The task named may have ended since, its namespace with it.
		if got, ok := netnsOf(strconv.Itoa(int(id))); ok && got != ino {
			t.Errorf("scan %d: namespace %d named through task %d, which is in %d", scan, ino, id, got)
		}
	}
	for what, ino := range want {
		if _, ok := named[ino]; !ok {
			t.Errorf("scan %d: the namespace of %s (%d) not named among %d", scan, what, ino, len(named))
		}
	}
	for ino := range after {
		if _, ok := named[ino]; !ok && before[ino] {
			t.Errorf("scan %d: namespace %d, which processes were in before and after it, not named", scan, ino)
		}
	}
}

// processNamespaces are the network namespaces processes are in, from /proc: those
// holding a file only, with files.
func processNamespaces(t *testing.T, files bool) map[uint64]bool {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]bool{}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if fds, err := os.ReadDir(filepath.Join("/proc", e.Name(), "fd")); files && (err != nil || len(fds) == 0) {
			continue
		}
		if ino, ok := netnsOf(e.Name()); ok {
			out[ino] = true
		}
	}
	return out
}

// inNewNamespace starts a process in a network namespace of its own, for the test's
// life, and returns its PID and the namespace's inode number.
func inNewNamespace(t *testing.T) (string, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a process in a new network namespace here: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid, home := strconv.Itoa(cmd.Process.Pid), mustNetns(t, "self")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ino, ok := netnsOf(pid); ok && ino != home {
			return pid, ino
		}
		if time.Now().After(deadline) {
			t.Fatal("the process never entered its network namespace")
		}
	}
}

func mustNetns(t *testing.T, pid string) uint64 {
	t.Helper()
	ino, ok := netnsOf(pid)
	if !ok {
		t.Fatalf("network namespace of %s unreadable", pid)
	}
	return ino
}

// TestInFlightPassBringsItsThreadHome: a pass through two namespaces of other
// processes, and one gone meanwhile, leaves no thread of the agent in either, pass
// after pass.
func TestInFlightPassBringsItsThreadHome(t *testing.T) {
	f := loadOrSkip(t)
	var paths []string
	entered := map[uint64]bool{}
	for range 2 {
		pid, ino := inNewNamespace(t)
		paths = append(paths, filepath.Join("/proc", pid, "ns", "net"))
		entered[ino] = true
	}
	paths = append(paths[:1], "/proc/0/ns/net", paths[1])
	for pass := range 20 {
		if err := f.InFlight(context.Background(), paths, func(*Flight) error { return nil }); err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		// Compared with the namespaces entered, not with the main thread's: another test
		// of the package may leave the main thread elsewhere (a goroutine locked to it
		// that ends wedges it there).
		if ino, ok := netnsOf(filepath.Join("self", "task", task.Name())); ok && entered[ino] {
			t.Errorf("thread %s left in network namespace %d", task.Name(), ino)
		}
	}
}

// TestNamespacesNameEveryTasksNamespace: after a walk of one process's fds, the task
// pass names every network namespace a task is in, once per scan, through a task that
// is in it: a process's of its own, and a thread's that left its process's.
func TestNamespacesNameEveryTasksNamespace(t *testing.T) {
	f := loadOrSkip(t)
	pid, own := inNewNamespace(t)
	tid, threads := threadInNewNamespace(t)
	for scan := range 2 {
		before := processNamespaces(t, false)
		if err := f.FilesOf(func(yield func(uint32) bool) { yield(uint32(os.Getpid())) }, func(*Record) error { return nil }); err != nil {
			t.Fatal(err)
		}
		named := map[uint64]uint32{}
		if err := f.Namespaces(namer(t, scan, named, false)); err != nil {
			t.Fatal(err)
		}
		checkNamed(t, scan, named, map[string]uint64{"process " + pid: own, "thread " + tid: threads}, before, processNamespaces(t, false))
	}
}

// threadInNewNamespace leaves a thread of the test in a network namespace of its own
// until the test ends, and returns its id and the namespace's inode number.
func threadInNewNamespace(t *testing.T) (string, uint64) {
	t.Helper()
	type made struct {
		tid    int
		leader bool
		err    error
	}
	ready, done := make(chan made), make(chan struct{})
	move := func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The leader's namespace is the process's: never moved. Held until the
			// test ends, so that the next try runs on another thread.
			ready <- made{leader: true}
			<-done
			runtime.UnlockOSThread()
			return
		}
		// Never unlocked: the thread leaves with the goroutine, its namespace with it.
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ready <- made{err: err}
			return
		}
		ready <- made{tid: unix.Gettid()}
		<-done
	}
	t.Cleanup(func() { close(done) })
	home := mustNetns(t, "self")
	go move()
	m := <-ready
	if m.leader {
		go move()
		m = <-ready
	}
	if m.err != nil {
		t.Skipf("cannot move a thread to a new network namespace here: %v", m.err)
	}
	tid := strconv.Itoa(m.tid)
	ino := mustNetns(t, tid)
	if ino == home || mustNetns(t, "self") != home {
		t.Fatal("the thread is in its process's network namespace, or the process moved")
	}
	return tid, ino
}
