// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/compat32"
)

// openInTaskWork opens path through io_uring on the opener's thread's way back to user
// space from an openat that returned -ENOSYS (a seccomp supervisor's answer), where the
// thread's registers are still those of an open under way: a read of a pipe linked to
// an openat of path, the pipe written while the thread waits on the supervisor. With
// compat, that openat is a 32-bit one (int $0x80). It returns the descriptor the
// io_uring open made. The caller's goroutine is locked to its thread.
func openInTaskWork(path string, compat bool) (int, error) {
	ring, err := newTaskRing()
	if err != nil {
		return -1, err
	}
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		return -1, fmt.Errorf("pipe: %w", err)
	}
	defer unix.Close(pipe[0])
	defer unix.Close(pipe[1])
	name, err := unix.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	var buf [1]byte
	const (
		opOpenat = 18
		opRead   = 22
		ioLink   = 1 << 2
	)
	ring.sqe(0, opRead, ioLink, int32(pipe[0]), uint64(uintptr(unsafe.Pointer(&buf[0]))), 1, 0)
	ring.sqe(1, opOpenat, 0, unix.AT_FDCWD, uint64(uintptr(unsafe.Pointer(name))), 0, unix.O_RDWR|unix.O_CLOEXEC)
	if err := ring.enter(2, 0); err != nil {
		return -1, fmt.Errorf("io_uring submit: %w", err)
	}
	notify, err := notifyOpenat(compat)
	if err != nil {
		return -1, err
	}
	defer unix.Close(notify)
	answered := make(chan error, 1)
	go func() { answered <- superviseENOSYS(notify, pipe[1]) }()
	cwd := unix.AT_FDCWD
	var opened error
	if compat {
		low, lerr := compat32.Low(len(path) + 1)
		if lerr != nil {
			return -1, lerr
		}
		copy(low, path)
		_, opened = compat32.Syscall(compat32.SysOpenat, uintptr(uint32(int32(cwd))), compat32.Addr(low), poisonFlags) // AT_FDCWD as the 32-bit kernel reads it
	} else {
		_, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(cwd), uintptr(unsafe.Pointer(name)), poisonFlags, 0, 0, 0)
		if errno != 0 {
			opened = errno
		}
	}
	if err := <-answered; err != nil {
		return -1, err
	}
	if !errors.Is(opened, unix.ENOSYS) {
		return -1, fmt.Errorf("the supervised openat: %w, want ENOSYS", opened)
	}
	if err := ring.enter(0, 2); err != nil {
		return -1, fmt.Errorf("io_uring wait: %w", err)
	}
	runtime.KeepAlive(name)
	runtime.KeepAlive(&buf)
	return ring.opened()
}

// poisonFlags mark the openat the seccomp filter hands to its supervisor: no other open
// of the opener asks for them.
const poisonFlags = unix.O_RDONLY | unix.O_NOCTTY | unix.O_NOFOLLOW | unix.O_DIRECTORY | unix.O_CLOEXEC

// notifyOpenat installs, on the calling thread, a seccomp filter that hands an openat
// with poisonFlags (a 32-bit one with compat) to a supervisor, and returns the
// supervisor's descriptor. The thread waits for the answer killably only once the
// supervisor has the call, so that the io_uring task work queued meanwhile runs on its
// way back, not before.
func notifyOpenat(compat bool) (int, error) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("no_new_privs: %w", err)
	}
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	arch, nr := uint32(unix.AUDIT_ARCH_X86_64), uint32(unix.SYS_OPENAT)
	if compat {
		arch, nr = unix.AUDIT_ARCH_I386, compat32.SysOpenat
	}
	filter := []unix.SockFilter{
		{Code: ld, K: 4}, // seccomp_data.arch
		{Code: jeq, K: arch, Jf: 5},
		{Code: ld, K: 0}, // seccomp_data.nr
		{Code: jeq, K: nr, Jf: 3},
		{Code: ld, K: 16 + 2*8}, // args[2], the flags (low half)
		{Code: jeq, K: poisonFlags, Jf: 1},
		{Code: ret, K: unix.SECCOMP_RET_USER_NOTIF},
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	fd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_NEW_LISTENER|unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return -1, fmt.Errorf("seccomp: %w", errno)
	}
	return int(fd), nil
}

// superviseENOSYS answers the one openat notify hands it with ENOSYS, having written to
// pipe first: the pipe's reader is then run as task work on the opener's thread.
func superviseENOSYS(notify, pipe int) error {
	// A call the filter never hands over leaves RECV blocked for ever: bounded.
	fds := []unix.PollFd{{Fd: int32(notify), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 10_000); err != nil || n == 0 {
		return fmt.Errorf("the supervised openat never reached its supervisor in 10 s (poll: %d): %w", n, err)
	}
	var req [0x50]byte // struct seccomp_notif
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(notify), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return fmt.Errorf("receiving the notification: %w", errno)
	}
	if _, err := unix.Write(pipe, []byte{1}); err != nil {
		return fmt.Errorf("writing the pipe: %w", err)
	}
	time.Sleep(50 * time.Millisecond) // the read's task work queued on the opener's thread
	var resp [0x18]byte               // struct seccomp_notif_resp
	copy(resp[0:8], req[0:8])         // id
	errno := -int32(unix.ENOSYS)
	binary.NativeEndian.PutUint32(resp[16:], uint32(errno))
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(notify), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp))); errno != 0 {
		return fmt.Errorf("answering the notification: %w", errno)
	}
	return nil
}

// taskRing is an io_uring of 2 entries, its rings mapped.
type taskRing struct {
	fd        int
	rings     []byte
	sqes      []byte
	sqTail    *uint32
	sqMask    uint32
	sqArray   uint32
	cqHead    *uint32
	cqTail    *uint32
	cqMask    uint32
	cqesStart uint32
}

func newTaskRing() (*taskRing, error) {
	var p [120]byte // struct io_uring_params
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 2, uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	u32 := func(off int) uint32 { return binary.NativeEndian.Uint32(p[off:]) }
	sqEntries, cqEntries := u32(0), u32(4)
	sqOff, cqOff := 40, 80
	const singleMmap = 1 << 0
	if u32(20)&singleMmap == 0 {
		_ = unix.Close(int(fd))
		return nil, errors.New("io_uring without IORING_FEAT_SINGLE_MMAP")
	}
	size := max(u32(sqOff+24)+sqEntries*4, u32(cqOff+20)+cqEntries*16)
	rings, err := unix.Mmap(int(fd), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		_ = unix.Close(int(fd))
		return nil, fmt.Errorf("mapping the rings: %w", err)
	}
	sqes, err := unix.Mmap(int(fd), 0x10000000, int(sqEntries)*64, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		_ = unix.Close(int(fd))
		return nil, fmt.Errorf("mapping the entries: %w", err)
	}
	at := func(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&rings[off])) }
	return &taskRing{
		fd: int(fd), rings: rings, sqes: sqes,
		sqTail: at(u32(sqOff + 4)), sqMask: *at(u32(sqOff + 8)), sqArray: u32(sqOff + 24),
		cqHead: at(u32(cqOff)), cqTail: at(u32(cqOff + 4)), cqMask: *at(u32(cqOff + 8)), cqesStart: u32(cqOff + 20),
	}, nil
}

// sqe fills entry i and queues it.
func (r *taskRing) sqe(i int, op, flags uint8, fd int32, addr uint64, length, opFlags uint32) {
	e := r.sqes[i*64 : (i+1)*64]
	clear(e)
	e[0], e[1] = op, flags
	binary.NativeEndian.PutUint32(e[4:], uint32(fd))
	binary.NativeEndian.PutUint64(e[16:], addr)
	binary.NativeEndian.PutUint32(e[24:], length)
	binary.NativeEndian.PutUint32(e[28:], opFlags)
	binary.NativeEndian.PutUint64(e[32:], uint64(i))
	tail := atomic.LoadUint32(r.sqTail)
	binary.NativeEndian.PutUint32(r.rings[r.sqArray+(tail&r.sqMask)*4:], uint32(i))
	atomic.StoreUint32(r.sqTail, tail+1)
}

func (r *taskRing) enter(submit, wait uint32) error {
	const getEvents = 1 << 0
	flags := uintptr(0)
	if wait > 0 {
		flags = getEvents
	}
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(submit), uintptr(wait), flags, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// opened returns the result of entry 1, the openat.
func (r *taskRing) opened() (int, error) {
	head, tail := atomic.LoadUint32(r.cqHead), atomic.LoadUint32(r.cqTail)
	for ; head != tail; head++ {
		c := r.rings[r.cqesStart+(head&r.cqMask)*16:]
		if binary.NativeEndian.Uint64(c) != 1 {
			continue
		}
		res := int32(binary.NativeEndian.Uint32(c[8:]))
		if res < 0 {
			return -1, fmt.Errorf("io_uring openat: %w", unix.Errno(-res))
		}
		return int(res), nil
	}
	return -1, fmt.Errorf("io_uring: no completion of the openat in %d", tail-atomic.LoadUint32(r.cqHead))
}
