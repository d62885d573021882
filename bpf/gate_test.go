// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/compat32"
	"github.com/neureality-sdk/nr1-agent/internal/uring"
)

// The gate's tests run their pods' processes as openers: this test binary, started
// again inside a cgroup, doing what it is told on stdin.
func TestMain(m *testing.M) {
	if os.Getenv("NR1_GATE_OPENER") == "1" {
		opener()
		return
	}
	os.Exit(m.Run())
}

// opener answers each command with "ok N" or "err ERRNO".
func opener() {
	// One thread runs every command: what the gate links, it links by thread.
	runtime.LockOSThread()
	in := bufio.NewScanner(os.Stdin)
	var child *exec.Cmd
	for in.Scan() {
		f := strings.Fields(in.Text())
		arg := func(i int) int { n, _ := strconv.Atoi(f[i]); return n }
		var n int
		var err error
		switch f[0] {
		case "open": // close-on-exec, so that a forked child holds only what it is given
			n, err = unix.Open(f[1], unix.O_RDWR|unix.O_CLOEXEC, 0)
		case "openkeep": // kept across exec
			n, err = unix.Open(f[1], unix.O_RDWR, 0)
		case "exec": // becomes sleep, answering nothing
			sleep, lerr := exec.LookPath("sleep")
			if lerr == nil {
				lerr = syscall.Exec(sleep, []string{"sleep", "3600"}, os.Environ())
			}
			err = lerr
		case "opath":
			n, err = unix.Open(f[1], unix.O_PATH|unix.O_CLOEXEC, 0)
		case "access":
			err = unix.Access(f[1], unix.R_OK|unix.W_OK)
		case "close":
			err = unix.Close(arg(1))
		case "dup":
			n, err = unix.FcntlInt(uintptr(arg(1)), unix.F_DUPFD_CLOEXEC, 0)
		case "dupflood": // dupflood FD K: K dups of FD, every one of them kept
			for range arg(2) {
				if n, err = unix.FcntlInt(uintptr(arg(1)), unix.F_DUPFD_CLOEXEC, 0); err != nil {
					break
				}
			}
		case "dup2":
			n, err = arg(2), unix.Dup2(arg(1), arg(2))
		case "fork": // a child that is given the fds named (as 3, 4, ...) and waits
			child = exec.Command("sleep", "3600")
			for i := 1; i < len(f); i++ {
				child.ExtraFiles = append(child.ExtraFiles, os.NewFile(uintptr(arg(i)), "inherited"))
			}
			err = child.Start()
		case "kill": // the child ends
			_ = child.Process.Kill()
			_ = child.Wait()
		case "setuid": // the opener goes on as uid N
			err = syscall.Setresuid(arg(1), arg(1), arg(1))
		case "touch": // utimensat(PATH, NULL): a write permission asked, nothing opened
			err = unix.UtimesNanoAt(unix.AT_FDCWD, f[1], nil, 0)
		case "steal": // steal PID FD: a copy of another process's fd (pidfd_getfd)
			var pidfd int
			if pidfd, err = unix.PidfdOpen(arg(1), 0); err == nil {
				n, err = unix.PidfdGetfd(pidfd, arg(2), 0)
				_ = unix.Close(pidfd)
			}
		case "taskwork": // taskwork PATH: an io_uring open of PATH on the way back from an open returning ENOSYS
			n, err = openInTaskWork(f[1], false)
		case "taskwork32": // the same on the way back from a 32-bit open returning ENOSYS
			if err = compat32.Available(); err == nil {
				n, err = openInTaskWork(f[1], true)
			}
		case "access32": // access32 PATH: a 32-bit access(PATH, R_OK|W_OK)
			if err = compat32.Available(); err == nil {
				var low []byte
				if low, err = compat32.Low(len(f[1]) + 1); err == nil {
					copy(low, f[1])
					_, err = compat32.Syscall(compat32.SysAccess, compat32.Addr(low), unix.R_OK|unix.W_OK)
				}
			}
		case "open32": // open32 PATH: a 32-bit openat of PATH
			if err = compat32.Available(); err == nil {
				var low []byte
				if low, err = compat32.Low(len(f[1]) + 1); err == nil {
					copy(low, f[1])
					var r uintptr
					r, err = compat32.Syscall(compat32.SysOpenat, uintptr(uint32(0xffffff9c)), compat32.Addr(low), unix.O_RDWR|unix.O_CLOEXEC) // AT_FDCWD
					n = int(r)
				}
			}
		case "ptrace": // a ptrace call that attaches nothing (the parent is not traced)
			_, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_PEEKUSR, uintptr(os.Getppid()), 0, 0, 0, 0)
			err = errno
		case "ptrace32": // the same, as a 32-bit syscall, which no tracepoint sees
			if err = compat32.Available(); err == nil {
				_, err = compat32.Syscall(compat32.SysPtrace, unix.PTRACE_PEEKUSR, uintptr(os.Getppid()), 0, 0)
			}
		case "blockread": // blockread FD: a thread reads FD, blocking; then FD is closed under it
			err = blockRead(arg(1))
		case "uringread": // uringread FD: a read of FD pending in an io_uring, then FD closed; the ring's fd
			if n, err = uring.ReadPending(arg(1), pending[:]); err == nil {
				err = unix.Close(arg(1))
			}
		case "race": // race PATH K: K threads open at once; N of them got one
			n = race(f[1], arg(2))
		case "exit":
			os.Exit(0)
		default:
			n, err = socketCommand(f)
		}
		if err != nil {
			errno := syscall.EIO // an error with no errno
			errors.As(err, &errno)
			fmt.Printf("err %d\n", errno)
			continue
		}
		fmt.Printf("ok %d\n", n)
	}
}

// pending is where an opener's io_uring reads: alive as long as the opener.
var pending [1]byte

// blockRead starts a thread blocked reading fd, then closes fd: the read keeps the
// description, which no fd holds any longer, until it returns.
func blockRead(fd int) error {
	go func() {
		runtime.LockOSThread() // the read blocks a thread of its own
		// A signal the opener gets must not land here and end the read early.
		var all unix.Sigset_t
		for i := range all.Val {
			all.Val[i] = ^uint64(0)
		}
		_ = unix.PthreadSigmask(unix.SIG_BLOCK, &all, nil)
		var b [1]byte
		_, _ = unix.Read(fd, b[:])
	}()
	// The read is under way once the thread sleeps in it: the opener's threads are few.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			if b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/syscall"); err == nil && strings.HasPrefix(string(b), strconv.Itoa(unix.SYS_READ)+" 0x"+strconv.FormatInt(int64(fd), 16)+" ") {
				return unix.Close(fd)
			}
		}
	}
	return errors.New("no thread blocked reading the fd")
}

func race(path string, k int) int {
	var ready, start, done sync.WaitGroup
	var mu sync.Mutex
	got := 0
	ready.Add(k)
	start.Add(1)
	done.Add(k)
	for range k {
		go func() {
			runtime.LockOSThread() // each opener its own thread
			defer done.Done()
			ready.Done()
			start.Wait()
			if _, err := unix.Open(path, unix.O_RDWR, 0); err == nil {
				mu.Lock()
				got++
				mu.Unlock()
			}
		}()
	}
	ready.Wait()
	start.Done()
	done.Wait()
	return got
}

type openerProc struct {
	t   *testing.T
	cmd *exec.Cmd
	in  *bufio.Writer
	out *bufio.Scanner
}

// do sends a command and returns N of "ok N", or the errno of "err ERRNO".
func (o *openerProc) do(cmd string) (int, error) {
	o.t.Helper()
	fmt.Fprintln(o.in, cmd)
	if err := o.in.Flush(); err != nil {
		o.t.Fatalf("opener %q: %v", cmd, err)
	}
	if !o.out.Scan() {
		o.t.Fatalf("opener %q: no answer: %v", cmd, o.out.Err())
	}
	f := strings.Fields(o.out.Text())
	n, _ := strconv.Atoi(f[1])
	if f[0] == "err" {
		return -1, syscall.Errno(n)
	}
	return n, nil
}

func (o *openerProc) must(cmd string) int {
	o.t.Helper()
	n, err := o.do(cmd)
	if err != nil {
		o.t.Fatalf("opener %q: %v", cmd, err)
	}
	return n
}

type gateFixture struct {
	t              *testing.T
	root           string // the cgroup the gate is attached to, as kubepods
	pins           string
	queue, missing string // a gated device, and one whose driver is missing (ENXIO)
	gate           *Gate
}

func newGateFixture(t *testing.T, refuseUnknown bool) *gateFixture {
	t.Helper()
	f := &gateFixture{t: t, root: v2CgroupOrSkip(t), pins: filepath.Join(bpffs(t), "gate")}
	dev, err := os.MkdirTemp("/dev", "nr1-gate-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dev) })
	f.queue, f.missing = filepath.Join(dev, "queue"), filepath.Join(dev, "missing")
	// tun (10:200), as the simulator's queue; 240 is a major for local use, which no
	// driver on a test host registers.
	for path, d := range map[string]Device{f.queue: {Major: 10, Minor: 200}, f.missing: {Major: 240, Minor: 7}} {
		if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(d.Major, d.Minor))); err != nil {
			t.Fatal(err)
		}
	}
	opts := GateOptions{PinDir: f.pins, Devices: []Device{{Major: 10, Minor: 200}, {Major: 240, Minor: 7}}, RefuseUnknown: refuseUnknown, ByEntries: linkByEntries, Compat: compatWay}
	f.gate = f.load(opts)
	if err := f.gate.Attach(f.root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := RemoveGate(f.pins); err != nil {
			t.Error(err)
		}
	})
	return f
}

func (f *gateFixture) load(opts GateOptions) *Gate {
	g, err := LoadGate(opts)
	if errors.Is(err, ebpf.ErrNotSupported) {
		f.t.Skipf("kernel lacks what the gate needs: %v", err)
	}
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = g.Close() })
	return g
}

// pod makes a pod's cgroup under the gate (and children below it, by name), booking
// queues; it returns the pod's id and the deepest cgroup.
func (f *gateFixture) pod(name string, booked int64, children ...string) (uint64, string) {
	f.t.Helper()
	dir := filepath.Join(f.root, name)
	deepest := filepath.Join(append([]string{dir}, children...)...)
	if err := os.MkdirAll(deepest, 0o755); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		for d := deepest; d != f.root; d = filepath.Dir(d) {
			_ = os.Remove(d)
		}
	})
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		f.t.Fatal(err)
	}
	if booked >= 0 {
		if err := f.gate.Book(st.Ino, "", booked); err != nil {
			f.t.Fatal(err)
		}
	}
	return st.Ino, deepest
}

// opener starts an opener in cgroup.
func (f *gateFixture) opener(cgroup string) *openerProc {
	f.t.Helper()
	cg, err := os.Open(cgroup)
	if err != nil {
		f.t.Fatal(err)
	}
	defer cg.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "NR1_GATE_OPENER=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	in, err := cmd.StdinPipe()
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		f.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// The opener's forked children, left in its cgroup, gone before it is removed.
		_ = os.WriteFile(filepath.Join(cgroup, "cgroup.kill"), []byte("1"), 0o644)
		for range 500 {
			ev, err := os.ReadFile(filepath.Join(cgroup, "cgroup.events"))
			if err != nil || strings.Contains(string(ev), "populated 0") {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	return &openerProc{t: f.t, cmd: cmd, in: bufio.NewWriter(in), out: bufio.NewScanner(out)}
}

func (f *gateFixture) held(pod uint64) GateCount {
	f.t.Helper()
	c, ok := f.gate.Count(pod)
	if !ok {
		f.t.Fatalf("no budget for cgroup %d", pod)
	}
	return c
}

// A pod opens up to its booking and no further; what does not open a new description
// (dup, 5000 of them, fork, O_PATH, access) is not counted; a queue given back by close can be taken
// again at once, but only when the last reference is gone.
func TestGateHoldsAPodToItsBooking(t *testing.T) {
	f := newGateFixture(t, false)
	id, cg := f.pod("pod", 2)
	o := f.opener(cg)
	a := o.must("open " + f.queue)
	kept := o.must("open " + f.queue)
	if _, err := o.do("open " + f.queue); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("third open with two booked: %v, want EDQUOT", err)
	}
	if c := f.held(id); c.Held != 2 || c.Refused != 1 || c.Granted != 2 {
		t.Fatalf("count %+v, want 2 held, 1 refused, 2 granted", c)
	}
	o.must(fmt.Sprintf("dupflood %d 5000", kept))
	d := o.must(fmt.Sprintf("dup %d", a))
	o.must(fmt.Sprintf("fork %d", a))
	o.must("opath " + f.queue)
	o.must("access " + f.queue)
	if c := f.held(id); c.Held != 2 || c.Refused != 1 {
		t.Fatalf("after dup, fork, O_PATH and access: %+v, want 2 held and no new refusal", c)
	}
	o.must(fmt.Sprintf("close %d", d))
	if err := f.gate.Reclaim(); err != nil {
		t.Fatal(err)
	}
	if c := f.held(id); c.Held != 2 {
		t.Fatalf("closing a dup released a description still open: %+v", c)
	}
	o.must(fmt.Sprintf("close %d", a)) // the forked child still holds it
	if _, err := o.do("open " + f.queue); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("open while a child still holds the description: %v, want EDQUOT", err)
	}
	o.must("kill")
	// The count gives the child's description back at the next open past the booking,
	// or when user space reclaims.
	if err := f.gate.Reclaim(); err != nil {
		t.Fatal(err)
	}
	if c := f.held(id); c.Held != 1 || c.Released != 1 {
		t.Fatalf("after the child holding the last reference left: %+v, want 1 held, 1 released", c)
	}
	e := o.must("open " + f.queue)
	o.must(fmt.Sprintf("close %d", e))
	o.must("open " + f.queue) // a close followed at once by an open, at the booking
	if c := f.held(id); c.Held != 2 || c.Released != 2 {
		t.Fatalf("after close and open: %+v, want 2 held, 2 released", c)
	}
	if _, err := o.do("open " + f.queue); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("open past the booking after close and open: %v, want EDQUOT", err)
	}
}

// The measurement settles the count (what the kernel does not link to a description, an
// io_uring open, stays counted until then), and only a count that did not move since the
// measurement began: a description gone before the measurement, reclaimed after it,
// moves the count, and is not lowered twice.
func TestGateSettlesAQuietPodToTheMeasurement(t *testing.T) {
	f := newGateFixture(t, false)
	id, cg := f.pod("pod", 1)
	o := f.opener(cg)
	a := o.must("open " + f.queue)
	before := f.held(id)
	o.must(fmt.Sprintf("close %d", a))
	if err := f.gate.Reclaim(); err != nil {
		t.Fatal(err)
	}
	if f.gate.Settle(id, before.Moves, 0) {
		t.Fatal("Settle with a count that moved since did it")
	}
	if c := f.held(id); c.Held != 0 {
		t.Fatalf("a refused Settle changed the count: %+v", c)
	}
	if !f.gate.Settle(id, f.held(id).Moves, 1) {
		t.Fatal("Settle on a quiet pod did nothing")
	}
	if _, err := o.do("open " + f.queue); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("open after settling to the booking: %v, want EDQUOT", err)
	}
	if !f.gate.Settle(id, f.held(id).Moves, 0) {
		t.Fatal("Settle on a quiet pod did nothing")
	}
	o.must("open " + f.queue)
}

// A count too high for what the pod holds (a description no charge covers, gone) is
// healed by the next settle however often the pod is refused meanwhile: a refused open
// moves nothing, so a pool of workers hammering at its booking stays quiet for the
// measurement that finds it holding less.
func TestGateSettlesAPodRefusedMeanwhile(t *testing.T) {
	f := newGateFixture(t, false)
	id, cg := f.pod("pod", 1)
	o := f.opener(cg)
	if !f.gate.Settle(id, f.held(id).Moves, 1) { // what a description no charge covers leaves
		t.Fatal("Settle on a quiet pod did nothing")
	}
	before := f.held(id)
	for range 50 {
		if _, err := o.do("open " + f.queue); !errors.Is(err, unix.EDQUOT) {
			t.Fatalf("open with a count at the booking: %v, want EDQUOT", err)
		}
	}
	if c := f.held(id); c.Refused != before.Refused+50 || c.Moves != before.Moves || c.Held != 1 {
		t.Fatalf("after 50 refusals: %+v, want 50 more refused, and held and moves as before (%+v)", c, before)
	}
	if !f.gate.Settle(id, before.Moves, 0) {
		t.Fatal("a pod refused since its measurement began was not settled")
	}
	o.must("open " + f.queue)
}

// An open the gate let through but the driver then refused gives its queue back.
func TestGateGivesBackFailedOpens(t *testing.T) {
	f := newGateFixture(t, false)
	id, cg := f.pod("pod", 1)
	o := f.opener(cg)
	for range 3 {
		if _, err := o.do("open " + f.missing); !errors.Is(err, unix.ENXIO) && !errors.Is(err, unix.ENODEV) {
			t.Fatalf("open of a device with no driver: %v, want ENXIO", err)
		}
	}
	if c := f.held(id); c.Held != 0 || c.Released != 3 {
		t.Fatalf("after three failed opens: %+v, want none held, 3 released", c)
	}
	o.must("open " + f.queue)
}

// A process leaving with queues open (one of them in two slots) gives them back: its
// sibling may take them. The process is single-threaded: of a multi-threaded one, the
// threads' exits may race, each seeing the table still shared, and then the count stays
// high until the measurement settles it.
func TestGateReleasesWhatAnExitingProcessHeld(t *testing.T) {
	f := newGateFixture(t, false)
	id, cg := f.pod("pod", 2)
	first := f.opener(cg)
	a := first.must("open " + f.queue)
	b := first.must("open " + f.queue)
	first.must(fmt.Sprintf("fork %d %d %d", a, a, b))
	first.must(fmt.Sprintf("close %d", a))
	first.must(fmt.Sprintf("close %d", b))
	if c := f.held(id); c.Held != 2 {
		t.Fatalf("with the child holding both: %+v, want 2 held", c)
	}
	first.must("kill")
	sibling := f.opener(cg)
	sibling.must("open " + f.queue)
	sibling.must("open " + f.queue)
	if c := f.held(id); c.Held != 2 || c.Released != 2 {
		t.Fatalf("after the holder left and its sibling opened two: %+v, want 2 held, 2 released", c)
	}
	if _, err := sibling.do("open " + f.queue); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("open past the booking: %v, want EDQUOT", err)
	}
}

// An exec gives back what it closes (close-on-exec descriptions), and only that.
func TestGateReleasesWhatAnExecCloses(t *testing.T) {
	f := newGateFixture(t, false)
	id, cg := f.pod("pod", 2)
	o := f.opener(cg)
	o.must("open " + f.queue)
	o.must("openkeep " + f.queue)
	fmt.Fprintln(o.in, "exec")
	if err := o.in.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.held(id).Held != 1 && time.Now().Before(deadline) {
		if err := f.gate.Reclaim(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c := f.held(id); c.Held != 1 || c.Released != 1 {
		t.Fatalf("after an exec closing one of two: %+v, want 1 held, 1 released", c)
	}
	sibling := f.opener(cg)
	sibling.must("open " + f.queue)
	if _, err := sibling.do("open " + f.queue); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("open past the booking with the exec's kept description: %v, want EDQUOT", err)
	}
}

// A process in a cgroup nested below its pod counts against the pod.
func TestGateCountsAChildCgroupAgainstItsPod(t *testing.T) {
	f := newGateFixture(t, false)
	id, pod := f.pod("pod", 1, "a", "b", "c")
	f.opener(filepath.Join(f.root, "pod")).must("open " + f.queue)
	if _, err := f.opener(pod).do("open " + f.queue); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("open from a child cgroup past the pod's booking: %v, want EDQUOT", err)
	}
	if c := f.held(id); c.Held != 1 || c.Refused != 1 {
		t.Fatalf("count %+v", c)
	}
}

// A description given to another pod (pidfd_getfd, as SCM_RIGHTS) opens nothing: it
// stays counted against the pod that opened it until it is gone, erring on refusing
// that pod. Once a measurement finds it held elsewhere, the opener's count is settled
// without it, and its release pays what the opener is owed, not the count: the opener
// is never let past its booking by what it gave away.
func TestGateOwesAGivenDescriptionToNoCount(t *testing.T) {
	f := newGateFixture(t, false)
	a, acg := f.pod("a", 1)
	b, bcg := f.pod("b", 1)
	oa, ob := f.opener(acg), f.opener(bcg)
	given := oa.must("open " + f.queue)
	got := ob.must(fmt.Sprintf("steal %d %d", oa.cmd.Process.Pid, given))
	oa.must(fmt.Sprintf("close %d", given))
	if _, err := oa.do("open " + f.queue); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("open by the giver while the receiver holds its description: %v, want EDQUOT", err)
	}
	if c := f.held(b); c.Held != 0 || c.Granted != 0 {
		t.Fatalf("the receiver's count %+v: a given description opened something", c)
	}
	// The sample: gone descriptions reclaimed, then the giver measured holding none.
	if err := f.gate.Reclaim(); err != nil {
		t.Fatal(err)
	}
	if !f.gate.Settle(a, f.held(a).Moves, 0) {
		t.Fatal("Settle on a quiet pod did nothing")
	}
	oa.must("open " + f.queue) // holds 1 of 1
	ob.must(fmt.Sprintf("close %d", got))
	if _, err := oa.do("open " + f.queue); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("open past the booking once the receiver dropped what it was given: %v, want EDQUOT", err)
	}
	if err := f.gate.Reclaim(); err != nil {
		t.Fatal(err)
	}
	if c := f.held(a); c.Held != 1 || c.Released != 1 {
		t.Fatalf("the giver's count %+v, want 1 held (what it holds), 1 released (what it gave)", c)
	}
}

// A grant that no open's exit followed (here a write permission asked by utimensat of a
// user who does not own the device; a 32-bit syscall's open or io_uring's are others)
// stays counted: the thread's next open, failing, does not give it back.
func TestGateNeverGivesBackAGrantNoOpenFollowed(t *testing.T) {
	f := newGateFixture(t, false)
	// Another user may reach the device and write to it (mknod's mode met the umask).
	for path, mode := range map[string]os.FileMode{filepath.Dir(f.queue): 0o755, f.queue: 0o666} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	id, cg := f.pod("pod", 1)
	o := f.opener(cg)
	o.must("setuid 65534")
	o.must("touch " + f.queue)
	if c := f.held(id); c.Held != 1 || c.Granted != 1 {
		t.Fatalf("after a write permission asked by a user who does not own the device: %+v, want it counted", c)
	}
	if _, err := o.do("open " + filepath.Join(filepath.Dir(f.queue), "absent")); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("open of an absent file: %v, want ENOENT", err)
	}
	if c := f.held(id); c.Held != 1 || c.Released != 0 {
		t.Fatalf("a failed open gave back a grant that was not its own: %+v", c)
	}
	if _, err := o.do("open " + f.queue); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("open with the booking counted full: %v, want EDQUOT", err)
	}
}

// Of openers racing for a pod's last queue, exactly one gets it.
func TestGateGivesTheLastQueueToOneOpener(t *testing.T) {
	f := newGateFixture(t, false)
	for round := range 20 {
		id, cg := f.pod(fmt.Sprintf("pod%d", round), 3)
		o := f.opener(cg)
		o.must("open " + f.queue)
		o.must("open " + f.queue)
		if got := o.must("race " + f.queue + " 32"); got != 1 {
			t.Fatalf("round %d: %d of 32 racing openers got the last queue, want 1", round, got)
		}
		if c := f.held(id); c.Held != 3 || c.Refused != 31 {
			t.Fatalf("round %d: count %+v", round, c)
		}
	}
}

// Processes outside the gate's cgroup are never asked; a pod the gate has no budget for
// follows the policy.
func TestGateUnknownPodsFollowThePolicy(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("refuse=%v", refuse), func(t *testing.T) {
			f := newGateFixture(t, refuse)
			for range 3 { // the test itself is a host process
				fd, err := unix.Open(f.queue, unix.O_RDWR, 0)
				if err != nil {
					t.Fatalf("a host process's open: %v", err)
				}
				_ = unix.Close(fd)
			}
			_, cg := f.pod("unbooked", -1)
			_, err := f.opener(cg).do("open " + f.queue)
			allowed, refused, uerr := f.gate.Unknown()
			if uerr != nil {
				t.Fatal(uerr)
			}
			if refuse && (!errors.Is(err, unix.EPERM) || refused != 1 || allowed != 0) {
				t.Errorf("refuse: open %v, %d allowed, %d refused", err, allowed, refused)
			}
			if !refuse && (err != nil || allowed != 1 || refused != 0) {
				t.Errorf("allow: open %v, %d allowed, %d refused", err, allowed, refused)
			}
		})
	}
}

// The gate keeps refusing with the agent gone; a new agent takes over its counts; once
// removed, nothing is refused.
func TestGateOutlivesTheAgent(t *testing.T) {
	f := newGateFixture(t, false)
	id, cg := f.pod("pod", 1)
	o := f.opener(cg)
	o.must("open " + f.queue)
	if err := f.gate.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := o.do("open " + f.queue); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("with the agent gone: %v, want EDQUOT", err)
	}
	f.gate = f.load(GateOptions{PinDir: f.pins, Devices: []Device{{Major: 10, Minor: 200}}})
	if err := f.gate.Attach(f.root); err != nil {
		t.Fatal(err)
	}
	if c := f.held(id); c.Held != 1 || c.Refused != 1 || c.Booked != 1 {
		t.Fatalf("the restarted agent's count %+v, want the one held, refused and booked", c)
	}
	if _, err := o.do("open " + f.queue); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("after a restart: %v, want EDQUOT", err)
	}
	if n := devicePrograms(t, f.root); n != 1 {
		t.Fatalf("%d device programs on the cgroup after a restart, want 1", n)
	}
	if err := RemoveGate(f.pins); err != nil {
		t.Fatal(err)
	}
	o.must("open " + f.queue)
	if n := devicePrograms(t, f.root); n != 0 {
		t.Fatalf("%d device programs left after removal", n)
	}
}

// A gate loaded over an earlier version's pins detaches the links and removes the maps
// that version made and this one does not (the close tracepoints), and keeps its own.
func TestGateUnpinsWhatAnEarlierVersionLeft(t *testing.T) {
	f := newGateFixture(t, false)
	if err := f.gate.Close(); err != nil {
		t.Fatal(err)
	}
	links, maps := filepath.Join(f.pins, gateLinks), filepath.Join(f.pins, "maps")
	// An earlier version's close tracepoint and its map.
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.TracePoint, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	l, err := link.Tracepoint("syscalls", "sys_exit_close", prog, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Pin(filepath.Join(links, "syscalls-sys_exit_close")); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Pin(filepath.Join(maps, "closing")); err != nil {
		t.Fatal(err)
	}
	_ = m.Close()
	f.gate = f.load(GateOptions{PinDir: f.pins, Devices: []Device{{Major: 10, Minor: 200}}})
	for _, p := range []string{filepath.Join(links, "syscalls-sys_exit_close"), filepath.Join(maps, "closing")} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after loading over it: %v, want it gone", p, err)
		}
	}
	for _, p := range []string{filepath.Join(links, gateDeviceLink), filepath.Join(links, "syscalls-sys_exit_openat"), filepath.Join(maps, "charges")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the gate's own pin: %v", err)
		}
	}
}

// A pod booked by its UID has its budget in place as its cgroup is made, under either
// of the kubelet's cgroup drivers, before any of its processes runs; Book then finds
// that budget by the cgroup's id. A cgroup made deeper, where a pod's own processes may
// make one named like another pod's, takes nothing.
func TestGateBooksAPodByItsUIDBeforeItsCgroupIsMade(t *testing.T) {
	f := newGateFixture(t, true) // an open the booking did not reach would be refused
	for i, name := range []string{
		"pod%s",                           // cgroupfs driver, a guaranteed pod
		"burstable/pod%s",                 // cgroupfs driver
		"kubepods-besteffort-pod%s.slice", // systemd driver, '-' escaped
	} {
		uid := fmt.Sprintf("5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b1%d", i)
		dirUID := uid
		if strings.HasSuffix(name, ".slice") {
			dirUID = strings.ReplaceAll(uid, "-", "_")
		}
		if err := f.gate.BookUID(uid, 2); err != nil {
			t.Fatal(err)
		}
		id, cg := f.pod(fmt.Sprintf(name, dirUID), -1)
		o := f.opener(cg)
		o.must("open " + f.queue)
		o.must("open " + f.queue)
		if _, err := o.do("open " + f.queue); !errors.Is(err, unix.EDQUOT) {
			t.Fatalf("%s: third open with two booked by UID: %v, want EDQUOT", name, err)
		}
		if err := f.gate.Book(id, uid, 2); err != nil {
			t.Fatal(err)
		}
		if c := f.held(id); c.Held != 2 || c.Refused != 1 || c.Granted != 2 {
			t.Fatalf("%s: the cgroup's count %+v, want the UID's booking with its 2 held", name, c)
		}
		// The binding outlives the agent: a restarted one reads it from the pinned maps.
		restarted := f.load(GateOptions{PinDir: f.pins, Devices: []Device{{Major: 10, Minor: 200}}, RefuseUnknown: true})
		for who, g := range map[string]*Gate{"this agent": f.gate, "a restarted agent": restarted} {
			if got, ok := g.UIDOf(id); !ok || got != uid {
				t.Fatalf("%s: %s says the cgroup is bound to %q %v, want %s", name, who, got, ok, uid)
			}
		}
		_ = restarted.Close()
		if err := f.gate.Forget(id); err != nil {
			t.Fatal(err)
		}
		if len(f.gate.UIDs()) != 0 {
			t.Fatalf("%s: forgetting the pod left its UID booked: %v", name, f.gate.UIDs())
		}
	}
	// A pod's process names a cgroup below its container after a pod booked by UID.
	victim := "0d9e4b7a-2c1f-4e8b-9a3d-6f5e4c3b2a10"
	if err := f.gate.BookUID(victim, 1); err != nil {
		t.Fatal(err)
	}
	_, deep := f.pod("podattacker", -1, "container", "pod"+victim)
	if _, err := f.opener(deep).do("open " + f.queue); !errors.Is(err, unix.EPERM) {
		t.Fatalf("a cgroup named like a booked pod, made deeper: %v, want the unknown pod's EPERM", err)
	}
}

// A pod whose cgroup was made before it was booked by UID is bound by Book; a UID
// forgotten before its pod's cgroup was made leaves nothing booked.
func TestGateBindsACgroupMadeBeforeItsUIDWasBooked(t *testing.T) {
	f := newGateFixture(t, false)
	uid := "7a6b5c4d-3e2f-4a1b-8c9d-0e1f2a3b4c5d"
	id, cg := f.pod("pod"+uid, -1)
	o := f.opener(cg)
	o.must("open " + f.queue) // unknown: allowed, uncounted
	if err := f.gate.BookUID(uid, 1); err != nil {
		t.Fatal(err)
	}
	if err := f.gate.Book(id, uid, 1); err != nil {
		t.Fatal(err)
	}
	o.must("open " + f.queue)
	if _, err := o.do("open " + f.queue); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("past the booking: %v, want EDQUOT", err)
	}
	gone := "1b2c3d4e-5f6a-4b7c-8d9e-0f1a2b3c4d5e"
	if err := f.gate.BookUID(gone, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.gate.ForgetUID(gone); err != nil {
		t.Fatal(err)
	}
	_, cg2 := f.pod("pod"+gone, -1)
	f.opener(cg2).must("open " + f.queue) // unknown again: allowed
	if uids := f.gate.UIDs(); len(uids) != 1 || uids[0] != uid {
		t.Fatalf("UIDs %v, want only %s", uids, uid)
	}
	if err := f.gate.BookUID("../x", 1); err == nil {
		t.Fatal("a UID that is not one was booked")
	}
}

// On amd64 the gate links a grant to its open by the thread's registers: its self-test
// reads bpf's own number under way.
func TestGateLinksByRegisters(t *testing.T) {
	f := newGateFixture(t, false)
	if !f.gate.ByRegisters {
		t.Fatalf("the gate links by the opens' entry tracepoints on %s", runtime.GOARCH)
	}
}

// A grant made on a thread's way back to user space from an open that returned as if it
// were still under way (-ENOSYS, from a seccomp supervisor) is not linked to that open,
// which passed its exit already: the thread's next failed open gives nothing back, while
// the io_uring open that made the grant holds its queue.
func TestGateLinksNoGrantAfterAnOpenReturnedAsUnderWay(t *testing.T) {
	for _, c := range []struct {
		name, taskwork, open string
	}{{"native", "taskwork", "open"}, {"32-bit", "taskwork32", "open32"}} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "32-bit" {
				// Followed at the raw syscall exit, which reads the registers as the native
				// opens' exits do; the probes of the 32-bit entries read none.
				if err := compat32.Available(); err != nil {
					t.Skip(err)
				}
				compatWay = CompatByExit
				t.Cleanup(func() { compatWay = CompatByKernel })
			}
			f := newGateFixture(t, false)
			id, cg := f.pod("pod", 2)
			o := f.opener(cg)
			// Bounded: a supervised call the kernel never hands back would hang the run.
			stuck := time.AfterFunc(time.Minute, func() { _ = o.cmd.Process.Kill() })
			o.must(c.taskwork + " " + f.queue)
			stuck.Stop()
			if c := f.held(id); c.Held != 1 || c.Granted != 1 {
				t.Fatalf("after the io_uring open: %+v, want 1 held", c)
			}
			if _, err := o.do(c.open + " /nonexistent-nr1-gate"); !errors.Is(err, unix.ENOENT) {
				t.Fatalf("open of a missing file: %v, want ENOENT", err)
			}
			if c := f.held(id); c.Held != 1 || c.Released != 0 {
				t.Fatalf("a failed open gave back the grant made on the way back from another: %+v, want 1 held, none released", c)
			}
		})
	}
}

// A pod one of whose processes called ptrace, with which a tracer may write the
// registers of a thread it holds, has its grants counted, never linked: a close of what
// it opened is not given back before a settle. A 32-bit ptrace counts as a native one,
// whether probes of the 32-bit entries follow it or the raw syscall exit tracepoint.
func TestGateLinksNothingOfAPodCallingPtrace(t *testing.T) {
	for _, c := range []struct {
		name, call string
		byExit     bool
	}{{"ptrace", "ptrace", false}, {"ptrace32", "ptrace32", false}, {"ptrace32ByExit", "ptrace32", true}} {
		t.Run(c.name, func(t *testing.T) {
			call := c.call
			switch {
			case c.byExit:
				if err := compat32.Available(); err != nil {
					t.Skip(err)
				}
				compatWay = CompatByExit
				t.Cleanup(func() { compatWay = CompatByKernel })
			case call == "ptrace32":
				compatOrSkip(t)
				compatWay = CompatByProbes
				t.Cleanup(func() { compatWay = CompatByKernel })
			}
			f := newGateFixture(t, false)
			id, cg := f.pod(call, 2)
			o := f.opener(cg)
			a := o.must("open " + f.queue)
			o.must(fmt.Sprintf("close %d", a))
			if err := f.gate.Reclaim(); err != nil {
				t.Fatal(err)
			}
			if c := f.held(id); c.Held != 0 {
				t.Fatalf("before %s, an open then closed: %+v, want none held", call, c)
			}
			if _, err := o.do(call); err == nil {
				t.Fatalf("%s of a parent that is not traced succeeded", call)
			}
			a = o.must("open " + f.queue)
			o.must(fmt.Sprintf("close %d", a))
			if err := f.gate.Reclaim(); err != nil {
				t.Fatal(err)
			}
			if c := f.held(id); c.Held != 1 {
				t.Fatalf("after %s, an open then closed: %+v, want it still held until a settle", call, c)
			}
		})
	}
}

// linkByEntries has the fixtures' gates link grants by the opens' entry tracepoints.
var linkByEntries bool

// Linked by the opens' entry tracepoints (a kernel whose registers the self-test reads
// wrong), the gate passes the tests of what linking decides.
func TestGateLinkingByEntryTracepoints(t *testing.T) {
	linkByEntries = true
	t.Cleanup(func() { linkByEntries = false })
	t.Run("Told", func(t *testing.T) {
		if newGateFixture(t, false).gate.ByRegisters {
			t.Fatal("the gate links by registers when told to link by entries")
		}
	})
	for _, test := range []func(*testing.T){
		TestGateHoldsAPodToItsBooking,
		TestGateGivesBackFailedOpens,
		TestGateNeverGivesBackAGrantNoOpenFollowed,
		TestGateLinksNoGrantAfterAnOpenReturnedAsUnderWay,
		TestGateReleasesWhatAnExitingProcessHeld,
		TestGateReleasesWhatAnExecCloses,
		TestGateOwesAGivenDescriptionToNoCount,
		TestGateGivesTheLastQueueToOneOpener,
	} {
		name := strings.TrimPrefix(runtime.FuncForPC(reflect.ValueOf(test).Pointer()).Name(), "github.com/neureality-sdk/nr1-agent/bpf.TestGate")
		t.Run(name, test)
	}
}

// Workers that come and go within the booking are never refused: a description freed
// by a worker's exit or close leaves its address to the next open, which finds the old
// description's charge there while the count has room, so no walk gave it back. Round
// after round, the pod holds exactly what is open.
func TestGateNeverRefusesWorkersThatComeAndGo(t *testing.T) {
	f := newGateFixture(t, false)
	id, cg := f.pod("pool", 4)
	o := f.opener(cg)
	for round := range 150 {
		q, err := o.do("open " + f.queue)
		if err != nil {
			t.Fatalf("round %d: an open at the booking of a pod holding nothing: %v (count %+v)", round, err, f.held(id))
		}
		if round%2 == 0 { // a worker that holds the queue and exits
			o.must(fmt.Sprintf("fork %d", q))
			o.must(fmt.Sprintf("close %d", q))
			o.must("kill")
		} else {
			o.must(fmt.Sprintf("close %d", q))
		}
	}
	if err := f.gate.Reclaim(); err != nil {
		t.Fatal(err)
	}
	if c := f.held(id); c.Held != 0 || c.Refused != 0 || c.Granted != 150 {
		t.Errorf("count %+v, want 0 held, none refused, 150 granted", c)
	}
	for i := range 4 { // then the whole pool at once
		if _, err := o.do("open " + f.queue); err != nil {
			t.Fatalf("open %d of the 4 booked, after the rounds: %v (count %+v)", i+1, err, f.held(id))
		}
	}
}
