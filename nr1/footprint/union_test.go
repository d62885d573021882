// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/syncbuf"
	"github.com/neureality-sdk/nr1-agent/internal/uring"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/sim"
)

// mapperSpec tells a mapper helper (NR1_FP_MAPPER, as JSON) what to map and how many
// children to fork keeping those mappings.
type mapperSpec struct {
	Maps  []mapperRange `json:"maps"`
	Forks int           `json:"forks"`
	// Open files are opened and held; OpenPath files only named (O_PATH) and held.
	Open     []string `json:"open,omitempty"`
	OpenPath []string `json:"openPath,omitempty"`
	// Dups dup()s the first opened file's fd so many times.
	Dups int `json:"dups,omitempty"`
	// TinyMaps maps so many single pages of TinyFile, at every other page so that no two
	// mappings merge.
	TinyMaps int    `json:"tinyMaps,omitempty"`
	TinyFile string `json:"tinyFile,omitempty"`
	// InFlight files are opened, sent over a unix socket nobody reads, and closed.
	InFlight []string `json:"inFlight,omitempty"`
	// Copies sends (or registers) each InFlight (Ring) file that many times, copies of
	// the one open file description; 0 is once.
	Copies int `json:"copies,omitempty"`
	// InFlightAfter sends so many messages, each with /dev/null in flight, before the
	// InFlight files, on a stream socket whose send buffer holds them all.
	InFlightAfter int `json:"inFlightAfter,omitempty"`
	// InFlightNested then sends the socket holding the InFlight files in flight itself,
	// over a second socket, and closes every fd of the first.
	InFlightNested bool `json:"inFlightNested,omitempty"`
	// InFlightElsewhere makes the socket holding the InFlight files in a network
	// namespace the mapper then leaves: no process is in it.
	InFlightElsewhere bool `json:"inFlightElsewhere,omitempty"`
	// Ring files are opened, registered with an io_uring, and closed; with RingMapped the
	// ring's queues are mapped and its fd closed too: the mapping keeps the ring.
	Ring       []string `json:"ring,omitempty"`
	RingMapped bool     `json:"ringMapped,omitempty"`
	// RingSlots pads the ring's table with so many empty slots after the Ring files.
	RingSlots int `json:"ringSlots,omitempty"`
	// NewNetNS runs the mapper in a network namespace of its own, as a pod's.
	NewNetNS bool `json:"-"`
}

type mapperRange struct {
	File   string `json:"file"`
	OffMB  int64  `json:"offMB"`
	SizeMB int64  `json:"sizeMB"`
}

// mapper maps the ranges (MAP_SHARED, each page touched), forks the children, prints
// "ready" and holds everything until its stdin closes.
func mapper(spec string) {
	var s mapperSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The children die with the thread that forked them (PR_SET_PDEATHSIG): keep it.
	runtime.LockOSThread()
	for _, r := range s.Maps {
		f, err := os.OpenFile(r.File, os.O_RDWR, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		m, err := unix.Mmap(int(f.Fd()), r.OffMB<<20, int(r.SizeMB<<20), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			fmt.Fprintf(os.Stderr, "mapping %+v: %v\n", r, err)
			os.Exit(1)
		}
		for i := 0; i < len(m); i += os.Getpagesize() {
			m[i] = 1
		}
		_ = f.Close() // the mapping keeps the file; no handle left to count
	}
	var opened []int
	for _, name := range s.Open {
		fd, err := unix.Open(name, unix.O_RDWR, 0)
		if err != nil {
			fmt.Fprintf(os.Stderr, "open %s: %v\n", name, err)
			os.Exit(1)
		}
		opened = append(opened, fd)
	}
	if s.Dups > 0 {
		// Up to the hard limit: raising that needs CAP_SYS_RESOURCE, which a container
		// need not have.
		var lim unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			fmt.Fprintln(os.Stderr, "fd limit:", err)
			os.Exit(1)
		}
		lim.Cur = lim.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			fmt.Fprintln(os.Stderr, "raising the fd limit:", err)
			os.Exit(1)
		}
		for range s.Dups {
			if _, err := unix.Dup(opened[0]); err != nil {
				fmt.Fprintln(os.Stderr, "dup:", err)
				os.Exit(1)
			}
		}
	}
	for _, name := range s.OpenPath {
		if _, err := unix.Open(name, unix.O_PATH, 0); err != nil {
			fmt.Fprintf(os.Stderr, "open %s (O_PATH): %v\n", name, err)
			os.Exit(1)
		}
	}
	if len(s.InFlight) > 0 {
		typ := unix.SOCK_DGRAM
		if s.InFlightAfter > 0 {
			typ = unix.SOCK_STREAM
		}
		sp, err := socketpair(typ, s.InFlightElsewhere)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if s.InFlightAfter > 0 {
			sendFillers(sp[0], s.InFlightAfter)
		}
		var fds []int
		for _, name := range s.InFlight {
			fd, err := unix.Open(name, unix.O_RDWR, 0)
			if err != nil {
				fmt.Fprintf(os.Stderr, "opening %s: %v\n", name, err)
				os.Exit(1)
			}
			fds = append(fds, slices.Repeat([]int{fd}, max(s.Copies, 1))...)
		}
		// 250 to a message: a datagram socket's queue holds few messages.
		for chunk := range slices.Chunk(fds, 250) {
			if err := unix.Sendmsg(sp[0], []byte{0}, unix.UnixRights(chunk...), nil, 0); err != nil {
				fmt.Fprintf(os.Stderr, "sending %d files: %v\n", len(chunk), err)
				os.Exit(1)
			}
		}
		for _, fd := range slices.Compact(slices.Clone(fds)) {
			_ = unix.Close(fd)
		}
		if s.InFlightNested {
			outer, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
			if err == nil {
				err = unix.Sendmsg(outer[0], []byte{0}, unix.UnixRights(sp[1]), nil, 0)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "sending the socket in flight: %v\n", err)
				os.Exit(1)
			}
			_, _ = unix.Close(sp[0]), unix.Close(sp[1])
		}
	}
	if len(s.Ring) > 0 {
		if err := registerAndClose(s.Ring, s.RingMapped, max(s.Copies, 1), s.RingSlots); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if s.TinyMaps > 0 {
		f, err := os.OpenFile(s.TinyFile, os.O_RDWR, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		page := os.Getpagesize()
		for i := range s.TinyMaps {
			if _, err := unix.Mmap(int(f.Fd()), int64(2*i*page), page, unix.PROT_READ, unix.MAP_SHARED); err != nil {
				fmt.Fprintf(os.Stderr, "tiny mapping %d: %v\n", i, err)
				os.Exit(1)
			}
		}
		_ = f.Close()
	}
	for range s.Forks {
		if _, errno := forkHolding(); errno != 0 {
			fmt.Fprintln(os.Stderr, "fork:", errno)
			os.Exit(1)
		}
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// socketpair makes a unix socket pair; elsewhere, in a network namespace of its own that
// the calling (locked) thread leaves once the pair is made.
func socketpair(typ int, elsewhere bool) ([2]int, error) {
	if !elsewhere {
		return unix.Socketpair(unix.AF_UNIX, typ, 0)
	}
	back, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return [2]int{}, err
	}
	defer unix.Close(back)
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return [2]int{}, fmt.Errorf("a network namespace for the socket: %w", err)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, typ, 0)
	if err := errors.Join(err, unix.Setns(back, unix.CLONE_NEWNET)); err != nil {
		return [2]int{}, err
	}
	return sp, nil
}

// registerAndClose opens the files, registers them with an io_uring and closes them:
// the ring alone holds them; mapped, the ring's submission queue is mapped and the
// ring's fd closed: the mapping alone holds the ring.
func registerAndClose(names []string, mapped bool, copies, empty int) error {
	ring, err := uring.New()
	if err != nil {
		return err
	}
	if mapped {
		defer func() { _ = unix.Close(ring) }()
		if _, err := unix.Mmap(ring, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
			return fmt.Errorf("mapping the ring: %w", err)
		}
	}
	var fds []int32
	for _, name := range names {
		fd, err := unix.Open(name, unix.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("opening %s: %w", name, err)
		}
		fds = append(fds, slices.Repeat([]int32{int32(fd)}, copies)...)
	}
	if err := uring.Register(ring, append(slices.Clone(fds), slices.Repeat([]int32{-1}, empty)...)); err != nil {
		return err
	}
	for _, fd := range slices.Compact(fds) {
		_ = unix.Close(int(fd))
	}
	return nil
}

// allSignals is the mask forked children block.
var allSignals = ^uint64(0)

// forkHolding forks a child that inherits every mapping and only sleeps. A Go process
// cannot run Go code after a bare fork (one thread, runtime locks possibly held), so the
// child makes raw system calls only, in this function that neither grows its stack nor
// is instrumented by the race detector.
//
//go:nosplit
//go:norace
func forkHolding() (uintptr, syscall.Errno) {
	pid, _, errno := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if errno != 0 || pid != 0 {
		return pid, errno
	}
	syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0)
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, 0 /* SIG_BLOCK */, uintptr(unsafe.Pointer(&allSignals)), 0, 8, 0, 0)
	for {
		syscall.RawSyscall6(syscall.SYS_PPOLL, 0, 0, 0, 0, 0, 0)
	}
}

// startMapper runs a mapper in cgroup cg and waits until it is ready.
func (p *population) startMapper(t testing.TB, cg int, spec mapperSpec) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "NR1_FP_MAPPER="+string(b))
	if spec.NewNetNS {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	p.start(t, cg, cmd)
	t.Cleanup(func() { _ = stdin.Close() })
	p.waitOutput(t, out, func(b []byte) bool { return bytes.Contains(b, []byte("ready\n")) }, fmt.Sprintf("mapper %s", b))
}

func (p *population) waitOutput(t testing.TB, out *syncbuf.Buffer, done func([]byte) bool, what string) []byte {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b := []byte(out.String())
		if done(b) {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready: %q", what, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSourcesCountTheUnionOfMappedRanges: real processes in real cgroups map the same
// ranges several times — inherited by forked children, mapped twice by one process,
// mapped by two cgroups of one pod — and distinct or overlapping ranges. Both sources
// must report, per cgroup and per pod, the bytes of the distinct ranges (3 MB for a
// 3 MB mapping and its four forked children, not 15 MB), and agree record for record.
func TestSourcesCountTheUnionOfMappedRanges(t *testing.T) {
	p, _ := newCgroups(t, 5)
	compute, cpu, queue := p.sim.File(sim.ComputeDMA), p.sim.File(sim.CPUDMA), p.sim.File(sim.HypervisorQ)
	const (
		forked   = 0 // 3 MB mapped once, then 4 children forked
		twice    = 1 // the same 3 MB mapped twice by one process
		podA     = 2 // two cgroups of one pod each mapping the same 3 MB, and sharing
		podB     = 3 // the same two open file descriptions
		distinct = 4 // [0, 2) and [4, 6) MB by one process, [1, 3) by another; 1 MB of the CPU file
		pod      = 5 // group of podA and podB
	)
	p.startMapper(t, forked, mapperSpec{Maps: []mapperRange{{compute, 0, 3}}, Forks: 4})
	p.startMapper(t, twice, mapperSpec{Maps: []mapperRange{{compute, 0, 3}, {compute, 0, 3}}})
	p.startMapper(t, podA, mapperSpec{Maps: []mapperRange{{compute, 0, 3}}})
	p.startMapper(t, podB, mapperSpec{Maps: []mapperRange{{compute, 0, 3}}, Forks: 1})
	p.startMapper(t, distinct, mapperSpec{Maps: []mapperRange{{compute, 0, 2}, {compute, 4, 2}, {cpu, 0, 1}}, Forks: 2})
	p.startMapper(t, distinct, mapperSpec{Maps: []mapperRange{{compute, 1, 2}}})

	// A sharer in podA whose child, holding the same two descriptions, moves to podB.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sh := exec.Command(exe)
	sh.Env = append(os.Environ(), "NR1_FP_SHARER="+queue)
	out := &syncbuf.Buffer{}
	sh.Stdout = out
	p.start(t, podA, sh)
	b := p.waitOutput(t, out, func(b []byte) bool { return bytes.HasSuffix(b, []byte("\n")) }, "sharer")
	if err := os.WriteFile(filepath.Join(p.cgroups[podB], "cgroup.procs"), []byte(strings.TrimSpace(string(b))), 0o644); err != nil {
		t.Fatalf("moving the sharer's child to the pod's other cgroup: %v", err)
	}

	const mb = 1 << 20
	want := []nr1.Usage{
		forked:   {3 * mb},
		twice:    {3 * mb},
		podA:     {3 * mb, 0, 0, 2},
		podB:     {3 * mb, 0, 0, 2},
		distinct: {5 * mb, 1 * mb},
		pod:      {3 * mb, 0, 0, 2},
	}
	group := map[uint64]int{}
	for i, id := range p.ids {
		group[id] = i
	}
	b2 := newBPFOrSkip(t, p)
	proc := NewProcfs("/proc", p.cgroupV2, p.targets)
	ctx := context.Background()
	bs, err := b2.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := proc.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Scan{bs, ps} {
		tl := NewTally(p.targets, len(want))
		raw := make([]uint64, len(p.ids))
		for _, m := range s.Mappings {
			g, ok := group[m.CgroupID]
			if !ok {
				continue
			}
			raw[g] += m.Size
			tl.AddMapping(g, m)
			if g == podA || g == podB {
				tl.AddMapping(pod, m)
			}
		}
		for _, h := range s.Handles {
			g, ok := group[h.CgroupID]
			if !ok {
				continue
			}
			tl.AddHandle(g, h)
			if g == podA || g == podB {
				tl.AddHandle(pod, h)
			}
		}
		got := tl.Sums()
		for g := range want {
			if got[g] != want[g] {
				t.Errorf("%s, group %d: %v, want %v", s.Source, g, got[g], want[g])
			}
		}
		// The records behind: what summing mapping sizes reported. procfs reports every
		// process's; the BPF source a range of a DMA file once per cgroup, not each forked
		// child's copy nor each open's.
		wantRaw := map[string][3]uint64{"procfs": {15 * mb, 6 * mb, 17 * mb}, "bpf": {3 * mb, 3 * mb, 7 * mb}}[s.Source]
		if gotRaw := [3]uint64{raw[forked], raw[twice], raw[distinct]}; gotRaw != wantRaw {
			t.Errorf("%s: mapping sizes summed %v MB; want %v (records missing?)", s.Source, div(gotRaw, mb), div(wantRaw, mb))
		}
		// Every record of this test's cgroups together. The queue device's number is
		// tun's, which other tests running beside this one hold too: only this test's
		// cgroups are summed.
		mine := ofGroups(s, group)
		if u, want := Sum(p.targets, mine.Mappings, mine.Handles), (nr1.Usage{5 * mb, 1 * mb, 0, 2}); u != want { // [0, 3) and [4, 6) MB
			t.Errorf("%s: the test's cgroups together hold %v, want %v", s.Source, u, want)
		}
	}
	// The two sources agree on this test's cgroups; processes elsewhere on the host
	// holding tun's device may come and go between the two scans.
	bm, pm := ofGroups(bs, group), ofGroups(ps, group)
	pm.Mappings = firstOfEach(p.targets, pm.Mappings)
	if !reflect.DeepEqual(bm.Mappings, pm.Mappings) {
		t.Errorf("mappings differ:\nbpf    %+v\nprocfs %+v", bm.Mappings, pm.Mappings)
	}
	if !reflect.DeepEqual(bm.Handles, pm.Handles) {
		t.Errorf("handles differ:\nbpf    %+v\nprocfs %+v", bm.Handles, pm.Handles)
	}
}

// firstOfEach keeps, of procfs's mappings, those the BPF source reports: the first (in
// PID order, then address) of each cgroup's mappings of a target's range — of one
// description for a target counted in handles (inherited by forked children: the same
// address), of any for one counted in bytes.
func firstOfEach(targets *Targets, ms []Mapping) []Mapping {
	type key struct {
		cgroup                uint64
		target                int
		start, offset, length uint64
	}
	seen := map[key]bool{}
	var out []Mapping
	for _, m := range ms {
		k := key{m.CgroupID, m.Target, m.Start, m.Offset, m.Size}
		if targets.At(m.Target).Measure == MappedBytes {
			k.start = 0
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, m)
		}
	}
	return out
}

func div(a [3]uint64, d uint64) [3]uint64 { return [3]uint64{a[0] / d, a[1] / d, a[2] / d} }

// ofGroups is s's records of the cgroups in group, normalized.
func ofGroups[V any](s *Scan, group map[uint64]V) *Scan {
	var out Scan
	for _, m := range s.Mappings {
		if _, ok := group[m.CgroupID]; ok {
			out.Mappings = append(out.Mappings, m)
		}
	}
	for _, h := range s.Handles {
		if _, ok := group[h.CgroupID]; ok {
			out.Handles = append(out.Handles, h)
		}
	}
	out.Normalize()
	return &out
}

// TestPathOnlyFdsHoldNothing: an O_PATH fd on the queue device names it without opening
// it (no I/O, no mapping), so it is no queue handle; a CG holding four of them and one
// real open holds one queue, for both sources.
func TestPathOnlyFdsHoldNothing(t *testing.T) {
	p, _ := newCgroups(t, 2)
	queue, cpu := p.sim.File(sim.HypervisorQ), p.sim.File(sim.CPUDMA)
	p.startMapper(t, 0, mapperSpec{Open: []string{queue}, OpenPath: []string{queue, queue, queue, cpu}})
	p.startMapper(t, 1, mapperSpec{OpenPath: []string{queue, queue}})
	want := map[uint64]nr1.Usage{p.ids[0]: {0, 0, 0, 1}, p.ids[1]: {}}
	for _, s := range scanBoth(t, p) {
		got := byCgroup(s, p.targets)
		for _, id := range p.ids {
			if got[id] != want[id] {
				t.Errorf("%s: cgroup %d holds %v, want %v", s.Source, id, got[id], want[id])
			}
		}
	}
}

// TestFdFloodIsOneRecord: one queue opened once, dup()ed 15000 times and inherited by
// six forked children (105007 fds), is one queue and one record from the BPF source:
// what the sample holds does not grow with the fds a CG makes.
func TestFdFloodIsOneRecord(t *testing.T) {
	p, _ := newCgroups(t, 1)
	p.startMapper(t, 0, mapperSpec{Open: []string{p.sim.File(sim.HypervisorQ)}, Dups: 15000, Forks: 6})
	b := newBPFOrSkip(t, p)
	s, err := b.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mine := ofGroups(s, map[uint64]bool{p.ids[0]: true}).Handles
	if got := byCgroup(s, p.targets)[p.ids[0]]; got != (nr1.Usage{0, 0, 0, 1}) || len(mine) != 1 {
		t.Errorf("the flood holds %v in %d records, want one queue in one record", got, len(mine))
	}
	t.Logf("105007 fds on one description: %d records in all, scan %v", len(s.Handles), s.Took)
}

// TestScanStopsWhenOutOfTime: a CG with 30000 tiny mappings makes a scan slow; given no
// time, each source stops, says where (Cutoff), and holds only records of processes
// below it. Given time, it reads them all.
func TestScanStopsWhenOutOfTime(t *testing.T) {
	p, _ := newCgroups(t, 1)
	p.startMapper(t, 0, mapperSpec{TinyMaps: 30000, TinyFile: p.sim.File(sim.ComputeDMA)})
	b := newBPFOrSkip(t, p)
	for _, src := range []Source{b, NewProcfs("/proc", p.cgroupV2, p.targets)} {
		full, err := src.Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if full.Cutoff != 0 || byCgroup(full, p.targets)[p.ids[0]][nr1.ComputeDMAMemory] != 30000*pageBytes() {
			t.Fatalf("%s with time: cutoff %d, %v", full.Source, full.Cutoff, byCgroup(full, p.targets)[p.ids[0]])
		}
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		s, err := src.Scan(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if s.Cutoff == 0 {
			t.Fatalf("%s out of time: no cutoff, %d mappings", s.Source, len(s.Mappings))
		}
		for _, m := range s.Mappings {
			if m.PID > s.Cutoff {
				t.Fatalf("%s: a record of PID %d beyond the cutoff %d", s.Source, m.PID, s.Cutoff)
			}
		}
		t.Logf("%s: with time %d mappings in %v; out of time cut at PID %d with %d mappings", s.Source, len(full.Mappings), full.Took, s.Cutoff, len(s.Mappings))
	}
}

func pageBytes() nr1.Base { return nr1.Base(os.Getpagesize()) }

// sendFillers sends n one-byte messages, each with /dev/null in flight, on the stream
// socket fd, with a send buffer forced (as root) large enough to queue them all.
func sendFillers(fd, n int) {
	null, err := unix.Open("/dev/null", unix.O_RDONLY, 0)
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 64<<20)
	}
	for i := 0; err == nil && i < n; i++ {
		err = unix.Sendmsg(fd, []byte{0}, unix.UnixRights(null), nil, 0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sending %d messages with a file in flight: %v\n", n, err)
		os.Exit(1)
	}
}

// TestInFlightHandlesCount: queue handles sent over a unix socket and closed by their
// sender are still open, held in flight; the BPF source counts them for the cgroup of
// the socket holding them, in whatever network namespace the socket is (here one of
// its own, as a pod's). procfs cannot see them (no fd names them).
func TestInFlightHandlesCount(t *testing.T) {
	p, _ := newCgroups(t, 1)
	queue := p.sim.File(sim.HypervisorQ)
	p.startMapper(t, 0, mapperSpec{Open: []string{queue}, InFlight: []string{queue, queue, queue}, NewNetNS: true})
	b := newBPFOrSkip(t, p)
	s, err := b.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := byCgroup(s, p.targets)[p.ids[0]]; got != (nr1.Usage{0, 0, 0, 4}) {
		t.Errorf("bpf: %v, want 4 queues: one open, three in flight", got)
	}
	ps, err := NewProcfs("/proc", p.cgroupV2, p.targets).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := byCgroup(ps, p.targets)[p.ids[0]]; got != (nr1.Usage{0, 0, 0, 1}) {
		t.Errorf("procfs: %v, want the one open (in flight is not visible through /proc)", got)
	}
}

// TestInFlightCopiesAreOneFile: one queue sent in flight 150 times on one socket, beside
// three others so sent, is one open file each: the kernel side keeps one record per file
// and socket before any cap, so copies fill no cap, and all four are counted, the CG
// certain. Likewise one queue registered in 600 slots of an io_uring.
func TestInFlightCopiesAreOneFile(t *testing.T) {
	p, _ := newCgroups(t, 2)
	queue := p.sim.File(sim.HypervisorQ)
	p.startMapper(t, 0, mapperSpec{InFlight: []string{queue, queue, queue, queue}, Copies: 150})
	p.startMapper(t, 1, mapperSpec{Ring: []string{queue, queue}, Copies: 600})
	s, err := newBPFOrSkip(t, p).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := byCgroup(s, p.targets)
	if q := got[p.ids[0]][nr1.HypervisorQueue]; q != 4 || slices.Contains(s.InFlightUnread, p.ids[0]) {
		t.Errorf("4 queues in flight 150 times each: %d counted, unread cgroups %v; want 4, certain", q, s.InFlightUnread)
	}
	if q := got[p.ids[1]][nr1.HypervisorQueue]; q != 2 || slices.Contains(s.RingUnread, p.ids[1]) {
		t.Errorf("2 queues in 600 ring slots each: %d counted, unread cgroups %v; want 2, certain", q, s.RingUnread)
	}
}

// TestPastTheCapIsOver: a cgroup with more distinct targets in flight than a scan
// counts for one (1024), or a ring holding more than a scan writes for one (480), is
// reported past the cap for the target's resource, never as a lower bound to trust.
func TestPastTheCapIsOver(t *testing.T) {
	p, _ := newCgroups(t, 4)
	queue := p.sim.File(sim.HypervisorQ)
	p.startMapper(t, 0, mapperSpec{InFlight: slices.Repeat([]string{queue}, 1030)})
	p.startMapper(t, 1, mapperSpec{Ring: slices.Repeat([]string{queue}, 490)})
	p.startMapper(t, 2, mapperSpec{InFlight: slices.Repeat([]string{queue}, 1024)})
	// Files of a target counted in mapped bytes hold nothing: 1100 of them in flight
	// beside 5 queues fill no cap, and make the cgroup over on nothing.
	compute := p.sim.File(sim.ComputeDMA)
	p.startMapper(t, 3, mapperSpec{InFlight: append(slices.Repeat([]string{compute}, 1100), slices.Repeat([]string{queue}, 5)...)})
	s, err := newBPFOrSkip(t, p).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := byCgroup(s, p.targets)
	for i, c := range []struct {
		what string
		cap  nr1.Base
	}{{"1030 queues in flight", 1024}, {"490 queues in a ring", 480}} {
		if !slices.ContainsFunc(s.PastCap, func(pc PastCap) bool {
			return pc.CgroupID == p.ids[i] && p.targets.At(pc.Target).Resource == nr1.HypervisorQueue
		}) {
			t.Errorf("%s: past the cap %+v, want cgroup %d's queues among them", c.what, s.PastCap, p.ids[i])
		}
		if q := got[p.ids[i]][nr1.HypervisorQueue]; q != c.cap {
			t.Errorf("%s: %d counted, want the cap's %d", c.what, q, c.cap)
		}
	}
	if q := got[p.ids[2]][nr1.HypervisorQueue]; q != 1024 || slices.ContainsFunc(s.PastCap, func(pc PastCap) bool { return pc.CgroupID == p.ids[2] }) {
		t.Errorf("1024 queues in flight: %d counted, past the cap %+v; want 1024, within", q, s.PastCap)
	}
	if q := got[p.ids[3]][nr1.HypervisorQueue]; q != 5 || slices.ContainsFunc(s.PastCap, func(pc PastCap) bool { return pc.CgroupID == p.ids[3] }) {
		t.Errorf("1100 compute DMA files and 5 queues in flight: %d queues, past the cap %+v; want 5, within", q, s.PastCap)
	}
	if len(s.InFlightUnread)+len(s.RingUnread) != 0 || s.InFlightCut {
		t.Errorf("past the cap read as unread: in flight %v, rings %v, cut %v", s.InFlightUnread, s.RingUnread, s.InFlightCut)
	}
}

// TestRingPastTheSlotsReadIsItsOwnUncertainty: a ring whose table has more slots than a
// scan reads (16384) leaves what it holds unread, and says so for its cgroup as the
// ring's doing; one whose table fits is read in full, its queues counted.
func TestRingPastTheSlotsReadIsItsOwnUncertainty(t *testing.T) {
	p, _ := newCgroups(t, 2)
	queue := p.sim.File(sim.HypervisorQ)
	p.startMapper(t, 0, mapperSpec{Ring: []string{queue, queue}, RingSlots: 1 << 14})
	p.startMapper(t, 1, mapperSpec{Ring: []string{queue, queue}, RingSlots: 1<<14 - 2})
	s, err := newBPFOrSkip(t, p).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(s.RingUnread, p.ids[0]) || slices.Contains(s.RingLayout, p.ids[0]) {
		t.Errorf("a ring of 16386 slots: unread %v (layout %v), want cgroup %d's own", s.RingUnread, s.RingLayout, p.ids[0])
	}
	if q := byCgroup(s, p.targets)[p.ids[1]][nr1.HypervisorQueue]; q != 2 || slices.Contains(s.RingUnread, p.ids[1]) {
		t.Errorf("a ring of 16384 slots: %d queues, unread %v; want 2, read in full", q, s.RingUnread)
	}
}

// TestInFlightOnManySocketsIsAllCounted: the unix iterator resumes a read at the next
// hash bucket, so sockets whose records overflowed one read would be skipped; files in
// flight are collected apart from its output, and every socket's are counted.
func TestInFlightOnManySocketsIsAllCounted(t *testing.T) {
	const cgroups = 4
	p, _ := newCgroups(t, cgroups)
	queue := p.sim.File(sim.HypervisorQ)
	for i := range cgroups {
		p.startMapper(t, i, mapperSpec{InFlight: slices.Repeat([]string{queue}, 300)})
	}
	src := newBPFOrSkip(t, p)
	s, err := src.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := byCgroup(s, p.targets)
	for i := range cgroups {
		if q := got[p.ids[i]][nr1.HypervisorQueue]; q != 300 {
			t.Errorf("cgroup %d of %d, 300 queues in flight: %d counted", i, cgroups, q)
		}
	}
	// The next scan counts them again, from tables the last one left.
	if s, err = src.Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if q := byCgroup(s, p.targets)[p.ids[0]][nr1.HypervisorQueue]; q != 300 {
		t.Errorf("a second scan: %d counted, want 300", q)
	}
}

// TestInFlightInASocketInFlight: files in flight on a socket that is itself in flight,
// with no fd of it left anywhere, are still counted: the kernel's unix socket table
// holds every socket, bound or not, held by an fd or only by a message.
func TestInFlightInASocketInFlight(t *testing.T) {
	p, _ := newCgroups(t, 1)
	queue := p.sim.File(sim.HypervisorQ)
	p.startMapper(t, 0, mapperSpec{InFlight: []string{queue, queue, queue}, InFlightNested: true})
	s, err := newBPFOrSkip(t, p).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := byCgroup(s, p.targets)[p.ids[0]][nr1.HypervisorQueue]; got != 3 {
		t.Errorf("%d queues counted in flight in a socket in flight, want 3", got)
	}
}

// TestInFlightPastTheMessagesReadIsALowerBound: a socket's queue is read up to 4096
// messages; files in flight in messages past those are not seen, and the scan says so
// for the socket's cgroup.
func TestInFlightPastTheMessagesReadIsALowerBound(t *testing.T) {
	p, _ := newCgroups(t, 1)
	queue := p.sim.File(sim.HypervisorQ)
	p.startMapper(t, 0, mapperSpec{InFlight: []string{queue, queue}, InFlightAfter: 4100})
	s, err := newBPFOrSkip(t, p).Scan(context.Background())
	if err != nil {
		t.Fatalf("4100 messages in flight on one socket failed the scan: %v", err)
	}
	got := byCgroup(s, p.targets)[p.ids[0]][nr1.HypervisorQueue]
	if got != 0 || !slices.Contains(s.InFlightUnread, p.ids[0]) {
		t.Errorf("%d queues counted behind 4100 messages, unread cgroups %v; want none read, and the cgroup said to be unread", got, s.InFlightUnread)
	}
}

// TestInFlightInANamespaceNoProcessIsIn: queue handles in flight on a socket made in a
// network namespace its maker then left are held, and counted by the BPF source, which
// reads that namespace's sockets through the socket the process still holds. A socket
// of such a namespace that is itself in flight cannot be entered: its CG is said to be
// a lower bound.
func TestInFlightInANamespaceNoProcessIsIn(t *testing.T) {
	p, _ := newCgroups(t, 2)
	queue := p.sim.File(sim.HypervisorQ)
	p.startMapper(t, 0, mapperSpec{InFlight: []string{queue, queue, queue}, InFlightElsewhere: true})
	p.startMapper(t, 1, mapperSpec{InFlight: []string{queue, queue}, InFlightElsewhere: true, InFlightNested: true})
	s, err := newBPFOrSkip(t, p).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := byCgroup(s, p.targets)
	if q := got[p.ids[0]][nr1.HypervisorQueue]; q != 3 || slices.Contains(s.InFlightUnread, p.ids[0]) {
		t.Errorf("%d queues counted in flight in a namespace no process is in (unread %v), want 3", q, s.InFlightUnread)
	}
	if !slices.Contains(s.InFlightUnread, p.ids[1]) {
		t.Errorf("a socket of such a namespace in flight itself: unread cgroups %v, want %d named a lower bound", s.InFlightUnread, p.ids[1])
	}
}

// TestRingHeldQueuesCount: queue handles registered with an io_uring and closed are held
// by the ring: the BPF source counts each description once, however many slots and
// forked children share the ring, and through the mapping of its queue when the ring's
// fd is closed too. procfs sees the ring (its fd or its mapping) but not which
// descriptions it holds: its cgroup is named a lower bound.
func TestRingHeldQueuesCount(t *testing.T) {
	p, _ := newCgroups(t, 3)
	queue := p.sim.File(sim.HypervisorQ)
	p.startMapper(t, 0, mapperSpec{Ring: []string{queue, queue}, Forks: 2})
	p.startMapper(t, 1, mapperSpec{Open: []string{queue}})
	p.startMapper(t, 2, mapperSpec{Ring: []string{queue, queue, queue}, RingMapped: true})
	want := map[string]nr1.Base{"bpf": 2, "procfs": 0}
	for _, s := range scanBoth(t, p) {
		got := byCgroup(s, p.targets)
		if q := got[p.ids[0]][nr1.HypervisorQueue]; q != want[s.Source] {
			t.Errorf("%s: %d queues held by a ring, want %d", s.Source, q, want[s.Source])
		}
		// A ring whose fd is closed, kept by the mapping of its queue.
		if q, lower := got[p.ids[2]][nr1.HypervisorQueue], slices.Contains(s.Uncounted, p.ids[2]); (s.Source == "bpf" && (q != 3 || lower)) || (s.Source == "procfs" && !lower) {
			t.Errorf("%s: %d queues held by a mapped ring, named a lower bound %v; want 3 from bpf, a lower bound from procfs", s.Source, q, lower)
		}
		if q := got[p.ids[1]][nr1.HypervisorQueue]; q != 1 {
			t.Errorf("%s: %d queues held by an fd, want 1", s.Source, q)
		}
		lower := slices.Contains(s.Uncounted, p.ids[0])
		if lower != (s.Source == "procfs") || slices.Contains(s.Uncounted, p.ids[1]) {
			t.Errorf("%s: cgroups named a lower bound %v; want the ring's only from procfs", s.Source, s.Uncounted)
		}
	}
}

// TestMappedThenClosedQueueIsHeld: a file counted in handles that a process maps and
// then closes is still held, by the mapping: once however many children inherit it,
// once with the fds on its description, apart from another open of the same file. The
// BPF source names the description of each mapping. procfs, which can compare fds
// only, never counts a mapping (it could be a description an fd elsewhere holds): a
// mapping in a process without an fd on the file names its cgroup as a lower bound.
func TestMappedThenClosedQueueIsHeld(t *testing.T) {
	p, dir := newCgroups(t, 4)
	queue := withMappableQueue(t, p, dir)
	const (
		inherited = 0 // mapped, closed, two children forked with it
		twice     = 1 // opened and mapped twice, both closed
		openToo   = 2 // opened and held, and opened again, mapped and closed
		none      = 3 // only DMA memory
	)
	p.startMapper(t, inherited, mapperSpec{Maps: []mapperRange{{queue, 0, 1}}, Forks: 2})
	p.startMapper(t, twice, mapperSpec{Maps: []mapperRange{{queue, 0, 1}, {queue, 0, 1}}})
	p.startMapper(t, openToo, mapperSpec{Maps: []mapperRange{{queue, 0, 1}}, Open: []string{queue}})
	p.startMapper(t, none, mapperSpec{Maps: []mapperRange{{p.sim.File(sim.ComputeDMA), 0, 1}}})
	want := map[string][]nr1.Base{
		"bpf":    {inherited: 1, twice: 2, openToo: 2, none: 0},
		"procfs": {inherited: 0, twice: 0, openToo: 1, none: 0},
	}
	wantUncounted := map[string][]uint64{"bpf": nil, "procfs": slices.Sorted(slices.Values([]uint64{p.ids[inherited], p.ids[twice]}))}
	for _, s := range scanBoth(t, p) {
		got := byCgroup(s, p.targets)
		for g, id := range p.ids {
			if q := got[id][nr1.HypervisorQueue]; q != want[s.Source][g] {
				t.Errorf("%s: cgroup %d holds %d queues, want %d", s.Source, g, q, want[s.Source][g])
			}
		}
		var uncounted []uint64
		for _, id := range s.Uncounted {
			if slices.Contains(p.ids, id) {
				uncounted = append(uncounted, id)
			}
		}
		if slices.Sort(uncounted); !slices.Equal(uncounted, wantUncounted[s.Source]) {
			t.Errorf("%s: cgroups named a lower bound %v, want %v", s.Source, uncounted, wantUncounted[s.Source])
		}
	}
}

// TestInheritedMappingsAreOneRecord: 3 MB mapped in 64 pieces of one open file and
// inherited by 20 forked children (1344 mappings) are 64 records from the BPF source,
// not 1344: what a scan holds does not grow with the children a CG forks.
func TestInheritedMappingsAreOneRecord(t *testing.T) {
	p, _ := newCgroups(t, 1)
	p.startMapper(t, 0, mapperSpec{TinyMaps: 64, TinyFile: p.sim.File(sim.ComputeDMA), Forks: 20})
	b := newBPFOrSkip(t, p)
	s, err := b.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mine := ofGroups(s, map[uint64]bool{p.ids[0]: true}).Mappings
	page := nr1.Base(os.Getpagesize())
	if got := byCgroup(s, p.targets)[p.ids[0]]; got != (nr1.Usage{64 * page}) || len(mine) != 64 {
		t.Errorf("the children hold %v in %d records, want 64 pages in 64 records", got, len(mine))
	}
}

// TestReopenedMappingsAreOneRecordPerRange: a DMA file opened and mapped again 300
// times at the same range, each open closed (300 descriptions, one range), is one record
// from the BPF source, as it is one MB held; a queue mapped so stays a record per
// description, each one queue held.
func TestReopenedMappingsAreOneRecordPerRange(t *testing.T) {
	p, dir := newCgroups(t, 1)
	queue := withMappableQueue(t, p, dir)
	dma := mapperRange{p.sim.File(sim.ComputeDMA), 0, 1}
	p.startMapper(t, 0, mapperSpec{Maps: append(slices.Repeat([]mapperRange{dma}, 300), slices.Repeat([]mapperRange{{queue, 0, 1}}, 3)...)})
	s, err := newBPFOrSkip(t, p).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var dmaRecords, queueRecords int
	for _, m := range ofGroups(s, map[uint64]bool{p.ids[0]: true}).Mappings {
		switch p.targets.At(m.Target).Resource {
		case nr1.ComputeDMAMemory:
			dmaRecords++
		case nr1.HypervisorQueue:
			queueRecords++
		}
	}
	if dmaRecords != 1 || queueRecords != 3 {
		t.Errorf("%d records of the DMA range mapped by 300 opens (want 1), %d of the queue mapped by 3 (want 3)", dmaRecords, queueRecords)
	}
	if got := byCgroup(s, p.targets)[p.ids[0]]; got[nr1.ComputeDMAMemory] != 1<<20 || got[nr1.HypervisorQueue] != 3 {
		t.Errorf("held %v, want 1 MB and 3 queues", got)
	}
}

// withMappableQueue makes p's targets the compute DMA file and a queue that can be
// mapped (the simulated one is tun's device, which cannot), a file in dir, and returns it.
func withMappableQueue(t *testing.T, p *population, dir string) string {
	t.Helper()
	queue := filepath.Join(dir, "mappable-queue")
	if err := os.WriteFile(queue, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	p.targets, err = resolve([]TargetSpec{
		{Resource: nr1.ComputeDMAMemory, Path: p.sim.File(sim.ComputeDMA), Measure: MappedBytes},
		{Resource: nr1.HypervisorQueue, Path: queue, Measure: OpenHandles},
	})
	if err != nil {
		t.Fatal(err)
	}
	return queue
}

// scanBoth is a scan of p's targets by each source, BPF's first.
func scanBoth(t *testing.T, p *population) []*Scan {
	t.Helper()
	var out []*Scan
	for _, src := range []Source{newBPFOrSkip(t, p), NewProcfs("/proc", p.cgroupV2, p.targets)} {
		s, err := src.Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}
