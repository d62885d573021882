// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/cgroupfs"
	"github.com/neureality-sdk/nr1-agent/internal/untrusted"
)

// Procfs is the footprint source that reads /proc/PID/{cgroup,maps,fd,fdinfo}.
type Procfs struct {
	root     string // procfs root (--path.procfs)
	cgroupV2 string // the cgroup v2 mount, to turn a process's cgroup path into its id
	targets  *Targets
	// compare orders two fds by open file description (kcmp(2)); a test of a fixture
	// tree, whose PIDs are not processes, gives its own.
	compare func(pid1, pid2, fd1, fd2 int) (int, error)
}

// NewProcfs returns the procfs source.
func NewProcfs(procRoot, cgroupV2 string, targets *Targets) *Procfs {
	return &Procfs{root: procRoot, cgroupV2: cgroupV2, targets: targets, compare: kcmpFile}
}

// Name is "procfs".
func (p *Procfs) Name() string { return "procfs" }

// Close releases nothing.
func (p *Procfs) Close() error { return nil }

// Scan reads every process in PID order. A process that exits during the scan is
// skipped. When ctx ends, the scan stops and says where (Scan.Cutoff).
func (p *Procfs) Scan(ctx context.Context) (*Scan, error) {
	start := time.Now()
	dir, err := os.ReadDir(p.root)
	if err != nil {
		return nil, fmt.Errorf("procfs %s: %w", p.root, err)
	}
	pids := make([]int, 0, len(dir))
	for _, e := range dir {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	s := &Scan{Source: p.Name()}
	st := &scanState{ctx: ctx, ids: map[string]uint64{}, buf: make([]byte, 0, 64<<10), descs: newDescriber(p.compare), fdTargets: map[int]bool{}}
	for _, pid := range pids {
		if ctx.Err() != nil {
			s.Cutoff = pid
			break
		}
		if err := p.process(st, s, pid); err != nil {
			switch {
			case errors.Is(err, ErrNoKcmp):
				return nil, fmt.Errorf("procfs scan: %w", err)
			case errors.Is(err, errOutOfTime):
				s.Cutoff = pid
			case gone(err):
			case errors.Is(err, fs.ErrPermission):
				s.Unreadable++
			default:
				return nil, err
			}
		}
		if s.Cutoff != 0 {
			break
		}
	}
	// O_PATH is the description's: one look at the fd kept for each is enough.
	s.Handles = slices.DeleteFunc(s.Handles, func(h Handle) bool {
		return pathOnly(filepath.Join(p.root, strconv.Itoa(h.PID)), strconv.Itoa(h.FD))
	})
	fillFdinfo(p.root, p.targets, s)
	s.Took = time.Since(start)
	return s, nil
}

type scanState struct {
	ctx context.Context
	ids map[string]uint64 // cgroup path → id, for this scan
	// deep are the processes of the cgroups nested past PATH_MAX, which /proc cannot
	// name: PID → cgroup id, read once a scan when the first of them is met.
	deep  map[int]uint64
	buf   []byte
	descs describer
	// fdTargets are the targets the process being read has fds on.
	fdTargets map[int]bool
	// ringMapped and ringFD say the process maps an io_uring's queues, and has an fd on
	// one.
	ringMapped, ringFD bool
}

// errOutOfTime stops a process's scan part way when the scan's time is up.
var errOutOfTime = errors.New("footprint scan out of time")

// gone reports errors that mean the process (or its fd) went away while we looked.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH)
}

func (p *Procfs) process(st *scanState, s *Scan, pid int) error {
	base := filepath.Join(p.root, strconv.Itoa(pid))
	cg, err := p.cgroupID(st, base)
	if errors.Is(err, unix.ENAMETOOLONG) {
		cg, err = p.deepCgroupID(st, pid)
	}
	if err != nil {
		return err
	}
	mapped := len(s.Mappings)
	st.ringMapped, st.ringFD = false, false
	if err := p.maps(st, s, base, pid, cg); err != nil {
		return err
	}
	clear(st.fdTargets)
	if err := p.fds(st, s, base, pid, cg); err != nil {
		return err
	}
	// A mapping of a target counted in handles keeps its description open after its fd
	// is closed, and kcmp compares fds only: which description a mapping keeps is not
	// known here. One in a process with fds on the target is taken for one of theirs; one
	// in a process with none may be its own, or one a parent or another process of the CG
	// still holds by an fd. Counting it could count a description twice, so it is not
	// counted and its cgroup's handles are a lower bound (the BPF source tells them
	// apart).
	for _, m := range s.Mappings[mapped:] {
		if p.targets.At(m.Target).Measure == OpenHandles && !st.fdTargets[m.Target] {
			if !slices.Contains(s.Uncounted, cg) {
				s.Uncounted = append(s.Uncounted, cg)
			}
			break
		}
	}
	// A ring kept by a mapping alone: what it holds is not in any fdinfo here.
	if st.ringMapped && !st.ringFD && !slices.Contains(s.Uncounted, cg) {
		s.Uncounted = append(s.Uncounted, cg)
	}
	return nil
}

// deepCgroupID finds the cgroup of a process whose cgroup no path reaches (a pod nesting
// its cgroups past PATH_MAX; /proc writes the path cut there): among the processes every
// v2 cgroup lists, read by the cgroups' ids. A process in none of them is gone.
func (p *Procfs) deepCgroupID(st *scanState, pid int) (uint64, error) {
	if p.cgroupV2 == "" {
		return 0, nil // no v2 membership (legacy host)
	}
	if st.deep == nil {
		st.deep = map[int]uint64{}
		var pids []int
		err := cgroupfs.Walk(p.cgroupV2, func(fd int, id uint64) error {
			var err error
			if pids, err = cgroupfs.Procs(fd, pids[:0]); err != nil {
				return err
			}
			for _, pid := range pids {
				st.deep[pid] = id
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("process %d, in a cgroup nested past PATH_MAX: %w", pid, err)
		}
	}
	id, ok := st.deep[pid]
	if !ok {
		return 0, fmt.Errorf("process %d, in a cgroup nested past PATH_MAX: %w", pid, fs.ErrNotExist)
	}
	return id, nil
}

func (p *Procfs) cgroupID(st *scanState, base string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(base, "cgroup"))
	if err != nil {
		return 0, fmt.Errorf("process cgroup: %w", err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		path, ok := bytes.CutPrefix(line, []byte("0::"))
		if !ok {
			continue
		}
		if id, ok := st.ids[string(path)]; ok {
			return id, nil
		}
		// The kernel writes the path from the reader's cgroup namespace: one leaving it
		// ("/../…") names nothing below cgroupV2, and the process is no container's.
		if !bytes.HasPrefix(path, []byte("/")) || slices.Contains(strings.Split(string(path), "/"), "..") {
			st.ids[string(path)] = 0
			return 0, nil
		}
		var stat unix.Stat_t
		if err := unix.Stat(filepath.Join(p.cgroupV2, string(path)), &stat); err != nil {
			return 0, fmt.Errorf("cgroup %s: %w", untrusted.Quote(string(path)), err)
		}
		st.ids[string(path)] = stat.Ino
		return stat.Ino, nil
	}
	return 0, nil // no v2 membership (legacy host)
}

func (p *Procfs) maps(st *scanState, s *Scan, base string, pid int, cg uint64) error {
	f, err := os.Open(filepath.Join(base, "maps"))
	if err != nil {
		return fmt.Errorf("process maps: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(st.buf[:0], 1<<20)
	charMappings := p.targets.hasCharMapping()
	for sc.Scan() {
		line := sc.Bytes()
		m, err := parseMapsLine(line)
		if err != nil || m.ino == 0 {
			continue
		}
		i, ok := p.targets.matchRegular(m.major, m.minor, m.ino)
		if !ok && charMappings {
			i, ok = p.mappedChar(base, m)
		}
		if !ok && bytes.HasSuffix(line, []byte(" anon_inode:[io_uring]")) {
			st.ringMapped = true
		}
		if ok {
			s.Mappings = append(s.Mappings, Mapping{CgroupID: cg, PID: pid, Target: i, Start: m.start, Size: m.end - m.start, Offset: m.offset})
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s/maps: %w", base, err)
	}
	return nil
}

// mappedChar stats the mapped file itself: /proc/PID/maps names a device node by the
// node's inode, which differs in every container, not by the device number.
func (p *Procfs) mappedChar(base string, m mapsLine) (int, bool) {
	var st unix.Stat_t
	name := strconv.FormatUint(m.start, 16) + "-" + strconv.FormatUint(m.end, 16)
	if err := unix.Stat(filepath.Join(base, "map_files", name), &st); err != nil {
		return 0, false
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return 0, false
	}
	return p.targets.match(st.Mode, st.Dev, st.Ino, st.Rdev)
}

func (p *Procfs) fds(st *scanState, s *Scan, base string, pid int, cg uint64) error {
	dir, err := os.Open(filepath.Join(base, "fd"))
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return nil
		}
		return fmt.Errorf("process fds: %w", err)
	}
	defer dir.Close()
	// In batches, each fd stat'ed through the directory: a process with 100000 fds
	// must not cost 100000 directory entries held at once nor a path built for each.
	for {
		names, err := dir.Readdirnames(1024)
		if len(names) == 0 {
			if err != nil && !errors.Is(err, io.EOF) && !gone(err) {
				return fmt.Errorf("process fds: %w", err)
			}
			return nil
		}
		// A process with 400000 fds takes seconds: the deadline is checked within it.
		if st.ctx.Err() != nil {
			return errOutOfTime
		}
		for _, name := range names {
			fd, err := strconv.Atoi(name)
			if err != nil {
				continue
			}
			var fst unix.Stat_t
			if err := unix.Fstatat(int(dir.Fd()), name, &fst, 0); err != nil {
				continue // closed since
			}
			i, ok := p.targets.match(fst.Mode, fst.Dev, fst.Ino, fst.Rdev)
			if !ok {
				if fst.Mode&unix.S_IFMT == 0 && isRing(base, name) {
					st.ringFD = true
					if ringHoldsFiles(base, name) && !slices.Contains(s.Uncounted, cg) {
						s.Uncounted = append(s.Uncounted, cg)
					}
				}
				continue
			}
			desc, err := st.descs.describe(pid, fd, i)
			if errors.Is(err, errFdGone) {
				continue
			}
			if err != nil {
				return err
			}
			st.fdTargets[i] = true
			st.descs.keep(s, Handle{CgroupID: cg, PID: pid, FD: fd, Target: i, Description: desc})
		}
	}
}

// describer gives fds that share an open file description the same Description, with
// kcmp(2), which compares (and orders) the kernel's file pointers without revealing them.
// Each fd is placed, as the scan meets it, by binary search among one fd of each
// description already met: a process that dup()s one fd 100000 times costs a kcmp or
// two per fd, within the scan's time, and only one fd of each description and cgroup is
// kept.
type describer struct {
	compare func(pid1, pid2, fd1, fd2 int) (int, error)
	reps    map[int][]rep // by target, in kcmp order
	next    uint64
	kept    map[keptKey]int // index in the scan's handles
}

type rep struct {
	pid, fd     int
	description uint64
}

type keptKey struct {
	cgroup      uint64
	target      int
	description uint64
}

func newDescriber(compare func(pid1, pid2, fd1, fd2 int) (int, error)) describer {
	return describer{compare: compare, reps: map[int][]rep{}, kept: map[keptKey]int{}}
}

// errFdGone is an fd closed (or a process ended) while it was compared.
var errFdGone = errors.New("fd gone")

// ErrNoKcmp is kcmp(2) refused: open file descriptions cannot be told apart. It is not a
// process's /proc being unreadable (which skips the process): the scan fails.
var ErrNoKcmp = errors.New("kcmp refused: open file descriptions cannot be told apart")

func (d *describer) describe(pid, fd, target int) (uint64, error) {
	desc, err := d.place(pid, fd, target)
	if !errors.Is(err, errFdGone) {
		return desc, err
	}
	// Either this fd is gone, or one met before (its process ended since): then that
	// one is no longer a description's witness.
	if _, err := d.compare(pid, pid, fd, fd); err != nil {
		return 0, err
	}
	d.reps[target] = slices.DeleteFunc(d.reps[target], func(r rep) bool {
		_, err := d.compare(r.pid, r.pid, r.fd, r.fd)
		return err != nil
	})
	return d.place(pid, fd, target)
}

func (d *describer) place(pid, fd, target int) (uint64, error) {
	rs := d.reps[target]
	var failed error
	at, found := slices.BinarySearchFunc(rs, rep{pid: pid, fd: fd}, func(r, h rep) int {
		c, err := d.compare(r.pid, h.pid, r.fd, h.fd)
		if err != nil && failed == nil {
			failed = err
		}
		return c
	})
	if failed != nil {
		return 0, failed
	}
	if found {
		return rs[at].description, nil
	}
	d.next++
	d.reps[target] = slices.Insert(rs, at, rep{pid: pid, fd: fd, description: d.next})
	return d.next, nil
}

// keep adds h to the scan unless an fd of its description in its cgroup is there: the
// first in (PID, fd) order stays, as the BPF source reports it.
func (d *describer) keep(s *Scan, h Handle) {
	k := keptKey{h.CgroupID, h.Target, h.Description}
	i, seen := d.kept[k]
	switch {
	case !seen:
		d.kept[k] = len(s.Handles)
		s.Handles = append(s.Handles, h)
	case h.PID < s.Handles[i].PID || h.PID == s.Handles[i].PID && h.FD < s.Handles[i].FD:
		s.Handles[i] = h
	}
}

// kcmpFile orders two fds by their open file description: 0 when they share one. An fd
// closed or a process ended since is errFdGone; any other failure (kcmp refused) means
// descriptions cannot be told apart, and the scan must not guess: counting each fd
// as a description of its own would count a dup()ed queue thousands of times.
func kcmpFile(pid1, pid2, fd1, fd2 int) (int, error) {
	r, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(pid1), uintptr(pid2), 0 /* KCMP_FILE */, uintptr(fd1), uintptr(fd2), 0)
	switch {
	case errno == unix.EBADF || errno == unix.ESRCH:
		return 0, errFdGone
	case errno != 0:
		return 0, fmt.Errorf("%w (fds %d/%d and %d/%d: %s)", ErrNoKcmp, pid1, fd1, pid2, fd2, errno.Error())
	}
	switch r {
	case 0:
		return 0, nil
	case 1:
		return -1, nil
	default:
		return 1, nil
	}
}

// fillFdinfo sets Value for the handles of FdinfoKey targets in s. An fd closed since, or
// a value the driver wrote in a form not understood, counts zero. A description with no
// fd (in flight, in a ring) has no fdinfo: its cgroup's figure is a lower bound.
func fillFdinfo(procRoot string, targets *Targets, s *Scan) {
	for i := range s.Handles {
		h := &s.Handles[i]
		t := targets.At(h.Target)
		if t.Measure != FdinfoKey {
			continue
		}
		if h.FD < 0 {
			if !slices.Contains(s.Uncounted, h.CgroupID) {
				s.Uncounted = append(s.Uncounted, h.CgroupID)
			}
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(h.PID), "fdinfo", strconv.Itoa(h.FD)))
		if err != nil {
			continue
		}
		if v, _, err := fdinfoValue(b, t.Key); err == nil {
			h.Value = v
		}
	}
}

// isRing reports an fd on an io_uring.
func isRing(base, fd string) bool {
	link, err := os.Readlink(filepath.Join(base, "fd", fd))
	return err == nil && link == "anon_inode:[io_uring]"
}

// ringHoldsFiles reports an io_uring fd with registered files, or one whose fdinfo does
// not say (a ring in use prints nothing while its lock is held). Procfs names them by
// path only, which cannot tell a description apart nor always a target (a container's
// own device node): the files a ring holds with no fd are not counted, and the holder's
// cgroup is a lower bound. Anonymous inodes carry no file type, which makes the link
// worth reading only for them.
func ringHoldsFiles(base, fd string) bool {
	b, err := os.ReadFile(filepath.Join(base, "fdinfo", fd))
	if err != nil {
		return !gone(err)
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("UserFiles:")); ok {
			n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			return err != nil || n > 0
		}
	}
	return true
}

// pathOnly reports an O_PATH fd: it names the file without opening it (no I/O, no
// mapping), so it holds nothing. An fd closed since its stat counts as it was then.
func pathOnly(base, fd string) bool {
	b, err := os.ReadFile(filepath.Join(base, "fdinfo", fd))
	if err != nil {
		return false
	}
	flags, err := fdinfoFlags(b)
	return err == nil && flags&unix.O_PATH != 0
}
