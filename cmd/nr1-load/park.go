// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// park opens parkQueues queue handles, sends them into a socket pair of its own and
// hands the pair's receiving end to the keeper bound at parkWith (a container of its pod
// that keeps what it is given), closing everything of its own: once this container has
// exited, the queues are held in flight in a socket a live container holds, sent by a
// cgroup that is gone. They are still the pod's.
func (a *adversary) park(out io.Writer, queuePath string) error {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket pair: %w", err)
	}
	defer closeAll(sp[:])
	fds := make([]int, 0, a.parkQueues)
	defer func() { closeAll(fds) }()
	for range a.parkQueues {
		fd, err := unix.Open(queuePath, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EDQUOT) {
			// Said as any open refused past a booking is, for a test to find.
			fmt.Fprintf(out, "%s refused: opening parked queue %d of %s: %v\n", time.Now().UTC().Format(time.RFC3339Nano), len(fds)+1, queuePath, err)
			return fmt.Errorf("opening %s: %w", queuePath, err)
		}
		if err != nil {
			return fmt.Errorf("opening %s: %w", queuePath, err)
		}
		fds = append(fds, fd)
	}
	if err := unix.Sendmsg(sp[0], []byte{0}, unix.UnixRights(fds...), nil, 0); err != nil {
		return fmt.Errorf("sending %d queue handles into a socket pair: %w", len(fds), err)
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(s)
	if err := sendWhenBound(s, unix.UnixRights(sp[1]), &unix.SockaddrUnix{Name: a.parkWith}); err != nil {
		return fmt.Errorf("handing the socket holding %d queues to %s: %w", len(fds), a.parkWith, err)
	}
	return nil
}

// keep binds a datagram socket at keepSockets and, until released, receives every fd
// sent there and keeps it open, never reading it: a keeper of what a container of its pod
// parks with it.
func (a *adversary) keep() error {
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	_ = os.Remove(a.keepSockets) // one left by an earlier run of the container
	if err := unix.Bind(s, &unix.SockaddrUnix{Name: a.keepSockets}); err != nil {
		_ = unix.Close(s)
		return fmt.Errorf("binding %s: %w", a.keepSockets, err)
	}
	a.keeping = s
	go func() {
		oob := make([]byte, unix.CmsgSpace(253*4))
		for {
			_, oobn, _, _, err := unix.Recvmsg(s, make([]byte, 1), oob, unix.MSG_CMSG_CLOEXEC)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return // released
			}
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				continue
			}
			for _, m := range msgs {
				if fds, err := unix.ParseUnixRights(&m); err == nil {
					a.keptMu.Lock()
					a.kept = append(a.kept, fds...)
					a.keptMu.Unlock()
				}
			}
		}
	}()
	return nil
}

// keptFDs are the fds the keeper received so far.
func (a *adversary) keptFDs() []int {
	a.keptMu.Lock()
	defer a.keptMu.Unlock()
	return slices.Clone(a.kept)
}
