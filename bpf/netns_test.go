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
		before := processNamespaces(t)
		named := map[uint64]uint32{}
		if err := f.Files(func(r *Record) error {
			if r.Kind != KindNetNSMember {
				return nil
			}
			if _, twice := named[r.File]; twice {
				t.Errorf("scan %d: namespace %d named twice", scan, r.File)
			}
			named[r.File] = r.Pid
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for ino, pid := range named {
			// The process named may have ended since, its namespace with it.
			if got, ok := netnsOf(strconv.Itoa(int(pid))); ok && got != ino {
				t.Errorf("scan %d: namespace %d named through process %d, which is in %d", scan, ino, pid, got)
			}
		}
		if _, ok := named[own]; !ok {
			t.Errorf("scan %d: the namespace of process %s (%d) not named among %d", scan, pid, own, len(named))
		}
		// Every namespace a process with files is in, as /proc lists them before and
		// after the scan.
		for ino := range processNamespaces(t) {
			if _, ok := named[ino]; !ok && before[ino] {
				t.Errorf("scan %d: namespace %d, which processes with files were in before and after it, not named", scan, ino)
			}
		}
	}
}

// processNamespaces are the network namespaces processes holding a file are in, from
// /proc.
func processNamespaces(t *testing.T) map[uint64]bool {
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
		fds, err := os.ReadDir(filepath.Join("/proc", e.Name(), "fd"))
		if ino, ok := netnsOf(e.Name()); ok && err == nil && len(fds) > 0 {
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
		before := taskNamespaces(t)
		if err := f.FilesOf(func(yield func(uint32) bool) { yield(uint32(os.Getpid())) }, func(*Record) error { return nil }); err != nil {
			t.Fatal(err)
		}
		named := map[uint64]uint32{}
		if err := f.Namespaces(func(r *Record) error {
			if r.Kind != KindNetNSMember {
				t.Errorf("scan %d: a record of kind %d", scan, r.Kind)
			}
			if _, twice := named[r.File]; twice {
				t.Errorf("scan %d: namespace %d named twice", scan, r.File)
			}
			named[r.File] = r.Pid
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for ino, id := range named {
			if got, ok := netnsOf(strconv.Itoa(int(id))); ok && got != ino {
				t.Errorf("scan %d: namespace %d named through task %d, which is in %d", scan, ino, id, got)
			}
		}
		for what, ino := range map[string]uint64{"process " + pid: own, "thread " + tid: threads} {
			if _, ok := named[ino]; !ok {
				t.Errorf("scan %d: the namespace of %s (%d) not named among %d", scan, what, ino, len(named))
			}
		}
		for ino := range taskNamespaces(t) {
			if _, ok := named[ino]; !ok && before[ino] {
				t.Errorf("scan %d: namespace %d, which processes were in before and after it, not named", scan, ino)
			}
		}
	}
}

// taskNamespaces are the network namespaces processes are in, from /proc.
func taskNamespaces(t *testing.T) map[uint64]bool {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]bool{}
	for _, e := range entries {
		if ino, ok := netnsOf(e.Name()); ok {
			out[ino] = true
		}
	}
	return out
}

// threadInNewNamespace leaves a thread of the test in a network namespace of its own
// until the test ends, and returns its id and the namespace's inode number.
func threadInNewNamespace(t *testing.T) (string, uint64) {
	t.Helper()
	type made struct {
		tid int
		err error
	}
	ready, done := make(chan made), make(chan struct{})
	go func() {
		// Never unlocked: the thread leaves with the goroutine, its namespace with it.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ready <- made{err: err}
			return
		}
		ready <- made{tid: unix.Gettid()}
		<-done
	}()
	m := <-ready
	if m.err != nil {
		t.Skipf("cannot move a thread to a new network namespace here: %v", m.err)
	}
	t.Cleanup(func() { close(done) })
	tid := strconv.Itoa(m.tid)
	ino := mustNetns(t, tid)
	if ino == mustNetns(t, "self") {
		t.Fatal("the thread is in its process's network namespace")
	}
	return tid, ino
}
