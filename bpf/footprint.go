// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"maps"
	"os"
	"runtime"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Kinds of footprint records.
const (
	KindFD       = 0
	KindVMA      = 1
	KindInFlight = 2 // a file sent over a unix socket and not received yet
	// KindInFlightMore: a socket of the record's cgroup holds more files in flight
	// than one read of the iterator takes; those are not reported.
	KindInFlightMore = 3
	// KindRegistered: a target registered with an io_uring of the record's process (Fd
	// is the ring's), held open by the ring with no fd of its own.
	KindRegistered = 4
	// KindRingMore: a ring of the record's cgroup holds files the iterator did not
	// read (a table larger than it reads, a socket of another namespace).
	KindRingMore = 5
	// KindNetNS: the record's process holds a unix socket (Fd) of the network namespace
	// whose inode number is in File, the first met of that namespace's in this scan and
	// the record's cgroup: a namespace no process is in is read from inside it, through
	// that socket.
	KindNetNS = 6
	// KindPastCap: a socket or ring of the record's cgroup holds more distinct targets
	// than a scan writes for one (Target: the first past the cap).
	KindPastCap = 7
	// KindRingLayout: a ring of the record's cgroup is of a layout the program does not
	// know, so its files were not read.
	KindRingLayout = 8
	// KindNetNSMember: the record's process is in the network namespace whose inode
	// number is in File, the first met of that namespace's processes in this scan.
	KindNetNSMember = 9
	// KindTick: Tick fds or mappings were walked since the last tick, the record's
	// process's among the last: a walk of fds or mappings of no target writes nothing
	// else, and a scan's time must be seen to pass.
	KindTick = 10
	// KindHeavy: the record's process holds more than HeavyFDs fds, every one walked at
	// each scan (Files).
	KindHeavy = 11
	// KindUnlinked: the record's process holds open (Fd) a regular file with no name left
	// on its own root, an overlay: its container's writable layer. File is its inode,
	// Size its size; once per scan, inode and cgroup.
	KindUnlinked = 12
	// KindProcess: the record's process (Processes).
	KindProcess = 13
)

// Tick and HeavyFDs are TICK and HEAVY_FDS of footprint.bpf.c.
const (
	Tick     = 4096
	HeavyFDs = 65536
)

// Record is one open fd or one mapping of a target file, as the iterators report it.
type Record = footprintRecord

// TargetKey identifies a target file in the kernel: a character device by its device
// number, a regular file by (device, inode). Device numbers are the kernel's encoding.
type TargetKey = footprintTargetKey

// KernelDev converts a device number as stat reports it to the kernel's internal
// encoding (major<<20 | minor), which is what inodes and super blocks hold.
func KernelDev(dev uint64) uint32 {
	return unix.Major(dev)<<20 | unix.Minor(dev)
}

// Footprint is the loaded footprint iterators.
type Footprint struct {
	objs  footprintObjects
	files *link.Iter
	vmas  *link.Iter
	unix  *link.Iter
	netns *link.Iter
	procs *link.Iter
	sends []link.Link // the tracepoints that say who sends through a socket
	scan  uint32
	pass  uint32 // of InFlight
	mmap  []link.Link
	maps  *mappers // nil until FollowMappers
}

// LoadFootprint loads the task_file and task_vma iterators. It fails when the kernel
// lacks BPF iterators or BTF.
func LoadFootprint() (*Footprint, error) {
	if err := haveSyscall(); err != nil {
		return nil, fmt.Errorf("loading footprint programs: %w", err)
	}
	var f Footprint
	if err := loadFootprintObjects(&f.objs, nil); err != nil {
		return nil, fmt.Errorf("loading footprint programs: %w", err)
	}
	var err error
	if f.files, err = link.AttachIter(link.IterOptions{Program: f.objs.Nr1TaskFile}); err != nil {
		_ = f.objs.Close()
		return nil, fmt.Errorf("attaching task_file iterator: %w", err)
	}
	if f.vmas, err = link.AttachIter(link.IterOptions{Program: f.objs.Nr1TaskVma}); err != nil {
		_ = f.files.Close()
		_ = f.objs.Close()
		return nil, fmt.Errorf("attaching task_vma iterator: %w", err)
	}
	if f.unix, err = link.AttachIter(link.IterOptions{Program: f.objs.Nr1Unix}); err != nil {
		_ = f.vmas.Close()
		_ = f.files.Close()
		_ = f.objs.Close()
		return nil, fmt.Errorf("attaching unix iterator: %w", err)
	}
	if f.netns, err = link.AttachIter(link.IterOptions{Program: f.objs.Nr1TaskNetns}); err != nil {
		_ = f.unix.Close()
		_ = f.vmas.Close()
		_ = f.files.Close()
		_ = f.objs.Close()
		return nil, fmt.Errorf("attaching task iterator: %w", err)
	}
	if f.procs, err = link.AttachIter(link.IterOptions{Program: f.objs.Nr1Processes}); err != nil {
		_ = f.netns.Close()
		_ = f.unix.Close()
		_ = f.vmas.Close()
		_ = f.files.Close()
		_ = f.objs.Close()
		return nil, fmt.Errorf("attaching the processes' iterator: %w", err)
	}
	if err := f.followSenders(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return &f, nil
}

// senderTracepoints say who sends through a unix socket, or accepts it: the process
// files in flight on it count for.
var senderTracepoints = []struct {
	name     string
	prog     func(*footprintPrograms) *ebpf.Program
	optional bool // absent on some architectures
}{
	{"sys_enter_sendmsg", func(p *footprintPrograms) *ebpf.Program { return p.Nr1EnterSendmsg }, false},
	{"sys_enter_sendmmsg", func(p *footprintPrograms) *ebpf.Program { return p.Nr1EnterSendmmsg }, false},
	{"sys_exit_accept4", func(p *footprintPrograms) *ebpf.Program { return p.Nr1ExitAccept4 }, false},
	{"sys_exit_accept", func(p *footprintPrograms) *ebpf.Program { return p.Nr1ExitAccept }, true},
}

func (f *Footprint) followSenders() error {
	if err := ensureTracefs(); err != nil {
		return err
	}
	for _, tp := range senderTracepoints {
		l, err := link.Tracepoint("syscalls", tp.name, tp.prog(&f.objs.footprintPrograms), nil)
		if err != nil {
			if tp.optional && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return fmt.Errorf("attaching tracepoint %s: %w", tp.name, err)
		}
		f.sends = append(f.sends, l)
	}
	for _, p := range []compatProbe{
		{"kprobe/compat_sendmsg", f.objs.Nr1CompatSendmsg},
		{"kprobe/compat_sendmmsg", f.objs.Nr1CompatSendmmsg},
		{"kprobe/compat_socketcall", f.objs.Nr1CompatSocketcall},
		{"kretprobe/compat_socketcall", f.objs.Nr1CompatSocketcallExit},
		{"kretprobe/compat_accept", f.objs.Nr1CompatExitAccept},
	} {
		err := attachCompat(p, func(_ string, l link.Link) error {
			f.sends = append(f.sends, l)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Close releases the programs.
func (f *Footprint) Close() error {
	errs := []error{f.maps.close()}
	for _, l := range append(f.mmap, f.sends...) {
		errs = append(errs, l.Close())
	}
	return errors.Join(append(errs, f.procs.Close(), f.netns.Close(), f.unix.Close(), f.vmas.Close(), f.files.Close(), f.objs.Close())...)
}

// TargetBytes marks a target counted in mapped bytes in SetTargets' values: its
// mappings are reported once per cgroup, offset and length, whatever description maps
// them; a target counted in handles has each description's reported.
const TargetBytes = 1 << 31

// SetTargets replaces the target files; the value is the caller's index of the target,
// with TargetBytes for one counted in mapped bytes. Records carry the index alone.
func (f *Footprint) SetTargets(targets map[TargetKey]uint32) error {
	var (
		key  TargetKey
		keys []TargetKey
	)
	it := f.objs.Targets.Iterate()
	var v uint32
	for it.Next(&key, &v) {
		keys = append(keys, key)
	}
	for _, k := range keys {
		if err := f.objs.Targets.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clearing targets: %w", err)
		}
	}
	for k, v := range targets {
		if err := f.objs.Targets.Put(k, v); err != nil {
			return fmt.Errorf("setting target %+v: %w", k, err)
		}
	}
	if f.maps != nil {
		// A file mapped before it was a target marked nothing.
		f.maps.full = "new targets"
	}
	return nil
}

// Files runs the task_file iterator, calling fn for each open file description of a
// target in each cgroup: the first fd the iterator meets (lowest PID, then lowest fd),
// not the others sharing it; for each target registered with an io_uring, once per ring
// and cgroup; and once per network namespace of a unix socket. Records come
// in PID order; fn returning an error stops the iterator with it.
func (f *Footprint) Files(fn func(*Record) error) error {
	f.scan++
	if err := f.objs.Scan.Set(f.scan); err != nil {
		return fmt.Errorf("starting a footprint scan: %w", err)
	}
	return run(f.files, fn)
}

// Namespaces calls fn with a KindNetNSMember record for each network namespace a task
// is in, once per namespace, within the scan the last Files or FilesOf began: the
// record's Pid is the task's own id (a thread's, for a thread), through which its
// /proc/PID/ns/net names the namespace. A task costs a lookup, whatever it holds: for a
// scan that did not walk every process's fds.
func (f *Footprint) Namespaces(fn func(*Record) error) error {
	return run(f.netns, fn)
}

// Processes calls fn with the id of every process (a thread group's leader, its PID in
// the initial PID namespace), in PID order but for PID 1: what listing /proc gives, for
// a lookup per task. The task iterator was seen to begin past PID 1 (on 6.18): the init
// process, always there, is then named last.
func (f *Footprint) Processes(fn func(pid uint32) error) error {
	initNamed := false
	err := run(f.procs, func(r *Record) error {
		if r.Kind != KindProcess {
			return fmt.Errorf("the processes' iterator wrote a record of kind %d", r.Kind)
		}
		initNamed = initNamed || r.Pid == 1
		return fn(r.Pid)
	})
	if err == nil && !initNamed {
		err = fn(1)
	}
	return err
}

// ProcessesMade is how many processes were made (forks and clones that are not threads)
// since the mappers were followed; false before FollowMappers, when none is counted.
// A list of Processes taken after a count is whole for as long as the count stays.
func (f *Footprint) ProcessesMade() (uint64, bool, error) {
	if f.maps == nil {
		return 0, false, nil
	}
	var n uint64
	if err := f.objs.ProcessesMade.Get(&n); err != nil {
		return 0, false, fmt.Errorf("reading processes_made: %w", err)
	}
	return n, true, nil
}

// SetHeavyFDs sets how many fds make a process heavy (KindHeavy), HeavyFDs until set.
func (f *Footprint) SetHeavyFDs(n uint64) error {
	if err := f.objs.HeavyFds.Set(n); err != nil {
		return fmt.Errorf("setting heavy_fds: %w", err)
	}
	return nil
}

// ErrNextProcess, returned by FilesOf's fn, ends the walk of the record's process, and
// FilesOf goes on with the next one named.
var ErrNextProcess = errors.New("on to the next process")

// FilesOf is Files over the processes named, one at a time, in their order, within one
// scan: a description several of them hold is reported once per cgroup, as by Files. A
// process gone since it was named is skipped. User space chooses what is walked last:
// the process whose table is a flood, so that it costs no other process its walk. pids
// is read as the walk goes, so that it can name processes made meanwhile.
func (f *Footprint) FilesOf(pids iter.Seq[uint32], fn func(*Record) error) error {
	f.scan++
	if err := f.objs.Scan.Set(f.scan); err != nil {
		return fmt.Errorf("starting a footprint scan: %w", err)
	}
	rd := bufio.NewReaderSize(nil, readSize)
	for pid := range pids {
		it, err := iterFor(f.objs.Nr1TaskFile, pid)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			return fmt.Errorf("walking the fds of process %d: %w", pid, err)
		}
		rd.Reset(again{it})
		err = ReadRecords(rd, fn)
		_ = it.Close()
		if err != nil && !errors.Is(err, ErrNextProcess) {
			return err
		}
	}
	return nil
}

// Opened is a description of a target counted in open handles, as a process opened it
// (or took it with pidfd_getfd, when its opener was not known): its address, the same as
// records' File, its target, and the cgroup of its opener and that cgroup's nearest
// ancestors, nearest first (0 past the root).
type Opened struct {
	File   uint64
	Target uint32
	Who    [4]uint64
	// At is when it was opened, on CLOCK_MONOTONIC.
	At uint64
}

// Opened calls fn for each description opened since the footprint was loaded that is
// still held, whether by fds or otherwise: the kernel holds one for a process while an
// io_uring request or a blocking read is pending on it, with no fd left. The released
// ones are forgotten first. An open made before the programs were attached, or through
// an io_uring (no syscall), is not among them. The table is read in batches, bucket by
// bucket: opens and releases meanwhile never restart the reading, and a description
// the kernel hands twice is named once.
func (f *Footprint) Opened(fn func(Opened) error) error {
	if _, err := f.objs.Nr1FpForget.Run(&ebpf.RunOptions{}); err != nil {
		return fmt.Errorf("forgetting released descriptions: %w", err)
	}
	keys := make([]uint64, 1024)
	vals := make([]footprintOpened, 1024)
	named := map[uint64]bool{}
	var cursor ebpf.MapBatchCursor
	for {
		n, err := f.objs.Opened.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			if named[keys[i]] {
				continue
			}
			named[keys[i]] = true
			if err := fn(Opened{File: keys[i], Target: vals[i].Target, Who: vals[i].Who.Id, At: vals[i].At}); err != nil {
				return err
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the descriptions opened: %w", err)
		}
	}
}

// ErrInFlightFull says the kernel's tables of files in flight were full: what did not
// fit was not counted, for any cgroup.
var ErrInFlightFull = errors.New("the tables of files in flight are full")

// Flight is a record of the pass over sockets: Record, and the nearest ancestors of its
// cgroup, nearest first (0 past the root). The cgroup is the sender's, which may have
// died since it sent (its container exited): what it sent then counts for the nearest
// ancestor that is some pod's.
type Flight struct {
	Record
	Up [3]uint64
}

// InFlight runs the unix socket iterator in each network namespace named (paths of
// /proc/PID/ns/net; a socket is seen only from its own namespace), then calls fn for
// each open file description of a target sent over a unix socket and not received yet,
// once per description and the sender's cgroup (the process whose credentials the
// message carries; else the last seen sending through the socket it was sent from, or
// accepting it; else the one that made that socket), and not when Files, run before it
// in the same scan, reported it for that cgroup (KindInFlight; PID and fd 0); once for
// each sender of messages left unread, or of files not read (KindInFlightMore), and for
// each sender and target of which it sent more distinct files than are counted
// (KindPastCap). Files of a target counted in mapped bytes (TargetBytes) are not
// reported: they hold nothing. A namespace gone since it was named is skipped. When ctx
// ends between namespaces, what the namespaces read hold is still reported, and the
// error is ctx's.
func (f *Footprint) InFlight(ctx context.Context, netns []string, fn func(*Flight) error) error {
	f.pass++
	if err := f.objs.InflightPass.Set(f.pass); err != nil {
		return fmt.Errorf("starting a pass over sockets: %w", err)
	}
	cut, err := eachNamespace(ctx, netns, f.unix, func(ns string, rd io.Reader) error {
		// The program collects into maps: any output means it and this reader disagree.
		n, err := io.Copy(io.Discard, rd)
		if err == nil && n > 0 {
			err = fmt.Errorf("%d bytes of output, where none is written", n)
		}
		if err != nil {
			return fmt.Errorf("unix iterator in %s: %w", ns, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := f.collectInFlight(fn); err != nil {
		return err
	}
	var full uint32
	if err := f.objs.InflightFull.Get(&full); err != nil {
		return fmt.Errorf("reading the in-flight tables' state: %w", err)
	}
	if full == f.pass {
		return ErrInFlightFull
	}
	return cut
}

// collectInFlight reports what the unix iterator counted in this pass, the cgroups'
// records first (fn may stop the collection at any record: what it says of a cgroup as a
// whole must not be lost behind its files), and deletes what earlier passes left, fn's
// error or not.
func (f *Footprint) collectInFlight(fn func(*Flight) error) (err error) {
	var (
		key     footprintInflightCgroupKey
		cg      footprintInflightCgroup
		staleCG []footprintInflightCgroupKey
		more    = map[uint64][3]uint64{}
		past    []footprintInflightCgroupKey
		up      = map[uint64][3]uint64{}
	)
	cgroups := f.objs.InflightCgroups.Iterate()
	for cgroups.Next(&key, &cg) {
		switch {
		case cg.Pass != f.pass:
			staleCG = append(staleCG, key)
		case key.Target == anyTarget && cg.More != 0:
			more[key.CgroupId] = cg.Up
		case key.Target != anyTarget && cg.PastCap != 0:
			past = append(past, key)
			up[key.CgroupId] = cg.Up
		}
	}
	if err := cgroups.Err(); err != nil {
		return fmt.Errorf("reading cgroups with files in flight: %w", err)
	}
	var (
		file  footprintSeenKey
		val   footprintInflightFileVal
		stale []footprintSeenKey
	)
	defer func() {
		for _, k := range staleCG {
			if derr := f.objs.InflightCgroups.Delete(k); derr != nil && !errors.Is(derr, ebpf.ErrKeyNotExist) && err == nil {
				err = fmt.Errorf("forgetting a cgroup with files in flight: %w", derr)
			}
		}
		for _, k := range stale {
			if derr := f.objs.InflightFiles.Delete(k); derr != nil && !errors.Is(derr, ebpf.ErrKeyNotExist) && err == nil {
				err = fmt.Errorf("forgetting a file in flight: %w", derr)
			}
		}
	}()
	for _, k := range past {
		if err := fn(&Flight{Record{CgroupId: k.CgroupId, Target: k.Target, Kind: KindPastCap}, up[k.CgroupId]}); err != nil {
			return err
		}
	}
	for _, id := range slices.Sorted(maps.Keys(more)) {
		if err := fn(&Flight{Record{CgroupId: id, Kind: KindInFlightMore}, more[id]}); err != nil {
			return err
		}
	}
	files := f.objs.InflightFiles.Iterate()
	var failed error
	for files.Next(&file, &val) {
		if val.Pass != f.pass {
			stale = append(stale, file)
			continue
		}
		if failed == nil {
			// Past fn's error, the stale entries are still found.
			failed = fn(&Flight{Record{CgroupId: file.CgroupId, File: file.File, Target: val.Target, Kind: KindInFlight}, val.Up})
		}
	}
	if err := files.Err(); err != nil {
		return fmt.Errorf("reading files in flight: %w", err)
	}
	return failed
}

// anyTarget is the in-flight counts' target of a cgroup's own record (ANY_TARGET).
const anyTarget = 0xffffffff

// eachNamespace runs the iterator from inside each network namespace named (the
// iterator keeps the namespace it was opened in) and calls read with its output, on one
// thread locked for the pass, which goes from one namespace straight to the next and
// back to its own at the end. A namespace gone since it was named is skipped. When ctx
// ends between namespaces, the pass stops and cut says so. A thread that cannot get
// back is dropped with its goroutine, never left to run others in another namespace.
func eachNamespace(ctx context.Context, netns []string, it *link.Iter, read func(ns string, rd io.Reader) error) (cut, err error) {
	type result struct{ cut, err error }
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("network namespace of the agent: %w", err)}
			return
		}
		defer home.Close()
		var r result
		away := false
		for _, ns := range netns {
			if err := ctx.Err(); err != nil {
				r.cut = fmt.Errorf("unix iterator, before network namespace %s: %w", ns, err)
				break
			}
			entered, err := enter(ns)
			away = away || entered
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
				continue
			}
			if err == nil {
				err = readIn(ns, it, read)
			}
			if err != nil {
				r.err = err
				break
			}
		}
		if away {
			if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
				// Still locked: the thread ends with this goroutine.
				done <- result{err: fmt.Errorf("back to the agent's network namespace: %w", err)}
				return
			}
		}
		runtime.UnlockOSThread()
		done <- r
	}()
	r := <-done
	return r.cut, r.err
}

// enter moves the locked thread into the network namespace ns; entered says whether it
// left the one it was in.
func enter(ns string) (entered bool, err error) {
	target, err := os.Open(ns)
	if err != nil {
		return false, fmt.Errorf("network namespace %s: %w", ns, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return false, fmt.Errorf("entering network namespace %s: %w", ns, err)
	}
	return true, nil
}

// readIn opens the iterator in the namespace the thread is in, and reads it.
func readIn(ns string, it *link.Iter, read func(ns string, rd io.Reader) error) error {
	rd, err := it.Open()
	if err != nil {
		return fmt.Errorf("running the unix iterator in %s: %w", ns, err)
	}
	defer rd.Close()
	return read(ns, rd)
}

// VMAs runs the task_vma iterator, calling fn for each mapping of a target in each
// cgroup, in PID order, until fn returns an error: the first the iterator meets of those
// of one description, offset and length (a forked child's, one mapped again), not the
// others; and for the targets registered with an io_uring a process maps (its fd may be
// closed: the mapping keeps the ring), as Files does.
func (f *Footprint) VMAs(fn func(*Record) error) error {
	full, err := f.startFull()
	if err != nil {
		return err
	}
	f.scan++
	if err := f.objs.Scan.Set(f.scan); err != nil {
		return fmt.Errorf("starting a footprint scan: %w", err)
	}
	if err := run(f.vmas, fn); err != nil {
		return err
	}
	return f.endFull(full)
}

func run(it *link.Iter, fn func(*Record) error) error {
	rd, err := it.Open()
	if err != nil {
		return fmt.Errorf("running iterator: %w", err)
	}
	defer rd.Close()
	return ReadRecords(bufio.NewReaderSize(again{rd}, readSize), fn)
}

// readSize is how much one read of an iterator asks for: the kernel answers once it has
// that much, so a tick (KindTick) reaches fn within 16 records' walk, a few milliseconds
// of a flood of fds, rather than when 64 KiB of records have piled up.
const readSize = 16 * RecordSize

// again reads an iterator's output past the kernel's limit of objects met in one read
// with nothing written (bpf_seq_read's MAX_ITER_OBJECTS, a million): the kernel then
// answers EAGAIN, and the next read resumes where it stopped. A pod that makes a
// million mappings or files, none of them a target's, must not fail every scan. Each
// read moves the iterator on, so the retries end with the objects.
type again struct{ r io.Reader }

func (a again) Read(p []byte) (int, error) {
	for {
		n, err := a.r.Read(p)
		if n > 0 || !errors.Is(err, unix.EAGAIN) {
			return n, err //nolint:wrapcheck // a Reader passes io.EOF as it is
		}
	}
}

// RecordSize is the size of struct record in footprint.bpf.c, as the iterators write it.
const RecordSize = 56

// ReadRecords decodes the records an iterator wrote to rd, calling fn for each until fn
// returns an error. The output is a whole number of records: one cut short is an error.
func ReadRecords(rd io.Reader, fn func(*Record) error) error {
	var (
		buf [RecordSize]byte
		r   Record
	)
	for {
		if _, err := io.ReadFull(rd, buf[:]); err != nil {
			switch {
			case errors.Is(err, io.EOF):
				return nil
			case errors.Is(err, io.ErrUnexpectedEOF):
				return errors.New("reading iterator output: a record cut short")
			}
			return fmt.Errorf("reading iterator output: %w", err)
		}
		DecodeRecord(&buf, &r)
		if err := fn(&r); err != nil {
			return err
		}
	}
}

// DecodeRecord decodes one record as the kernel wrote it: struct record of
// footprint.bpf.c in the host's byte order. What the fields say is for the caller to
// check; any bytes decode.
func DecodeRecord(b *[RecordSize]byte, r *Record) {
	e := binary.NativeEndian
	*r = Record{
		CgroupId: e.Uint64(b[0:]),
		File:     e.Uint64(b[8:]),
		Start:    e.Uint64(b[16:]),
		Size:     e.Uint64(b[24:]),
		Pgoff:    e.Uint64(b[32:]),
		Pid:      e.Uint32(b[40:]),
		Fd:       e.Uint32(b[44:]),
		Target:   e.Uint32(b[48:]),
		Kind:     e.Uint32(b[52:]),
	}
}
