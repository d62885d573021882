// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// socketCommand runs an opener's command on unix sockets: what a pod does to move files
// into flight.
func socketCommand(f []string) (int, error) {
	arg := func(i int) int { n, _ := strconv.Atoi(f[i]); return n }
	rights := func(i int) []byte {
		if arg(i) < 0 {
			return nil
		}
		return unix.UnixRights(arg(i))
	}
	switch f[0] {
	case "dgram": // an unbound datagram socket
		return unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	case "bind": // bind PATH: a datagram socket bound there, never read
		s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			err = unix.Bind(s, &unix.SockaddrUnix{Name: f[1]})
		}
		return s, err
	case "sendto": // sendto SOCK PATH FD: one message to PATH, carrying FD unless -1
		return 0, unix.Sendmsg(arg(1), []byte{0}, rights(3), &unix.SockaddrUnix{Name: f[2]}, 0)
	case "send": // send SOCK FD: one message on a connected socket, carrying FD unless -1
		return 0, unix.Sendmsg(arg(1), []byte{0}, rights(2), nil, 0)
	case "listen": // listen PATH: a stream socket listening there
		s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			err = unix.Bind(s, &unix.SockaddrUnix{Name: f[1]})
		}
		if err == nil {
			err = unix.Listen(s, 8)
		}
		return s, err
	case "connect": // connect PATH: a stream socket connected there, never read
		s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			err = unix.Connect(s, &unix.SockaddrUnix{Name: f[1]})
		}
		return s, err
	case "accept": // accept FD
		s, _, err := unix.Accept4(arg(1), unix.SOCK_CLOEXEC)
		return s, err
	case "passcred": // passcred SOCK: the socket asks for its senders' credentials
		return 0, unix.SetsockoptInt(arg(1), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	case "setrlimit":
		return 0, unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 1 << 19, Max: 1 << 19})
	case "pair": // a datagram socket pair, as S0<<16 | S1
		sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		return sp[0]<<16 | sp[1], err
	case "accept32", "socketcall-accept": // the accept of FD as a 32-bit syscall
		return compatAccept(f[0], arg(1))
	case "sendmsg32", "sendmmsg32", "socketcall-sendmsg": // send SOCK FD as a 32-bit syscall
		return 0, compatSend(f[0], arg(1), arg(2))
	}
	return 0, unix.EINVAL
}

// flightFixture is pods' cgroups, a file counted in handles as their queue, and the
// footprint's programs.
type flightFixture struct {
	*gateFixture
	fp    *Footprint
	queue string
	dir   string
}

func newFlightFixture(t *testing.T) *flightFixture {
	t.Helper()
	fp := loadOrSkip(t)
	dir := t.TempDir()
	f := &flightFixture{gateFixture: &gateFixture{t: t, root: v2CgroupOrSkip(t)}, fp: fp, queue: filepath.Join(dir, "queue"), dir: dir}
	if err := os.WriteFile(f.queue, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := fp.SetTargets(map[TargetKey]uint32{keyOf(t, f.queue): 1}); err != nil {
		t.Fatal(err)
	}
	return f
}

// cgroupID is the id of a cgroup directory.
func (f *gateFixture) cgroupID(dir string) uint64 {
	f.t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		f.t.Fatal(err)
	}
	return st.Ino
}

// flying is what one scan finds of the queue in flight, in the test's network namespace
// and those named (a socket is seen only from its own).
func (f *flightFixture) flying(netns ...string) []Flight {
	f.t.Helper()
	if err := f.fp.Files(func(*Record) error { return nil }); err != nil {
		f.t.Fatal(err)
	}
	netns = append([]string{"/proc/self/ns/net"}, netns...)
	var got []Flight
	if err := f.fp.InFlight(context.Background(), netns, func(r *Flight) error {
		if r.Target == 1 || r.Kind != KindInFlight {
			got = append(got, *r)
		}
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
	return got
}

// nsOf is the network namespace of an opener.
func nsOf(o *openerProc) string { return fmt.Sprintf("/proc/%d/ns/net", o.cmd.Process.Pid) }

// socketNS is the network namespace of the socket at fd, kept open for the test.
func (f *flightFixture) socketNS(fd int) string {
	f.t.Helper()
	ns, err := unix.IoctlRetInt(fd, unix.SIOCGSKNS)
	if err != nil {
		f.t.Fatalf("the namespace of socket %d: %v", fd, err)
	}
	f.t.Cleanup(func() { _ = unix.Close(ns) })
	return fmt.Sprintf("/proc/self/fd/%d", ns)
}

// sendQueues has the opener open n queues, send each with send (a command with %d for
// the fd) and close its own fds.
func (f *flightFixture) sendQueues(o *openerProc, n int, send string) {
	f.t.Helper()
	for range n {
		q := o.must("open " + f.queue)
		o.must(strings.ReplaceAll(send, "FD", strconv.Itoa(q)))
		o.must("close " + strconv.Itoa(q))
	}
}

// assertSentBy says every queue in flight counts for the sender's cgroup, n of them.
func (f *flightFixture) assertSentBy(got []Flight, sender uint64, n int) {
	f.t.Helper()
	if len(got) != n {
		f.t.Fatalf("%d records in flight %+v, want the %d queues sent", len(got), got, n)
	}
	for _, r := range got {
		if r.Kind != KindInFlight || r.CgroupId != sender {
			f.t.Errorf("in flight %+v: want a queue of the sender's cgroup %d", r, sender)
		}
	}
}

// pods starts a process in a container of each pod named, and gives its cgroup's id.
func (f *flightFixture) pods(names ...string) ([]*openerProc, []uint64) {
	f.t.Helper()
	var procs []*openerProc
	var ids []uint64
	for _, name := range names {
		_, cg := f.pod(name, -1, "ctr")
		procs = append(procs, f.opener(cg))
		ids = append(ids, f.cgroupID(cg))
	}
	return procs, ids
}

// A pod that sends queues to a neighbour's datagram socket, which never reads, and
// closes its own: the queues are the sender's, not the neighbour's.
func TestInFlightFilesCountForTheirSender(t *testing.T) {
	f := newFlightFixture(t)
	procs, ids := f.pods("victim", "sender")
	victim, sender := procs[0], procs[1]
	path := filepath.Join(f.dir, "victim.sock")
	victim.must("bind " + path)
	s := sender.must("dgram")
	f.sendQueues(sender, 3, "sendto "+strconv.Itoa(s)+" "+path+" FD")
	f.assertSentBy(f.flying(nsOf(victim)), ids[1], 3)
}

// The neighbour connects to the sender's listener, so that the socket the sender
// accepts was made by the neighbour's connect: still the sender's.
func TestInFlightFilesOnAnAcceptedSocketCountForItsAcceptor(t *testing.T) {
	sendOnAccepted(t, "accept", "send")
}

// sendOnAccepted has a sender accept, with its accept command, the connection a victim
// makes to its listener, and send 2 queues on it with its send command: they count for
// the sender.
func sendOnAccepted(t *testing.T, accept, send string) {
	f := newFlightFixture(t)
	procs, ids := f.pods("victim", "sender")
	victim, sender := procs[0], procs[1]
	path := filepath.Join(f.dir, "listener.sock")
	l := sender.must("listen " + path)
	victim.must("connect " + path)
	a := sender.must(accept + " " + strconv.Itoa(l))
	f.sendQueues(sender, 2, send+" "+strconv.Itoa(a)+" FD")
	f.assertSentBy(f.flying(nsOf(victim)), ids[1], 2)
}

// A sender making its accept and its sends as 32-bit syscalls, which no tracepoint sees,
// is the sender all the same, by each of the 32-bit doors.
func TestInFlightFilesSentWith32BitCallsCountForTheirSender(t *testing.T) {
	compatOrSkip(t)
	for _, tc := range []struct{ accept, send string }{
		{"accept32", "sendmsg32"},
		{"accept32", "sendmmsg32"},
		{"socketcall-accept", "socketcall-sendmsg"},
	} {
		t.Run(tc.accept+"+"+tc.send, func(t *testing.T) { sendOnAccepted(t, tc.accept, tc.send) })
	}
}

// A message that carries its sender's credentials names its sender, whoever sent through
// the socket since: a socket shared with a neighbour that sends last does not move what
// the first sent onto the neighbour.
func TestInFlightFilesWithCredentialsCountForTheProcessNamed(t *testing.T) {
	f := newFlightFixture(t)
	procs, ids := f.pods("victim", "sender", "third")
	victim, sender, third := procs[0], procs[1], procs[2]
	path := filepath.Join(f.dir, "victim.sock")
	v := victim.must("bind " + path)
	victim.must("passcred " + strconv.Itoa(v))
	s := sender.must("dgram")
	f.sendQueues(sender, 1, "sendto "+strconv.Itoa(s)+" "+path+" FD")
	// The third pod, given the sender's socket, sends a file of no target through it: the
	// socket's last sender is the third pod now.
	shared := third.must("steal " + strconv.Itoa(sender.cmd.Process.Pid) + " " + strconv.Itoa(s))
	null := third.must("open /dev/null")
	third.must("sendto " + strconv.Itoa(shared) + " " + path + " " + strconv.Itoa(null))
	f.assertSentBy(f.flying(nsOf(victim)), ids[1], 1)
}

// A container that sent queues into a socket of its own and exited leaves them in
// flight in a socket its pod still holds: they count for the dead container's cgroup,
// whose nearest ancestor is the pod, never for nobody.
func TestInFlightFilesOfAnExitedContainerNameItsPod(t *testing.T) {
	f := newFlightFixture(t)
	pod, ctr := f.pod("pod", -1, "ctr")
	ctrID := f.cgroupID(ctr)
	o := f.opener(ctr)
	pair := o.must("pair")
	s0, s1 := pair>>16, pair&0xffff
	f.sendQueues(o, 2, "send "+strconv.Itoa(s0)+" FD")
	// What the pod keeps: the receiving end, here held by the test.
	pidfd, err := unix.PidfdOpen(o.cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := unix.PidfdGetfd(pidfd, s1, 0)
	_ = unix.Close(pidfd)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(kept)
	_ = o.cmd.Process.Kill()
	_ = o.cmd.Wait()
	removed := false
	for range 500 {
		if err := os.Remove(ctr); err == nil {
			removed = true
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !removed {
		t.Fatalf("the container's cgroup %s was not removed", ctr)
	}
	got := f.flying(f.socketNS(kept))
	f.assertSentBy(got, ctrID, 2)
	for _, r := range got {
		if r.Up[0] != pod {
			t.Errorf("in flight %+v: want the pod's cgroup %d nearest above the container's", r, pod)
		}
	}
}
