// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/syncbuf"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/sim"
)

// nr1Load is the CG workload binary, built once for the privileged tests.
var nr1Load string

func TestMain(m *testing.M) {
	// Helper mode: a sharer holds queue handles and a child that inherits them.
	if os.Getenv("NR1_FP_SHARER") != "" {
		sharer(os.Getenv("NR1_FP_SHARER"))
		return
	}
	// Helper mode: a mapper maps ranges and forks children that keep them.
	if spec := os.Getenv("NR1_FP_MAPPER"); spec != "" {
		mapper(spec)
		return
	}
	// Helper mode: an unlinker holds files it removed, then makes a directory its root.
	if spec := os.Getenv("NR1_FP_UNLINKER"); spec != "" {
		unlinker(spec)
		return
	}
	code := func() int {
		// A kernel's guest (deploy/kernels/run.sh) has no toolchain: it brings one built.
		if nr1Load = os.Getenv("NR1_LOAD"); nr1Load != "" {
			return m.Run()
		}
		if os.Geteuid() == 0 {
			dir, err := os.MkdirTemp("", "nr1-load")
			if err != nil {
				panic(err)
			}
			defer os.RemoveAll(dir)
			nr1Load = filepath.Join(dir, "nr1-load")
			if out, err := exec.Command("go", "build", "-o", nr1Load, "../../cmd/nr1-load").CombinedOutput(); err != nil {
				panic(string(out))
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// sharer opens the queue twice, dups the first handle, and starts a child inheriting
// all three fds: two open file descriptions shared by four fds in two processes.
func sharer(queue string) {
	q1, err1 := os.OpenFile(queue, os.O_RDWR, 0)
	q2, err2 := os.OpenFile(queue, os.O_RDWR, 0)
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, err1, err2)
		os.Exit(1)
	}
	dup, err := syscall.Dup(int(q1.Fd()))
	if err != nil {
		os.Exit(1)
	}
	child := exec.Command("sleep", "600")
	child.ExtraFiles = []*os.File{q1, os.NewFile(uintptr(dup), "dup"), q2}
	if err := child.Start(); err != nil {
		os.Exit(1)
	}
	fmt.Println(child.Process.Pid) // tells the test the child is there
	_ = child.Wait()
}

// population is at least 300 processes in 10 cgroups holding the simulator's files.
type population struct {
	sim       *sim.Sim
	targets   *Targets
	cgroupV2  string
	cgroups   []string // paths under cgroupV2
	ids       []uint64
	expected  map[uint64]nr1.Usage
	procs     []*exec.Cmd
	stopChurn chan struct{}
	churnWG   sync.WaitGroup
}

func requireRealCgroups(tb testing.TB) string {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: real cgroups, mknod and every process's /proc")
	}
	for _, v2 := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var st unix.Statfs_t
		if unix.Statfs(v2, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return v2
		}
	}
	tb.Skip("no cgroup v2 hierarchy on this host")
	return ""
}

const (
	loads    = 200
	sharers  = 50
	ncgroups = 10
)

var cgroupRoots atomic.Int64

// newCgroups makes a simulated NR1 and n real v2 cgroups, all removed (with whatever
// runs in them) when tb ends. dir is a scratch directory.
func newCgroups(tb testing.TB, n int) (p *population, dir string) {
	tb.Helper()
	return newCgroupsWithQueue(tb, n, 10, 200)
}

// newCgroupsWithQueue is newCgroups with the simulated queue's device numbers.
func newCgroupsWithQueue(tb testing.TB, n int, major, minor uint32) (p *population, dir string) {
	tb.Helper()
	v2 := requireRealCgroups(tb)
	dir = tb.TempDir()
	s, err := sim.Create(filepath.Join(dir, "nr1"), sim.Options{Capacity: nr1.Amounts{2048, 512, 1024, 65536}, QueueMajor: major, QueueMinor: minor})
	if err != nil {
		tb.Fatal(err)
	}
	p = &population{sim: s, cgroupV2: v2, expected: map[uint64]nr1.Usage{}, stopChurn: make(chan struct{})}
	p.targets, err = resolve([]TargetSpec{
		{Resource: nr1.ComputeDMAMemory, Path: s.File(sim.ComputeDMA), Measure: MappedBytes},
		{Resource: nr1.CPUDMAMemory, Path: s.File(sim.CPUDMA), Measure: MappedBytes},
		{Resource: nr1.HypervisorQueue, Path: s.File(sim.HypervisorQ), Measure: OpenHandles},
	})
	if err != nil {
		tb.Fatal(err)
	}
	root := filepath.Join(v2, fmt.Sprintf("nr1-footprint-test-%d-%d", os.Getpid(), cgroupRoots.Add(1)))
	for i := range n {
		cg := filepath.Join(root, fmt.Sprintf("cg%d", i))
		if err := os.MkdirAll(cg, 0o755); err != nil {
			tb.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Stat(cg, &st); err != nil {
			tb.Fatal(err)
		}
		p.cgroups = append(p.cgroups, cg)
		p.ids = append(p.ids, st.Ino)
	}
	tb.Cleanup(func() {
		close(p.stopChurn)
		p.churnWG.Wait()
		for _, c := range p.procs {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		for _, cg := range p.cgroups {
			for range 50 {
				if os.Remove(cg) == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		_ = os.Remove(root)
	})
	return p, dir
}

func newPopulation(tb testing.TB) *population {
	tb.Helper()
	p, dir := newCgroups(tb, ncgroups)
	s := p.sim

	statusDir := filepath.Join(dir, "status")
	if err := os.MkdirAll(statusDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	for i := range loads {
		cg := i % ncgroups
		h := [3]int64{int64(1 + i%4), int64(i % 3), int64(i % 5)} // final compute MB, cpu MB, queues
		args := []string{
			"--compute-dma-file", s.File(sim.ComputeDMA), "--cpu-dma-file", s.File(sim.CPUDMA), "--queue-file", s.File(sim.HypervisorQ),
			"--write-file", filepath.Join(dir, "blob"), "--status-file", filepath.Join(statusDir, fmt.Sprint(i)),
		}
		if i%3 == 0 { // grow, then shrink to the final holding: partial munmap and closes
			args = append(args, "--compute-dma-mb", fmt.Sprint(h[0]+3), "--cpu-dma-mb", fmt.Sprint(h[1]+2), "--queues", fmt.Sprint(h[2]+2),
				"--step", fmt.Sprintf("200ms:compute=%d,cpu=%d,queues=%d", h[0], h[1], h[2]))
		} else {
			args = append(args, "--compute-dma-mb", fmt.Sprint(h[0]), "--cpu-dma-mb", fmt.Sprint(h[1]), "--queues", fmt.Sprint(h[2]))
		}
		p.start(tb, cg, exec.Command(nr1Load, args...))
		// Every load maps its files from offset 0, so the loads of a cgroup share their
		// first MBs: the cgroup holds as much as its largest load, not their sum.
		u := p.expected[p.ids[cg]]
		u[nr1.ComputeDMAMemory] = max(u[nr1.ComputeDMAMemory], nr1.Base(h[0]<<20))
		u[nr1.CPUDMAMemory] = max(u[nr1.CPUDMAMemory], nr1.Base(h[1]<<20))
		u[nr1.HypervisorQueue] += nr1.Base(h[2])
		p.expected[p.ids[cg]] = u
	}
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	var sharerOut []*syncbuf.Buffer
	for j := range sharers {
		cg := j % ncgroups
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "NR1_FP_SHARER="+s.File(sim.HypervisorQ))
		out := &syncbuf.Buffer{}
		cmd.Stdout = out
		sharerOut = append(sharerOut, out)
		p.start(tb, cg, cmd)
		u := p.expected[p.ids[cg]]
		u[nr1.HypervisorQueue] += 2
		p.expected[p.ids[cg]] = u
	}
	// Wait until every load reports its final holding and every sharer its child.
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < loads; {
		b, err := os.ReadFile(filepath.Join(statusDir, fmt.Sprint(i)))
		var st struct{ ComputeDMAMB, CPUDMAMB, Queues int64 }
		if err == nil && json.Unmarshal(b, &st) == nil && st.ComputeDMAMB == int64(1+i%4) && st.CPUDMAMB == int64(i%3) && st.Queues == int64(i%5) {
			i++
			continue
		}
		if time.Now().After(deadline) {
			tb.Fatalf("load %d never reached its final holding: %s %v", i, b, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for j, out := range sharerOut {
		for out.Len() == 0 {
			if time.Now().After(deadline) {
				tb.Fatalf("sharer %d never started its child", j)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return p
}

// start runs cmd directly in cgroup cg (clone into the cgroup, so nothing it does
// happens outside it).
func (p *population) start(tb testing.TB, cg int, cmd *exec.Cmd) {
	tb.Helper()
	fd, err := unix.Open(p.cgroups[cg], unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer unix.Close(fd)
	var clone uintptr
	if cmd.SysProcAttr != nil {
		clone = cmd.SysProcAttr.Cloneflags
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Setpgid: true, Cloneflags: clone}
	if err := cmd.Start(); errors.Is(err, unix.ENOSYS) {
		// Only clone3 places a process in a cgroup as it starts; kernels before 5.7 and
		// qemu-user lack it.
		tb.Skipf("no clone3(CLONE_INTO_CGROUP) to start a process inside a cgroup: %v", err)
	} else if err != nil {
		tb.Fatal(err)
	}
	p.procs = append(p.procs, cmd)
}

// churn keeps starting short-lived processes in the first cgroup, so that processes
// exit while the sources scan.
func (p *population) churn(tb testing.TB) {
	p.churnWG.Add(1)
	go func() {
		defer p.churnWG.Done()
		for {
			select {
			case <-p.stopChurn:
				return
			default:
			}
			fd, err := unix.Open(p.cgroups[0], unix.O_DIRECTORY|unix.O_RDONLY, 0)
			if err != nil {
				return
			}
			cmd := exec.Command("sleep", "0.00"+strconv.Itoa(1+len(p.procs)%9))
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
			if cmd.Start() == nil {
				_ = cmd.Wait()
			}
			unix.Close(fd)
		}
	}()
}

// processes counts the population's processes, children included.
func (p *population) processes(tb testing.TB) int {
	n := 0
	for _, cg := range p.cgroups {
		b, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
		if err != nil {
			tb.Fatal(err)
		}
		for _, c := range b {
			if c == '\n' {
				n++
			}
		}
	}
	return n
}
