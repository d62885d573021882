// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Mapper is what the kernel keeps of a process that may map a target or a ring.
type Mapper = footprintMapper

// mappers is what user space keeps of the mappers between passes: for each process
// whose last walk found nothing, the mark that walk stood for. A process is walked again
// once its mark moved, and never while it stays.
type mappers struct {
	links   []link.Link
	cleared map[uint32]uint64
	// lost and shared as the last full pass found them: a move means a mark not kept
	// or a mapping in shared memory since, and the next pass walks every process.
	lost, shared uint64
	// why the next pass walks every process regardless: the first pass, or new targets.
	full string
	rd   *bufio.Reader
}

func (m *mappers) close() error {
	if m == nil {
		return nil
	}
	var errs []error
	for _, l := range m.links {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// attachMmap attaches the mmap tracepoints and the 32-bit mmaps' probes, once: they
// report changes and mark mappers.
func (f *Footprint) attachMmap() error {
	if f.mmap != nil {
		return nil
	}
	if err := ensureTracefs(); err != nil {
		return err
	}
	// The entry first: an mmap under way when the exit is attached first would be
	// reported at its exit unmarked at its entry, which is harmless; the other order
	// would lose its mark.
	for _, tp := range []struct {
		name string
		prog *ebpf.Program
	}{{"sys_enter_mmap", f.objs.Nr1EnterMmap}, {"sys_exit_mmap", f.objs.Nr1ExitMmap}} {
		name := tp.name
		l, err := link.Tracepoint("syscalls", name, tp.prog, nil)
		if err != nil {
			for _, l := range f.mmap {
				_ = l.Close()
			}
			f.mmap = nil
			return fmt.Errorf("attaching to tracepoint syscalls/%s: %w", name, err)
		}
		f.mmap = append(f.mmap, l)
	}
	for _, p := range []compatProbe{
		{"kprobe/compat_mmap2", f.objs.Nr1CompatEnterMmap2},
		{"kprobe/compat_old_mmap", f.objs.Nr1CompatEnterOldMmap},
		{"kretprobe/compat_mmap2", f.objs.Nr1CompatExitMmap2},
		{"kretprobe/compat_old_mmap", f.objs.Nr1CompatExitOldMmap},
	} {
		err := attachCompat(p, func(_ string, l link.Link) error {
			f.mmap = append(f.mmap, l)
			return nil
		})
		if err != nil {
			for _, l := range f.mmap {
				_ = l.Close()
			}
			f.mmap = nil
			return err
		}
	}
	return nil
}

// FollowMappers attaches the tracepoints that mark the processes that may map a target
// or a ring (mmap, fork, exec and exit), so that MapperVMAs walks their mappings only.
// Until it is called, or when it fails, every pass walks every process.
func (f *Footprint) FollowMappers() error {
	if f.maps != nil {
		return nil
	}
	if err := f.attachMmap(); err != nil {
		return fmt.Errorf("following mappers: %w", err)
	}
	m := &mappers{cleared: map[uint32]uint64{}, full: "the first pass", rd: bufio.NewReaderSize(nil, readSize)}
	attach := []func() (link.Link, error){
		func() (link.Link, error) {
			return link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_fork", Program: f.objs.Nr1Fork})
		},
		func() (link.Link, error) { return link.Tracepoint("sched", "sched_process_exec", f.objs.Nr1Exec, nil) },
		func() (link.Link, error) { return link.Tracepoint("sched", "sched_process_exit", f.objs.Nr1Exit, nil) },
	}
	for _, a := range attach {
		l, err := a()
		if err != nil {
			_ = m.close()
			return fmt.Errorf("following mappers: %w", err)
		}
		m.links = append(m.links, l)
	}
	if err := f.objs.Following.Set(uint32(1)); err != nil {
		_ = m.close()
		return fmt.Errorf("following mappers: %w", err)
	}
	f.maps = m
	return nil
}

// maxWalked is how many processes a pass walks one by one at most: an iterator per
// process costs a few system calls more than one iterator over all, so that past this
// many (a pod that forks thousands of mappers), one over all is cheaper.
var maxWalked = 1024

// MapperPass says what a pass over mappings walked.
type MapperPass struct {
	// Full is why every process was walked; empty when only the mappers were.
	Full string
	pids []uint32 // the processes a pass over the mappers walked
}

// MapperVMAs is VMAs for the processes that may map a target or a ring: those whose last
// walk found one, and those marked since a walk found none. Every process is walked
// instead when that set cannot be trusted: before FollowMappers, at the first pass, after
// new targets, a mark not kept or a mapping in memory shared between processes. The
// processes are walked in PID order.
func (f *Footprint) MapperVMAs(fn func(*Record) error) (MapperPass, error) {
	m := f.maps
	if m == nil {
		return MapperPass{Full: "mappers not followed"}, f.VMAs(fn)
	}
	lost, shared, err := f.mapperCounts()
	if err != nil {
		return MapperPass{}, err
	}
	why := m.full
	switch {
	case why != "":
	case lost != m.lost:
		why = "a mark not kept"
	case shared != m.shared:
		why = "a mapping in shared memory"
	}
	if why != "" {
		return MapperPass{Full: why}, f.VMAs(fn)
	}
	before, err := f.Mappers()
	if err != nil {
		return MapperPass{}, err
	}
	f.scan++
	if err := f.objs.Scan.Set(f.scan); err != nil {
		return MapperPass{}, fmt.Errorf("starting a footprint scan: %w", err)
	}
	var walk []uint32
	for pid, v := range before {
		if v.Always != 0 || m.cleared[pid] != v.Seq {
			walk = append(walk, pid)
		}
	}
	if len(walk) > maxWalked {
		return MapperPass{Full: "more mappers than walked one by one"}, f.VMAs(fn)
	}
	slices.Sort(walk)
	pass := MapperPass{pids: walk}
	for _, pid := range walk {
		if err := f.vmasOf(pid, fn); err != nil {
			return pass, err
		}
	}
	after, err := f.Mappers()
	if err != nil {
		return pass, err
	}
	m.settle(before, after, f.scan)
	return pass, nil
}

// settle clears each process that was marked before the pass and whose walk found
// nothing (or that exited), and forgets the processes gone.
func (m *mappers) settle(before, after map[uint32]Mapper, scan uint32) {
	for pid, v := range before {
		if a, ok := after[pid]; !ok || a.Found != scan {
			m.cleared[pid] = v.Seq
		} else {
			delete(m.cleared, pid)
		}
	}
	for pid := range m.cleared {
		if _, ok := after[pid]; !ok {
			delete(m.cleared, pid)
		}
	}
}

// fullPass is what a pass over every process stands for: the marks and counts read
// before it began.
type fullPass struct {
	before       map[uint32]Mapper
	lost, shared uint64
}

func (f *Footprint) startFull() (*fullPass, error) {
	if f.maps == nil {
		return nil, nil
	}
	var (
		p   fullPass
		err error
	)
	if p.lost, p.shared, err = f.mapperCounts(); err != nil {
		return nil, err
	}
	if p.before, err = f.Mappers(); err != nil {
		return nil, err
	}
	return &p, nil
}

// endFull settles the mappers after a whole pass over every process.
func (f *Footprint) endFull(p *fullPass) error {
	if p == nil {
		return nil
	}
	after, err := f.Mappers()
	if err != nil {
		return err
	}
	f.maps.settle(p.before, after, f.scan)
	f.maps.lost, f.maps.shared, f.maps.full = p.lost, p.shared, ""
	return nil
}

func (f *Footprint) mapperCounts() (lost, shared uint64, err error) {
	if err := f.objs.MappersLost.Get(&lost); err != nil {
		return 0, 0, fmt.Errorf("reading mappers_lost: %w", err)
	}
	if err := f.objs.SharedMapped.Get(&shared); err != nil {
		return 0, 0, fmt.Errorf("reading shared_mapped: %w", err)
	}
	return lost, shared, nil
}

// Mappers is the kernel's mappers, by process ID.
func (f *Footprint) Mappers() (map[uint32]Mapper, error) {
	out := map[uint32]Mapper{}
	keys := make([]uint32, 1024)
	vals := make([]Mapper, 1024)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := f.objs.Mappers.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			out[keys[i]] = vals[i]
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the mappers: %w", err)
		}
	}
}

// vmasOf runs the task_vma iterator over the mappings of one process. A process gone
// meanwhile has none: the kernel looks the PID up as it iterates.
func (f *Footprint) vmasOf(pid uint32, fn func(*Record) error) error {
	it, err := iterFor(f.objs.Nr1TaskVma, pid)
	if err != nil {
		return fmt.Errorf("walking the mappings of process %d: %w", pid, err)
	}
	defer it.Close()
	f.maps.rd.Reset(again{it})
	return ReadRecords(f.maps.rd, fn)
}

// iterFor opens a task iterator of prog for the tasks of one process. cilium/ebpf
// attaches task iterators to every task only, so the link is made here: bpf(2)'s
// BPF_LINK_CREATE with bpf_iter_link_info's task.pid, then BPF_ITER_CREATE. The link
// is closed at once; the iterator keeps it.
func iterFor(prog *ebpf.Program, pid uint32) (*os.File, error) {
	info := struct{ tid, pid, pidFD, _ uint32 }{pid: pid}
	// A 64-bit kernel's layout: the agent is built for amd64 and arm64 only.
	attr := struct {
		progFD, targetFD, attachType, flags uint32
		iterInfo                            unsafe.Pointer
		iterInfoLen                         uint32
		_                                   uint32
	}{
		progFD:      uint32(prog.FD()), //nolint:gosec // an fd
		attachType:  uint32(ebpf.AttachTraceIter),
		iterInfo:    unsafe.Pointer(&info), //nolint:gosec // bpf(2) takes its attributes by address
		iterInfoLen: uint32(unsafe.Sizeof(info)),
	}
	linkFD, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_LINK_CREATE, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr)) //nolint:gosec // as above
	runtime.KeepAlive(&info)
	if errno != 0 {
		return nil, fmt.Errorf("linking the iterator: %w", errno)
	}
	defer unix.Close(int(linkFD))
	create := struct{ linkFD, flags uint32 }{linkFD: uint32(linkFD)}                                                              //nolint:gosec // an fd
	iterFD, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_ITER_CREATE, uintptr(unsafe.Pointer(&create)), unsafe.Sizeof(create)) //nolint:gosec // as above
	if errno != 0 {
		return nil, fmt.Errorf("creating the iterator: %w", errno)
	}
	return os.NewFile(iterFD, "bpf_iter"), nil
}
