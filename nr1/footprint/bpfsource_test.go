// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/bpf"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// recordTargets are three targets, one per measure kind the records feed.
var recordTargets = &Targets{list: []Target{
	{Resource: nr1.ComputeDMAMemory, Measure: MappedBytes},
	{Resource: nr1.CPUDMAMemory, Measure: MappedBytes},
	{Resource: nr1.HypervisorQueue, Measure: OpenHandles},
}}

func TestRecordsTheIteratorsCannotWriteAreRefused(t *testing.T) {
	vma := bpf.Record{CgroupId: 8812, Start: 0x7f1c2a400000, Size: 8192, Pgoff: 1, Pid: 4242, Target: 1, Kind: bpf.KindVMA}
	fd := bpf.Record{CgroupId: 8812, File: 0xffff8d4a1c3e2f00, Pid: 4242, Fd: 5, Target: 2, Kind: bpf.KindFD}
	if m, err := mappingOf(&vma, 3); err != nil || m != (Mapping{CgroupID: 8812, PID: 4242, Target: 1, Start: 0x7f1c2a400000, Size: 8192, Offset: 1 << pageShift}) {
		t.Errorf("mappingOf = %+v, %v", m, err)
	}
	if h, err := handleOf(&fd, 3); err != nil || h != (Handle{CgroupID: 8812, PID: 4242, FD: 5, Target: 2, Description: 0xffff8d4a1c3e2f00}) {
		t.Errorf("handleOf = %+v, %v", h, err)
	}
	for name, mutate := range map[string]func(*bpf.Record){
		"target out of range": func(r *bpf.Record) { r.Target = 3 },
		"another kind":        func(r *bpf.Record) { r.Kind = bpf.KindFD },
		"no process":          func(r *bpf.Record) { r.Pid = 0 },
		"empty":               func(r *bpf.Record) { r.Size = 0 },
		"unaligned":           func(r *bpf.Record) { r.Start++ },
		"past the end":        func(r *bpf.Record) { r.Start = math.MaxUint64 &^ 0xfff },
		"offset overflowing":  func(r *bpf.Record) { r.Pgoff = math.MaxUint64 >> 1 },
		"file range past the largest offset": func(r *bpf.Record) {
			r.Pgoff = math.MaxInt64>>pageShift - 1
		},
	} {
		r := vma
		mutate(&r)
		if m, err := mappingOf(&r, 3); err == nil || !strings.Contains(err.Error(), "record") {
			t.Errorf("%s: mappingOf = %+v, %v; want a refusal naming the record", name, m, err)
		}
	}
	for name, mutate := range map[string]func(*bpf.Record){
		"target out of range": func(r *bpf.Record) { r.Target = math.MaxUint32 },
		"another kind":        func(r *bpf.Record) { r.Kind = bpf.KindVMA },
		"no file":             func(r *bpf.Record) { r.File = 0 },
		"fd out of range":     func(r *bpf.Record) { r.Fd = math.MaxUint32 },
		"pid out of range":    func(r *bpf.Record) { r.Pid = maxPID + 1 },
	} {
		r := fd
		mutate(&r)
		if h, err := handleOf(&r, 3); err == nil {
			t.Errorf("%s: handleOf = %+v, want a refusal", name, h)
		}
	}
}

func FuzzBPFRecord(f *testing.F) {
	for _, r := range []bpf.Record{
		{CgroupId: 8812, Start: 0x7f1c2a400000, Size: 8192, Pgoff: 1, Pid: 4242, Target: 0, Kind: bpf.KindVMA},
		{CgroupId: 8812, File: 0xffff8d4a1c3e2f00, Pid: 4242, Fd: 5, Target: 2, Kind: bpf.KindFD},
		{Start: 0xfffffffffffff000, Size: 0x2000, Pid: 1, Kind: bpf.KindVMA},
		{Size: 4096, Pgoff: math.MaxUint64, Pid: 1, Kind: bpf.KindVMA},
		{File: 1, Pid: 1, Target: 7, Kind: bpf.KindFD},
		{CgroupId: 8812, File: 0xffff8d4a1c3e2f00, Pid: 4242, Fd: 9, Target: 2, Kind: bpf.KindRegistered},
	} {
		b, _ := binary.Append(nil, binary.NativeEndian, &r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var b [bpf.RecordSize]byte
		copy(b[:], data)
		var r bpf.Record
		bpf.DecodeRecord(&b, &r)
		targets := len(recordTargets.list)
		if m, err := mappingOf(&r, targets); err == nil {
			if m.Target < 0 || m.Target >= targets || m.Size == 0 || m.Offset+m.Size < m.Offset || m.Offset+m.Size > math.MaxInt64 || m.Start+m.Size < m.Start || m.PID <= 0 {
				t.Fatalf("accepted %+v as %+v", r, m)
			}
			// A range mapped twice is held once; a mapping of a target counted in handles
			// holds nothing.
			want := nr1.Usage{}
			if tg := recordTargets.At(m.Target); tg.Measure == MappedBytes {
				want[tg.Resource] = nr1.Base(m.Size)
			}
			if u := Sum(recordTargets, []Mapping{m, m}, nil); u != want {
				t.Fatalf("%+v twice sums to %v, want %v", m, u, want)
			}
		}
		if h, err := handleOf(&r, targets); err == nil {
			// An fd, or (FD -1) a file registered with a ring of the process.
			if h.Target < 0 || h.Target >= targets || h.FD < -1 || (h.FD == -1) != (r.Kind == bpf.KindRegistered) || h.PID <= 0 || h.Description == 0 {
				t.Fatalf("accepted %+v as %+v", r, h)
			}
			// An fd and its dup are one open file description.
			u := Sum(recordTargets, nil, []Handle{h, h})
			want := nr1.Usage{}
			if tg := recordTargets.At(h.Target); tg.Measure == OpenHandles {
				want[tg.Resource] = 1
			}
			if u != want {
				t.Fatalf("%+v twice sums to %v, want %v", h, u, want)
			}
		}
	})
}

// TestMemberNamespacesOpenedThroughTheProcessNamed: each namespace the iterator named is
// named once, through its process, when that process is in it, with no descriptor held,
// or through the next one named for it; a process in another namespace (its PID reused)
// with none after it, or a pass cut short, and every process's namespace is read from
// /proc instead.
func TestMemberNamespacesOpenedThroughTheProcessNamed(t *testing.T) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		t.Skipf("no network namespace to read: %v", err)
	}
	self := uint32(os.Getpid())
	b := &BPF{procRoot: "/proc"}
	member := bpf.Record{Pid: self, File: st.Ino, Kind: bpf.KindNetNSMember}
	ns := b.memberNamespaces([]bpf.Record{member, member}, true)
	if want := fmt.Sprintf("/proc/%d/ns/net", self); !slices.Equal(ns.paths, []string{want}) || len(ns.inos) != 1 || !ns.inos[st.Ino] || len(ns.fds) != 0 {
		t.Errorf("named through the agent: %v %v, want %s alone and no descriptor held", ns.paths, ns.inos, want)
	}
	// A process named first that is no longer in it (gone, its PID reused): the next one
	// named for it does.
	stale := bpf.Record{Pid: 1 << 30, File: st.Ino, Kind: bpf.KindNetNSMember}
	if ns := b.memberNamespaces([]bpf.Record{stale, member}, true); !slices.Equal(ns.paths, []string{fmt.Sprintf("/proc/%d/ns/net", self)}) {
		t.Errorf("named through a gone process, then the agent: %v, want the agent's alone", ns.paths)
	}
	whole := netNamespaces("/proc")
	for name, ns := range map[string]*namespaces{
		"another namespace's process": b.memberNamespaces([]bpf.Record{{Pid: self, File: st.Ino + 1, Kind: bpf.KindNetNSMember}}, true),
		"pass cut short":              b.memberNamespaces([]bpf.Record{member}, false),
	} {
		if !maps.Equal(ns.inos, whole.inos) {
			t.Errorf("%s: %v, want every process's %v", name, ns.inos, whole.inos)
		}
	}
}

// TestAForeignNamespaceIsEnteredThroughAnyHolder: a namespace each cgroup's holder names
// is entered through the first that answers, the others' failing not counted; the
// cgroups of holders of a namespace none answered for are unreadable, and a namespace
// processes are in is not entered again. Sockets remembered from earlier walks are tried
// after: one that fails is no one's lower bound, one that answers clears the holders
// that failed.
func TestAForeignNamespaceIsEnteredThroughAnyHolder(t *testing.T) {
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sock)
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		t.Skipf("no network namespace to read: %v", err)
	}
	self := uint32(os.Getpid())
	// A socket is taken from its holder (pidfd_getfd) and asked its namespace
	// (SIOCGSKNS, which needs CAP_NET_ADMIN): an emulator (qemu-user) may pass on neither.
	if ns, err := socketNamespace(int(self), sock, st.Ino); err != nil {
		t.Skipf("a socket's network namespace cannot be taken here: %v", err)
	} else {
		_ = unix.Close(ns)
	}
	gone := bpf.Record{CgroupId: 11, Pid: 1 << 30, Fd: 3, File: st.Ino, Kind: bpf.KindNetNS}
	holder := bpf.Record{CgroupId: 12, Pid: self, Fd: uint32(sock), File: st.Ino, Kind: bpf.KindNetNS}
	other := bpf.Record{CgroupId: 13, Pid: 1 << 30, Fd: 3, File: st.Ino + 1, Kind: bpf.KindNetNS}
	staleOther := other
	staleOther.CgroupId = 14
	entered, unreadable, failed := enterForeign(&namespaces{inos: map[uint64]bool{}}, []bpf.Record{gone, holder, other}, []bpf.Record{holder, staleOther})
	defer entered.Close()
	if len(entered.paths) != 1 || !entered.inos[st.Ino] {
		t.Errorf("entered %v, want the namespace of the socket the agent holds alone", entered.inos)
	}
	if !slices.Equal(unreadable, []uint64{13}) {
		t.Errorf("unreadable %v, want the holder of the namespace none answered for (13) alone", unreadable)
	}
	// A socket remembered from an earlier walk that no longer answers fails: nobody's
	// lower bound, named among those that failed.
	if len(failed) != 3 || !failed[gone] || !failed[other] || !failed[staleOther] {
		t.Errorf("failed %v, want the holders that did not answer (11, 13, 14)", failed)
	}
	// A remembered socket enters a namespace this scan's holders failed for: they are no
	// lower bound then.
	again, unreadable, failed := enterForeign(&namespaces{inos: map[uint64]bool{}}, []bpf.Record{gone}, []bpf.Record{holder})
	defer again.Close()
	if !again.inos[st.Ino] || len(unreadable) != 0 || !failed[gone] || failed[holder] {
		t.Errorf("entered %v, unreadable %v, failed %v; want the namespace entered through the remembered holder, none unreadable, 11 failed", again.inos, unreadable, failed)
	}
	known := &namespaces{inos: map[uint64]bool{st.Ino: true}}
	if again, unreadable, _ := enterForeign(known, []bpf.Record{gone, holder}, nil); len(again.paths) != 0 || len(unreadable) != 0 {
		t.Errorf("a namespace processes are in: entered %v, unreadable %v, want neither", again.paths, unreadable)
	}
}

// TestTheRecordsOfAProcessThatExitedAreDropped: after a walk, the fds and mappings of a
// process that has exited (reaped, or a zombie) are dropped, those of a running one and
// those of no process (in flight) kept: a pool's worker that exits while its replacement
// is walked after it does not count twice. A description the exited process reported
// that the kernel has not released (another process of its cgroup holds it) is kept, as
// held by no process.
func TestTheRecordsOfAProcessThatExitedAreDropped(t *testing.T) {
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	live, reaped, zombie := start(), start(), start()
	_ = reaped.Process.Kill()
	_ = reaped.Wait()
	_ = zombie.Process.Kill()
	for deadline := time.Now().Add(10 * time.Second); running("/proc", zombie.Process.Pid); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the killed process never became a zombie")
		}
	}
	s := &Scan{
		Handles: []Handle{{PID: live.Process.Pid, Description: 1}, {PID: reaped.Process.Pid, Description: 2},
			{PID: zombie.Process.Pid, Description: 3}, {PID: 0, FD: -1, Description: 4}, {PID: reaped.Process.Pid, FD: 7, Description: 5}},
		Mappings: []Mapping{{PID: live.Process.Pid, Start: 1}, {PID: zombie.Process.Pid, Start: 2}},
	}
	still := map[uint64]bool{1: true, 4: true, 5: true} // 5: a sibling of the reaped one holds it
	if err := s.dropExited("/proc", func() (map[uint64]bool, error) { return still, nil }); err != nil {
		t.Fatal(err)
	}
	var kept []Handle
	for _, h := range s.Handles {
		kept = append(kept, Handle{PID: h.PID, FD: h.FD, Description: h.Description})
	}
	want := []Handle{{PID: live.Process.Pid, Description: 1}, {PID: 0, FD: -1, Description: 4}, {PID: 0, FD: -1, Description: 5}}
	if !slices.Equal(kept, want) || len(s.Mappings) != 1 || s.Mappings[0].Start != 1 {
		t.Errorf("kept handles %+v and mappings %+v; want %+v, the running process's mapping", kept, s.Mappings, want)
	}
	asked := false
	calm := &Scan{Handles: []Handle{{PID: live.Process.Pid, Description: 1}}}
	if err := calm.dropExited("/proc", func() (map[uint64]bool, error) { asked = true; return nil, nil }); err != nil || asked || len(calm.Handles) != 1 {
		t.Errorf("nothing exited: asked the kernel %v, kept %+v, %v; want not asked, the handle kept", asked, calm.Handles, err)
	}
}
