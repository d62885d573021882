// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pty opens a pseudo-terminal's master and gives the path of its slave: a character
// device whose read blocks until the master writes.
func pty(t *testing.T) (*os.File, string) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { _ = master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	return master, "/dev/pts/" + strconv.Itoa(n)
}

// opened is what Opened names now, by address.
func opened(t *testing.T, f *Footprint) map[uint64]Opened {
	t.Helper()
	got := map[uint64]Opened{}
	if err := f.Opened(func(o Opened) error { got[o.File] = o; return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}

// A description whose last fd was closed while a read is pending on it (a thread
// blocked in read, a read submitted to an io_uring) is held by the kernel for the
// reader, where no walk of fds finds it: Opened names it with its opener's cgroup and
// that cgroup's ancestors, and forgets it once the read ends and it is released. A
// description of a file that is no target, or counted in bytes mapped, is not
// remembered.
func TestADescriptionABlockedReadHoldsIsOpened(t *testing.T) {
	for _, way := range []string{"blockread", "uringread"} {
		t.Run(way, func(t *testing.T) { checkPendingReadIsOpened(t, way) })
	}
}

func checkPendingReadIsOpened(t *testing.T, way string) {
	f := loadOrSkip(t)
	master, slave := pty(t)
	if err := f.SetTargets(map[TargetKey]uint32{keyOf(t, slave): 1, keyOf(t, "/dev/zero"): 2 | TargetBytes}); err != nil {
		t.Fatal(err)
	}
	changes, err := f.WatchChanges() // attaches the opens' tracepoints
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = changes.Close() })
	g := &gateFixture{t: t, root: v2CgroupOrSkip(t)}
	_, cg := g.pod("reader", -1, "ctr")
	id, parent := g.cgroupID(cg), g.cgroupID(g.root+"/reader")
	o := g.opener(cg)
	fd := o.must("openkeep " + slave)
	o.must("open /dev/zero")
	o.must("open /dev/null")

	var held []Opened
	for _, op := range opened(t, f) {
		if op.Who[0] == id {
			held = append(held, op)
		}
	}
	if len(held) != 1 || held[0].Target != 1 || held[0].Who[1] != parent {
		t.Fatalf("opened by the reader's cgroup: %+v; want the slave alone (target 1), with the pod's cgroup %d next", held, parent)
	}
	desc := held[0].File

	o.must(way + " " + strconv.Itoa(fd))
	inFds := false
	if err := f.FilesOf(func(yield func(uint32) bool) { yield(uint32(o.cmd.Process.Pid)) }, func(r *Record) error {
		inFds = inFds || r.File == desc
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if inFds {
		t.Fatal("the description is still in the reader's fds")
	}
	if _, ok := opened(t, f)[desc]; !ok {
		t.Fatal("the description a pending read holds, no fd, is not named")
	}

	if _, err := master.Write([]byte("x\n")); err != nil { // the read ends
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, ok := opened(t, f)[desc]; !ok {
			break
		}
		if i == 1000 {
			t.Fatal("the description is still named once the read ended and released it")
		}
		time.Sleep(time.Millisecond)
	}
}
