// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/uring"
)

// Each adversary holds what it says, the way it says: one queue behind many fds, pages
// in many mappings, handles only in flight, names without handles.
func TestAdversaryHoldsWhatItSays(t *testing.T) {
	l := newLoad(t)
	rings := 5
	if ring, err := uring.New(); err != nil {
		// qemu-user does not emulate io_uring; a kernel may refuse it.
		t.Logf("io_uring is not available here (%v): the ring adversary is left out", err)
		rings = 0
	} else {
		unix.Close(ring)
	}
	a := &adversary{dupQueues: 300, tinyMaps: 100, tinyBaseMB: 1, inflightQueues: 260, pathOnlyQueues: 3, ringQueues: rings, ringSlots: min(rings, 1) * 1000, nullFDs: 2000}
	out := &strings.Builder{}
	if err := a.hold(out, l.queues.path, l.compute.path); err != nil {
		t.Fatal(err)
	}
	// 301 fds on the queue file (one open and its dups) and 3 O_PATH fds; the in-flight
	// and registered ones are not the process's fds any more.
	if n := openHandles(t, l.queues.path); n != 301+3 {
		t.Errorf("%d fds on the queue file, want 304", n)
	}
	if n := openHandles(t, "/dev/null"); n < 2000 {
		t.Errorf("%d fds on /dev/null, want at least the 2000 of the flood", n)
	}
	var pathOnly int
	for _, fd := range a.fds {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err == nil && flags&unix.O_PATH != 0 {
			pathOnly++
		}
	}
	if pathOnly != 3 {
		t.Errorf("%d O_PATH fds, want 3", pathOnly)
	}
	if got := countMappings(t, l.compute.path); got != 100 {
		t.Errorf("%d mappings of the compute file, want 100 single pages that do not merge", got)
	}
	// What is in flight is queued on the socket nobody reads: 260 handles in 2 messages.
	if n, err := unix.IoctlGetInt(a.sockets[1], unix.SIOCINQ); err != nil || n == 0 {
		t.Errorf("nothing queued on the receiving end (%d, %v)", n, err)
	}
	// The registered ones are in the ring's table, and the empty ring's table is as
	// large as asked.
	if rings > 0 {
		if n := registeredFiles(t, a.fds); !slices.Equal(n, []int{rings, 1000}) {
			t.Errorf("files in the rings' tables %v, want [%d 1000]", n, rings)
		}
	}
	if !strings.Contains(out.String(), fmt.Sprintf("adversary dup_queues=300 tiny_maps=100 inflight_queues=260 path_only_queues=3 ring_queues=%d copies=1 ring_slots=%d blocked_queues=0 null_fds=2000", rings, min(rings, 1)*1000)) {
		t.Errorf("report %q", out.String())
	}
	if err := a.release(); err != nil {
		t.Fatal(err)
	}
	if n := openHandles(t, "/dev/null"); n >= 2000 {
		t.Errorf("after release: %d fds on /dev/null", n)
	}
	if n := openHandles(t, l.queues.path); n != 0 || countMappings(t, l.compute.path) != 0 {
		t.Errorf("after release: %d fds, %d mappings", n, countMappings(t, l.compute.path))
	}
}

// registeredFiles reads the size of the file table of each io_uring among fds.
func registeredFiles(t *testing.T, fds []int) []int {
	t.Helper()
	var sizes []int
	for _, fd := range fds {
		if link, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); link != "anon_inode:[io_uring]" {
			continue
		}
		b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
		if err != nil {
			t.Fatal(err)
		}
		n := -1
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "UserFiles:"); ok {
				if n, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
					t.Fatalf("ring fdinfo %q", line)
				}
			}
		}
		if n < 0 {
			t.Fatalf("ring fdinfo without UserFiles: %s", b)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// countMappings counts this process's mappings of path.
func countMappings(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 6 && f[5] == path {
			n++
		}
	}
	return n
}

// A parker hands the socket holding its queues to its pod's keeper and keeps nothing of
// its own: the queues are in flight in the one socket the keeper received, and no fd of
// the parker names them.
func TestParkedQueuesAreInTheKeepersSocket(t *testing.T) {
	l := newLoad(t)
	path := t.TempDir() + "/keep.sock"
	keeper := &adversary{keepSockets: path}
	if err := keeper.hold(&strings.Builder{}, l.queues.path, l.compute.path); err != nil {
		t.Fatal(err)
	}
	defer keeper.release()
	parker := &adversary{parkQueues: 5, parkWith: path}
	if err := parker.hold(&strings.Builder{}, l.queues.path, l.compute.path); err != nil {
		t.Fatal(err)
	}
	if n := openHandles(t, l.queues.path); n != 0 {
		t.Errorf("%d fds on the queue file once parked, want 0", n)
	}
	var kept []int
	for range 500 {
		if kept = keeper.keptFDs(); len(kept) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(kept) != 1 {
		t.Fatalf("the keeper received %d fds, want the parker's socket alone", len(kept))
	}
	oob := make([]byte, unix.CmsgSpace(16*4))
	_, oobn, _, _, err := unix.Recvmsg(kept[0], make([]byte, 1), oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("%d control messages (%v), want 1", len(msgs), err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(fds)
	if n := openHandles(t, l.queues.path); len(fds) != 5 || n != 5 {
		t.Errorf("the kept socket held %d fds, %d on the queue file, want the 5 parked queues", len(fds), n)
	}
}
