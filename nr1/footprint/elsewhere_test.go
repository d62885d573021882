// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// blockReader is a helper mode of the test binary (NR1_FP_BLOCKREADER=PATH): it opens
// PATH, the simulated queue (tun's device), attaches it to an interface of its own,
// which no packet reaches, has a thread read it, blocking, closes the fd under the read,
// says "ready" and waits: the read holds the description with no fd left, until the
// helper is killed.
func blockReader(path string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fd, err := unix.Open(path, unix.O_RDWR, 0)
	if err != nil {
		fail(err)
	}
	ifr, err := unix.NewIfreq(fmt.Sprintf("nr1r%d", os.Getpid()))
	if err != nil {
		fail(err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		fail(fmt.Errorf("TUNSETIFF: %w", err))
	}
	go func() {
		runtime.LockOSThread()
		var b [1500]byte
		_, _ = unix.Read(fd, b[:])
	}()
	prefix := strconv.Itoa(unix.SYS_READ) + " 0x" + strconv.FormatInt(int64(fd), 16) + " "
	for {
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			if b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/syscall"); err == nil && strings.HasPrefix(string(b), prefix) {
				_ = unix.Close(fd)
				fmt.Println("ready")
				select {}
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// A queue held by the kernel for a CG (a read blocked on it, its fd closed by another
// thread; an io_uring request pending is held alike) is in no fd table, ring or socket,
// yet held: the scan counts it for its opener's cgroup, until it is released. Without
// that, a queue a CG holds that way is invisible to every walk, and the budget gate is
// settled to what the walks found.
func TestAQueueTheKernelHoldsForACGCounts(t *testing.T) {
	p, _ := newCgroups(t, 2)
	b := newBPFOrSkip(t, p)
	// The opens' tracepoints, which remember each queue description with its opener.
	if _, err := b.WatchChanges(slog.New(slog.NewTextHandler(io.Discard, nil))); errors.Is(err, os.ErrNotExist) {
		t.Skipf("kernel lacks the syscall tracepoints: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "NR1_FP_BLOCKREADER="+p.sim.File("nr1_0_hv_queue"))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.start(t, 1, cmd)
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the blocked reader: %q, %v", line, err)
	}
	queues := func(s *Scan) (fds, elsewhere int) {
		for _, h := range s.Handles {
			if h.CgroupID != p.ids[1] || p.targets.At(h.Target).Resource != nr1.HypervisorQueue {
				continue
			}
			if h.FD < 0 {
				elsewhere++
			} else {
				fds++
			}
		}
		return fds, elsewhere
	}
	s, err := b.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if fds, elsewhere := queues(s); fds != 0 || elsewhere != 1 || s.Elsewhere != 1 {
		t.Errorf("a queue a blocked read holds: %d by fds, %d elsewhere (scan: %d); want 0 and 1", fds, elsewhere, s.Elsewhere)
	}
	_ = cmd.Process.Kill() // the read ends, the description is released
	_ = cmd.Wait()
	if s, err = b.Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fds, elsewhere := queues(s); fds != 0 || elsewhere != 0 {
		t.Errorf("once released: %d by fds, %d elsewhere; want none", fds, elsewhere)
	}
}
