// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/uring"
)

// adversary holds NR1 files the ways a CG written to get more than it was given might,
// to hide what it holds or to make measuring it costly. What it holds is counted in its
// report line, so a test knows what the agent should see.
type adversary struct {
	// dupQueues dup()s one queue handle so many times: many fds, one queue.
	dupQueues int
	// tinyMaps maps so many single pages of the compute DMA file, every other page from
	// tinyBaseMB, so that no two merge: many mappings, each page held.
	tinyMaps   int
	tinyBaseMB int64
	// inflightQueues opens so many queue handles, sends them over a unix socket and
	// closes its own fds: the handles are held only in flight.
	inflightQueues int
	// sendTo is a unix datagram socket's path (a neighbour's) the in-flight handles are
	// sent to, instead of a socket pair of its own.
	sendTo string
	// bindSocket binds a unix datagram socket at this path and never reads it.
	bindSocket string
	// pathOnlyQueues opens so many O_PATH fds on the queue device: names, not handles.
	pathOnlyQueues int
	// ringQueues opens so many queue handles, registers them with an io_uring and closes
	// its own fds: the ring alone holds them.
	ringQueues int
	// copies sends each in-flight handle, and registers each ring handle, that many
	// times: copies of one open file, padding what a scan reads.
	copies int
	// ringSlots makes an io_uring with so many empty slots in its file table: past
	// what a scan reads of one, what the ring holds is not known, by the CG's own doing.
	ringSlots int
	// blockedQueues opens so many queue handles, has a thread block reading each and
	// closes its fds under the reads: the kernel alone holds them, for the reads. The
	// simulated queue (tun's device) blocks a read once attached to an interface, which
	// needs CAP_NET_ADMIN; a real queue's read blocks until the NR1 answers.
	blockedQueues int
	// nullFDs opens /dev/null and dup()s it to so many fds: ordinary descriptors,
	// nothing of the NR1's, that make a process's table costly to walk. The dups are
	// inherited by --fork workers, each holding as many.
	nullFDs int

	// parkQueues opens so many queue handles, sends them into a socket pair and hands
	// the pair's receiving end to the keeper at parkWith: parked with a container of its
	// pod that outlives it.
	parkQueues int
	parkWith   string
	// keepSockets binds a unix datagram socket at this path and keeps every fd sent there.
	keepSockets string
	keeping     int
	keptMu      sync.Mutex
	kept        []int

	fds      []int
	sockets  [2]int
	held     bool
	mappings [][]byte
}

func (a *adversary) any() bool {
	return a.dupQueues > 0 || a.tinyMaps > 0 || a.inflightQueues > 0 || a.pathOnlyQueues > 0 || a.ringQueues > 0 || a.ringSlots > 0 || a.bindSocket != "" ||
		a.blockedQueues > 0 || a.nullFDs > 0 || a.parkQueues > 0 || a.keepSockets != ""
}

// hold takes everything asked, reporting it to out.
func (a *adversary) hold(out io.Writer, queuePath, computePath string) error {
	if a.dupQueues > 0 {
		if err := raiseFdLimit(); err != nil {
			return err
		}
		fd, err := unix.Open(queuePath, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening %s: %w", queuePath, err)
		}
		a.fds = append(a.fds, fd)
		for range a.dupQueues {
			d, err := unix.Dup(fd)
			if err != nil {
				return fmt.Errorf("dup of a queue handle: %w", err)
			}
			a.fds = append(a.fds, d)
		}
	}
	if a.nullFDs > 0 {
		if err := a.floodNull(); err != nil {
			return err
		}
	}
	if a.tinyMaps > 0 {
		f, err := os.OpenFile(computePath, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("opening %s: %w", computePath, err)
		}
		page := int64(os.Getpagesize())
		for i := range int64(a.tinyMaps) {
			m, err := unix.Mmap(int(f.Fd()), a.tinyBaseMB*mb+2*i*page, int(page), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				_ = f.Close()
				return fmt.Errorf("tiny mapping %d of %s: %w", i, computePath, err)
			}
			// Not touched: mapping is holding, and a page written is memory the device
			// (or a simulated one on tmpfs) must find.
			a.mappings = append(a.mappings, m)
		}
		_ = f.Close() // the mappings keep the file
	}
	if a.bindSocket != "" {
		if err := a.bind(); err != nil {
			return err
		}
	}
	if a.keepSockets != "" {
		if err := a.keep(); err != nil {
			return err
		}
	}
	if a.parkQueues > 0 {
		if err := a.park(out, queuePath); err != nil {
			return err
		}
	}
	if a.inflightQueues > 0 {
		if err := a.sendInFlight(queuePath); err != nil {
			return err
		}
	}
	if a.ringQueues > 0 {
		if err := a.register(queuePath); err != nil {
			return err
		}
	}
	if a.ringSlots > 0 {
		if err := a.emptyRing(); err != nil {
			return err
		}
	}
	for range a.blockedQueues {
		if err := blockOn(queuePath); err != nil {
			return err
		}
	}
	for range a.pathOnlyQueues {
		fd, err := unix.Open(queuePath, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening %s with O_PATH: %w", queuePath, err)
		}
		a.fds = append(a.fds, fd)
	}
	fmt.Fprintf(out, "adversary dup_queues=%d tiny_maps=%d inflight_queues=%d path_only_queues=%d ring_queues=%d copies=%d ring_slots=%d blocked_queues=%d null_fds=%d parked_queues=%d\n",
		a.dupQueues, a.tinyMaps, a.inflightQueues, a.pathOnlyQueues, a.ringQueues, max(a.copies, 1), a.ringSlots, a.blockedQueues, a.nullFDs, a.parkQueues)
	return nil
}

// blockOn opens a queue handle, has a thread of its own block reading it, and closes
// the fd once the read is under way: the read holds the queue, with no fd on it.
func blockOn(queuePath string) error {
	fd, err := unix.Open(queuePath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", queuePath, err)
	}
	// The simulated queue is tun's device: its read blocks once it is an interface's.
	if st, err := os.Stat("/proc/self/fd/" + strconv.Itoa(fd)); err == nil && st.Sys().(*syscall.Stat_t).Rdev == unix.Mkdev(10, 200) {
		ifr, err := unix.NewIfreq("nr1b%d") // the kernel numbers it
		if err != nil {
			return fmt.Errorf("an interface's name: %w", err)
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return fmt.Errorf("attaching the simulated queue to an interface (CAP_NET_ADMIN): %w", err)
		}
	}
	reading := make(chan int)
	go func() {
		runtime.LockOSThread() // the read keeps this thread: never given back
		// A signal the process gets may land on this thread and end the read, and with
		// it the holding: the thread takes none.
		blockSignals()
		reading <- unix.Gettid()
		var b [1 << 16]byte
		_, _ = unix.Read(fd, b[:])
	}()
	tid := <-reading
	// The read is under way once the thread sleeps in it (its syscall is read, on fd).
	want := fmt.Sprintf("%d 0x%x ", unix.SYS_READ, fd)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/syscall", tid))
		if err == nil && strings.HasPrefix(string(b), want) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the read of queue fd %d never blocked: %q", fd, b)
		}
	}
	if err := unix.Close(fd); err != nil {
		return fmt.Errorf("closing queue fd %d under its read: %w", fd, err)
	}
	return nil
}

// blockSignals blocks every signal on the calling thread, which must be locked to its
// goroutine and never run other Go code: the runtime's own preemption signal included.
func blockSignals() {
	var all unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^all.Val[i] // every bit, in the word size of the platform (32-bit too)
	}
	_ = unix.PthreadSigmask(unix.SIG_BLOCK, &all, nil)
}

// bind binds a datagram socket at bindSocket, which it never reads: what a neighbour
// sends there stays in flight.
func (a *adversary) bind() error {
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	a.fds = append(a.fds, s)
	_ = os.Remove(a.bindSocket) // one left by an earlier run
	if err := unix.Bind(s, &unix.SockaddrUnix{Name: a.bindSocket}); err != nil {
		return fmt.Errorf("binding %s: %w", a.bindSocket, err)
	}
	return nil
}

// sendInFlight opens the queue handles, sends them (SCM_RIGHTS, as many per message as
// the kernel takes) to the other end of a socket pair nobody reads, or to sendTo, and
// closes its own.
func (a *adversary) sendInFlight(queuePath string) error {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket pair: %w", err)
	}
	a.sockets, a.held = sp, true
	var to unix.Sockaddr
	if a.sendTo != "" {
		to = &unix.SockaddrUnix{Name: a.sendTo}
	}
	const perMessage = 250 // SCM_MAX_FD is 253
	var fds, copies []int
	defer func() { closeAll(fds) }()
	for range a.inflightQueues {
		fd, err := unix.Open(queuePath, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening %s: %w", queuePath, err)
		}
		fds = append(fds, fd)
		copies = append(copies, slices.Repeat([]int{fd}, max(a.copies, 1))...)
	}
	for chunk := range slices.Chunk(copies, perMessage) {
		if err := sendWhenBound(sp[0], unix.UnixRights(chunk...), to); err != nil {
			return fmt.Errorf("sending %d queue handles: %w", len(chunk), err)
		}
	}
	return nil
}

// neighbourWait is how long a send to a neighbour's socket waits for the neighbour to
// bind it: pods started together start in any order.
const neighbourWait = 2 * time.Minute

// sendWhenBound sends one message carrying rights to to (nil: the socket's peer),
// waiting for a neighbour's socket not bound yet.
func sendWhenBound(s int, rights []byte, to unix.Sockaddr) error {
	deadline := time.Now().Add(neighbourWait)
	for {
		err := unix.Sendmsg(s, []byte{0}, rights, to, 0)
		if err == nil {
			return nil
		}
		if to == nil || (!errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ECONNREFUSED)) || time.Now().After(deadline) {
			return fmt.Errorf("sendmsg: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// emptyRing makes an io_uring whose file table has ringSlots empty slots, kept until
// release. The kernel takes a table no larger than the fd limit.
func (a *adversary) emptyRing() error {
	if err := raiseFdLimit(); err != nil {
		return err
	}
	ring, err := uring.New()
	if err != nil {
		return err
	}
	a.fds = append(a.fds, ring)
	if err := uring.Register(ring, slices.Repeat([]int32{-1}, a.ringSlots)); err != nil {
		return fmt.Errorf("an io_uring of %d empty slots: %w", a.ringSlots, err)
	}
	return nil
}

// register opens the queue handles, registers them with an io_uring and closes its own
// fds. The ring's fd is kept until release.
func (a *adversary) register(queuePath string) error {
	ring, err := uring.New()
	if err != nil {
		return err
	}
	a.fds = append(a.fds, ring)
	fds := make([]int32, 0, a.ringQueues)
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(int(fd))
		}
	}()
	for range a.ringQueues {
		fd, err := unix.Open(queuePath, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening %s: %w", queuePath, err)
		}
		fds = append(fds, int32(fd)) //nolint:gosec // an fd fits
	}
	var slots []int32
	for _, fd := range fds {
		slots = append(slots, slices.Repeat([]int32{fd}, max(a.copies, 1))...)
	}
	return uring.Register(ring, slots)
}

// release lets go of everything.
func (a *adversary) release() error {
	var errs []error
	closeAll(a.fds)
	if a.keepSockets != "" {
		_ = unix.Shutdown(a.keeping, unix.SHUT_RDWR) // ends the keeper's receiving
		_ = unix.Close(a.keeping)
		closeAll(a.keptFDs())
	}
	for _, m := range a.mappings {
		errs = append(errs, unix.Munmap(m))
	}
	if a.held {
		errs = append(errs, unix.Close(a.sockets[0]), unix.Close(a.sockets[1]))
	}
	return errors.Join(errs...)
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// floodNull opens /dev/null once and dups it until nullFDs fds name it. Closed by
// release, as every fd the adversary holds.
func (a *adversary) floodNull() error {
	if err := raiseFdLimit(); err != nil {
		return err
	}
	fd, err := unix.Open("/dev/null", unix.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("opening /dev/null: %w", err)
	}
	a.fds = append(a.fds, fd)
	for range a.nullFDs - 1 {
		d, err := unix.Dup(fd)
		if err != nil {
			return fmt.Errorf("dup of /dev/null, %d fds held: %w", len(a.fds), err)
		}
		a.fds = append(a.fds, d)
	}
	return nil
}

// raiseFdLimit takes the soft fd limit to the hard one: raising the hard limit needs
// CAP_SYS_RESOURCE, which a CG need not have.
func raiseFdLimit() error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("fd limit: %w", err)
	}
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raising the fd limit: %w", err)
	}
	return nil
}
