// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/vforkmap"
)

// followOrFail follows the mappers; the tracepoints load wherever the iterators do.
func followOrFail(t *testing.T, f *Footprint) {
	t.Helper()
	if err := f.FollowMappers(); err != nil {
		t.Fatal(err)
	}
}

// mappingsOf runs a pass over the mappers and returns this process's mappings of target.
func mappingsOf(t *testing.T, f *Footprint, pid, target uint32) ([]Record, MapperPass) {
	t.Helper()
	var got []Record
	pass, err := f.MapperVMAs(func(r *Record) error {
		if r.Pid == pid && r.Target == target {
			got = append(got, *r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, pass
}

// mappersPass is a pass that walks the mappers only: one that walked every process
// instead (a ring mapped in shared memory elsewhere on the node) would make any "not
// walked" hold by itself, so it is run again.
func mappersPass(t *testing.T, f *Footprint, pid, target uint32) ([]Record, MapperPass) {
	t.Helper()
	for range 5 {
		got, pass := mappingsOf(t, f, pid, target)
		if pass.Full == "" {
			return got, pass
		}
	}
	t.Fatal("every pass walked every process")
	return nil, MapperPass{}
}

// forkAndWait forks a child that copies this process's mappings and blocks until killed.
// Only raw system calls run in the child, on a copy of this thread, as in the runtime's
// own fork.
//
//go:nosplit
func forkAndWait() (int, syscall.Errno) {
	pid, _, errno := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if errno != 0 || pid != 0 {
		return int(pid), errno
	}
	for {
		syscall.RawSyscall6(syscall.SYS_PPOLL, 0, 0, 0, 0, 0, 0)
	}
}

func TestMapperVMAsWalkOnlyWhatMayMap(t *testing.T) {
	f := loadOrSkip(t)
	followOrFail(t, f)
	const dma = 7
	file := dmaTarget(t, f, dma)
	self := uint32(os.Getpid())

	// A mapping made before the mappers were followed is found by the first pass, which
	// walks every process, and by every pass after it while it is held.
	early, err := unix.Mmap(int(file.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	if got, pass := mappingsOf(t, f, self, dma); pass.Full == "" || len(got) != 1 {
		t.Fatalf("first pass %+v: %d mappings of the process, want every process walked and 1", pass, len(got))
	}
	if got, pass := mappingsOf(t, f, self, dma); pass.Full != "" || len(got) != 1 || !slices.Contains(pass.pids, self) {
		t.Fatalf("second pass %+v: %d mappings of the process, want the mappers walked, this process among them, and 1", pass, len(got))
	}
	if err := unix.Munmap(early); err != nil {
		t.Fatal(err)
	}
	// Unmapped: one more walk finds nothing and clears it; then it is not walked.
	if got, _ := mappingsOf(t, f, self, dma); len(got) != 0 {
		t.Fatalf("after the unmap: %+v", got)
	}
	if _, pass := mappersPass(t, f, self, dma); slices.Contains(pass.pids, self) {
		t.Fatalf("pass %+v walked this process, which maps nothing and did nothing since", pass)
	}

	t.Run("a mapping made since", func(t *testing.T) {
		m, err := unix.Mmap(int(file.Fd()), 4096, 8192, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(m)
		got, pass := mappingsOf(t, f, self, dma)
		if pass.Full != "" || len(got) != 1 || got[0].Size != 8192 {
			t.Fatalf("pass %+v: mappings %+v, want the mappers walked and the one of 8192 bytes", pass, got)
		}
	})

	t.Run("more mappers than walked one by one", func(t *testing.T) {
		defer func(n int) { maxWalked = n }(maxWalked)
		maxWalked = 0
		m, err := unix.Mmap(int(file.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(m)
		got, pass := mappingsOf(t, f, self, dma)
		if pass.Full == "" || len(got) != 1 {
			t.Fatalf("pass %+v: mappings %+v, want every process walked and the one mapping", pass, got)
		}
	})

	t.Run("a forked child", func(t *testing.T) {
		m, err := unix.Mmap(int(file.Fd()), 0, 4*4096, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		child, errno := forkAndWait()
		if errno != 0 {
			t.Fatal(errno)
		}
		defer func() {
			_ = syscall.Kill(child, syscall.SIGKILL)
			_, _ = syscall.Wait4(child, nil, 0, nil)
		}()
		// The parent gives its mapping up; the child keeps its copy.
		if err := unix.Munmap(m); err != nil {
			t.Fatal(err)
		}
		got, pass := mappingsOf(t, f, uint32(child), dma)
		if pass.Full != "" || len(got) != 1 || got[0].Size != 4*4096 {
			t.Fatalf("pass %+v: the child's mappings %+v, want the mappers walked and its copy", pass, got)
		}
	})

	t.Run("an exec", func(t *testing.T) {
		// A shell forked from this process (a mapper) is walked once for the fork,
		// then left; its exec makes it walked again.
		sh := exec.Command("sh", "-c", "read x; exec sleep 60")
		stdin, err := sh.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := sh.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sh.Process.Kill(); _ = sh.Wait() }()
		pid := uint32(sh.Process.Pid)
		waitComm(t, sh.Process.Pid, "sh")
		mappingsOf(t, f, pid, dma)
		if _, pass := mappersPass(t, f, pid, dma); slices.Contains(pass.pids, pid) {
			t.Fatalf("pass %+v walked the shell again, which maps nothing and did nothing since", pass)
		}
		mappers, err := f.Mappers()
		if err != nil {
			t.Fatal(err)
		}
		marked := mappers[pid].Seq
		if _, err := stdin.Write([]byte("\n")); err != nil {
			t.Fatal(err)
		}
		waitComm(t, sh.Process.Pid, "sleep")
		// The program's name is set before the exec's tracepoint runs: the mark is
		// waited for.
		waitMark(t, f, pid, marked)
		if _, pass := mappersPass(t, f, pid, dma); !slices.Contains(pass.pids, pid) {
			t.Fatalf("pass %+v did not walk the process just executed", pass)
		}
		if _, pass := mappersPass(t, f, pid, dma); slices.Contains(pass.pids, pid) {
			t.Fatalf("pass %+v walked the executed process again, which maps nothing", pass)
		}
	})

	t.Run("memory shared with a process that maps", func(t *testing.T) {
		// The child maps 12 KiB in this process's memory and exits: this process never
		// mapped anything.
		if _, err := vforkmap.Map(file.Fd(), 3*4096); err != nil {
			t.Fatal(err)
		}
		got, pass := mappingsOf(t, f, self, dma)
		if pass.Full == "" || len(got) != 1 || got[0].Size != 3*4096 {
			t.Fatalf("pass %+v: this process's mappings %+v, want every process walked and the 12 KiB its child mapped in it", pass, got)
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_MUNMAP, uintptr(got[0].Start), 3*4096, 0); errno != 0 {
			t.Fatal(errno)
		}
		if _, pass := mappingsOf(t, f, self, dma); pass.Full != "" {
			t.Fatalf("pass %+v: want the mappers walked once the shared mapping was counted", pass)
		}
	})
}

// dmaTarget makes a file of 1 MiB the footprint's only target, as index, and opens it
// for the test's life.
func dmaTarget(t *testing.T, f *Footprint, index uint32) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dma")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.SetTargets(map[TargetKey]uint32{keyOf(t, path): index}); err != nil {
		t.Fatal(err)
	}
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = file.Close() })
	return file
}

// waitComm waits until process pid runs the program named comm.
func waitComm(t *testing.T, pid int, comm string) {
	t.Helper()
	for range 500 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err == nil && strings.TrimSpace(string(b)) == comm {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d never ran %s", pid, comm)
}

// waitMark waits until process pid's mark moves past seq.
func waitMark(t *testing.T, f *Footprint, pid uint32, seq uint64) {
	t.Helper()
	for range 500 {
		m, err := f.Mappers()
		if err != nil {
			t.Fatal(err)
		}
		if m[pid].Seq != seq {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d never marked past %d", pid, seq)
}
