// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/uring"
)

// loadOrSkip loads the iterators, skipping only when the kernel lacks what they need.
func loadOrSkip(t testing.TB) *Footprint {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading BPF programs needs root")
	}
	f, err := LoadFootprint()
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("kernel lacks BPF iterators or BTF: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func keyOf(t *testing.T, path string) TargetKey {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFCHR {
		return TargetKey{Rdev: KernelDev(st.Rdev)}
	}
	return TargetKey{Ino: st.Ino, Dev: KernelDev(st.Dev)}
}

func TestIteratorsReportFdsAndMappingsOfTargets(t *testing.T) {
	f := loadOrSkip(t)
	path := filepath.Join(t.TempDir(), "dma")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.SetTargets(map[TargetKey]uint32{keyOf(t, path): 7, keyOf(t, "/dev/null"): 3}); err != nil {
		t.Fatal(err)
	}
	a, _ := os.OpenFile(path, os.O_RDWR, 0)
	defer a.Close()
	dup, err := syscall.Dup(int(a.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(dup)
	null, _ := os.Open("/dev/null")
	defer null.Close()
	m, err := unix.Mmap(int(a.Fd()), 4096, 8192, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)

	pid := uint32(os.Getpid())
	var fds []Record
	if err := f.Files(func(r *Record) error {
		if r.Pid == pid {
			fds = append(fds, *r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var dma, nul int
	for _, r := range fds {
		switch r.Target {
		case 7:
			dma++
			if r.Fd != uint32(a.Fd()) {
				t.Errorf("the DMA file reported by fd %d, want %d: the first of its description", r.Fd, a.Fd())
			}
		case 3:
			nul++
		}
		if r.CgroupId == 0 || r.Kind != KindFD {
			t.Errorf("record %+v", r)
		}
	}
	if dma != 1 || nul < 1 {
		t.Errorf("fds: %d on the DMA file (want 1: the fd and its dup share one description), %d on /dev/null", dma, nul)
	}
	var vmas []Record
	if err := f.VMAs(func(r *Record) error {
		if r.Pid == pid && r.Target == 7 {
			vmas = append(vmas, *r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(vmas) != 1 || vmas[0].Size != 8192 || vmas[0].Pgoff != 1 || vmas[0].Kind != KindVMA {
		t.Errorf("mappings %+v", vmas)
	}
}

// A file sent over a unix socket and closed by its sender is held only in flight: the
// unix iterator reports it once, for the receiving socket's cgroup; one the sender
// still holds as an fd was reported by Files and is not reported again.
func TestInFlightFilesAreReported(t *testing.T) {
	f := loadOrSkip(t)
	dir := t.TempDir()
	inflight, both := filepath.Join(dir, "inflight"), filepath.Join(dir, "both")
	for _, p := range []string{inflight, both} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.SetTargets(map[TargetKey]uint32{keyOf(t, inflight): 1, keyOf(t, both): 2}); err != nil {
		t.Fatal(err)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sp[0])
	defer unix.Close(sp[1])
	var sent []int
	for _, p := range []string{inflight, inflight, both} {
		fd, err := unix.Open(p, unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, fd)
	}
	// Three messages: the same description twice, and one still held as an fd.
	for _, fd := range sent {
		if err := unix.Sendmsg(sp[0], []byte{0}, unix.UnixRights(fd), nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	unix.Close(sent[0])
	unix.Close(sent[1])
	defer unix.Close(sent[2])

	var files, flying []Record
	if err := f.Files(func(r *Record) error {
		if r.Target == 1 || r.Target == 2 {
			files = append(files, *r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.InFlight(context.Background(), []string{"/proc/self/ns/net"}, func(r *Flight) error {
		if r.Target == 1 || r.Target == 2 {
			flying = append(flying, r.Record)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Out of time: no namespace entered, the pass says so.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.InFlight(done, []string{"/proc/self/ns/net"}, func(*Flight) error {
		t.Error("a record read after the pass's time was up")
		return nil
	}); !errors.Is(err, context.Canceled) {
		t.Errorf("a pass out of time: %v, want it to say so", err)
	}
	if len(files) != 1 || files[0].Target != 2 {
		t.Errorf("fds %+v, want the one still held", files)
	}
	// The two in-flight opens of inflight are two descriptions; both's description
	// was reported as an fd for this cgroup already.
	if len(flying) != 2 || flying[0].Target != 1 || flying[1].Target != 1 || flying[0].File == flying[1].File {
		t.Fatalf("in flight %+v, want two descriptions of the in-flight file", flying)
	}
	if flying[0].Kind != KindInFlight || flying[0].CgroupId != files[0].CgroupId || flying[0].Pid != 0 {
		t.Errorf("in-flight record %+v: want kind %d, the socket's cgroup %d, no PID", flying[0], KindInFlight, files[0].CgroupId)
	}
}

// A file registered with an io_uring and closed is held by the ring alone: Files
// reports each registered description once per ring and cgroup, with the ring's fd.
func TestRegisteredFilesAreReported(t *testing.T) {
	f := loadOrSkip(t)
	path := filepath.Join(t.TempDir(), "queue")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.SetTargets(map[TargetKey]uint32{keyOf(t, path): 4}); err != nil {
		t.Fatal(err)
	}
	ring, err := uring.New()
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		t.Skipf("io_uring is not available here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ring)
	var fds []int32
	for range 2 {
		fd, err := unix.Open(path, unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, int32(fd))
	}
	// The first description in two slots, the second in one: two descriptions held.
	if err := uring.Register(ring, []int32{fds[0], fds[1], fds[0]}); err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		unix.Close(int(fd))
	}
	pid := uint32(os.Getpid())
	for scan := range 2 {
		var got []Record
		if err := f.Files(func(r *Record) error {
			if r.Pid == pid && (r.Kind != KindNetNS) {
				got = append(got, *r)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		descs := map[uint64]bool{}
		for _, r := range got {
			if r.Kind != KindRegistered || r.Target != 4 || r.Fd != uint32(ring) || r.CgroupId == 0 {
				t.Errorf("scan %d: record %+v, want target 4 registered with ring %d", scan, r, ring)
			}
			descs[r.File] = true
		}
		// Copies of one description in a ring are one record: they fill no cap.
		if len(got) != 2 || len(descs) != 2 {
			t.Errorf("scan %d: %d records of %d descriptions, want one record for each of the ring's 2 descriptions (in 3 slots)", scan, len(got), len(descs))
		}
	}
}

// A unix socket made in a network namespace its maker left names the namespace by its
// inode, once per scan: no process is in that namespace, and what its sockets hold in
// flight is read only from inside it, through the socket.
func TestSocketNamespacesAreNamed(t *testing.T) {
	f := loadOrSkip(t)
	if err := f.SetTargets(map[TargetKey]uint32{}); err != nil {
		t.Fatal(err)
	}
	type made struct {
		sp  [2]int
		ino uint64
		err error
	}
	done := make(chan made, 1)
	home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		t.Fatal(err)
	}
	defer home.Close()
	go func() {
		// Only the sockets keep the namespace: the thread goes back home, since the
		// process's main thread, which Go never ends, may be the one running this (and
		// /proc/self/ns/net, which later tests read, is the main thread's).
		runtime.LockOSThread()
		var m made
		defer func() {
			if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err == nil {
				runtime.UnlockOSThread()
			}
			done <- m
		}()
		if m.err = unix.Unshare(unix.CLONE_NEWNET); m.err == nil {
			var st unix.Stat_t
			if m.err = unix.Stat(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), &st); m.err == nil {
				m.ino = st.Ino
				var sp [2]int
				sp, m.err = unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
				m.sp = sp
			}
		}
	}()
	m := <-done
	if m.err != nil {
		t.Fatalf("making sockets in a new network namespace: %v", m.err)
	}
	defer unix.Close(m.sp[0])
	defer unix.Close(m.sp[1])
	pid := uint32(os.Getpid())
	var named []Record
	if err := f.Files(func(r *Record) error {
		if r.Kind == KindNetNS && r.File == m.ino {
			named = append(named, *r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(named) != 1 || named[0].Pid != pid || (named[0].Fd != uint32(m.sp[0]) && named[0].Fd != uint32(m.sp[1])) {
		t.Errorf("named %+v, want the namespace %d once, by one of fds %v", named, m.ino, m.sp)
	}
}

// The decoder reads the layout the generated Record declares, field for field.
func TestRecordLayout(t *testing.T) {
	if n := binary.Size(Record{}); n != RecordSize {
		t.Fatalf("Record is %d bytes, RecordSize %d", n, RecordSize)
	}
	want := Record{CgroupId: 1, File: 2, Start: 3, Size: 4, Pgoff: 5, Pid: 6, Fd: 7, Target: 8, Kind: 9}
	var b [RecordSize]byte
	if _, err := binary.Encode(b[:], binary.NativeEndian, &want); err != nil {
		t.Fatal(err)
	}
	var got Record
	DecodeRecord(&b, &got)
	if got != want {
		t.Errorf("DecodeRecord = %+v, want %+v", got, want)
	}
}

func TestReadRecords(t *testing.T) {
	two := bytes.Repeat([]byte{1}, 2*RecordSize)
	n := 0
	if err := ReadRecords(bytes.NewReader(two), func(*Record) error { n++; return nil }); err != nil || n != 2 {
		t.Errorf("two records: %d read, %v", n, err)
	}
	if err := ReadRecords(bytes.NewReader(two[:RecordSize+10]), func(*Record) error { return nil }); err == nil {
		t.Error("a record cut short was read")
	}
	stop := errors.New("stop")
	n = 0
	if err := ReadRecords(bytes.NewReader(two), func(*Record) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Errorf("fn's error: %d read, %v", n, err)
	}
}

func FuzzReadRecords(f *testing.F) {
	// A task_vma record (mapping of 8 KiB at page 1) and a task_file record, as on amd64.
	vma := Record{CgroupId: 8812, Start: 0x7f1c2a400000, Size: 8192, Pgoff: 1, Pid: 4242, Target: 0, Kind: KindVMA}
	fd := Record{CgroupId: 8812, File: 0xffff8d4a1c3e2f00, Pid: 4242, Fd: 5, Target: 1, Kind: KindFD}
	seed, _ := binary.Append(nil, binary.NativeEndian, &vma)
	seed, _ = binary.Append(seed, binary.NativeEndian, &fd)
	f.Add(seed)
	f.Add(seed[:RecordSize+3])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, out []byte) {
		var got []Record
		err := ReadRecords(bytes.NewReader(out), func(r *Record) error { got = append(got, *r); return nil })
		if (err == nil) != (len(out)%RecordSize == 0) || len(got) != len(out)/RecordSize {
			t.Fatalf("%d bytes: %d records, %v", len(out), len(got), err)
		}
		// Each record is what the generated type's layout says those bytes are.
		for i, r := range got {
			var want Record
			if _, err := binary.Decode(out[i*RecordSize:], binary.NativeEndian, &want); err != nil || r != want {
				t.Fatalf("record %d: %+v, the layout says %+v (%v)", i, r, want, err)
			}
		}
	})
}

// A pass over a process with a million mappings, none of them a target's: the kernel
// stops a read that met a million objects without writing (EAGAIN), and the pass reads
// on from there to the mapping that counts.
func TestAPassReadsOnPastAMillionMappingsOfNothing(t *testing.T) {
	f := loadOrSkip(t)
	const pages = 1_000_100
	const limit = "/proc/sys/vm/max_map_count"
	old, err := os.ReadFile(limit)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(limit, []byte(strconv.Itoa(pages+100_000)), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(limit, old, 0) })
	// One region, every other page made inaccessible: a mapping per page, and no memory.
	region, err := unix.Mmap(-1, 0, pages*4096, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(region)
	for i := 0; i < pages; i += 2 {
		if err := unix.Mprotect(region[i*4096:(i+1)*4096], unix.PROT_NONE); err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
	}
	path := filepath.Join(t.TempDir(), "dma")
	if err := os.WriteFile(path, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.SetTargets(map[TargetKey]uint32{keyOf(t, path): 7}); err != nil {
		t.Fatal(err)
	}
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	m, err := unix.Mmap(int(file.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	pid, found := uint32(os.Getpid()), 0
	if err := f.VMAs(func(r *Record) error {
		if r.Pid == pid && r.Target == 7 {
			found++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if found != 1 {
		t.Fatalf("%d mappings of the target found, want 1", found)
	}
}
