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
)

// Procfs is the footprint source that reads /proc/PID/{cgroup,maps,fd,fdinfo}.
type Procfs struct {
	root     string // procfs root (--path.procfs)
	cgroupV2 string // the cgroup v2 mount, to turn a process's cgroup path into its id
	targets  *Targets
}

// NewProcfs returns the procfs source.
func NewProcfs(procRoot, cgroupV2 string, targets *Targets) *Procfs {
	return &Procfs{root: procRoot, cgroupV2: cgroupV2, targets: targets}
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
	st := &scanState{ctx: ctx, ids: map[string]uint64{}, buf: make([]byte, 0, 64<<10)}
	for _, pid := range pids {
		if ctx.Err() != nil {
			s.Cutoff = pid
			break
		}
		if err := p.process(st, s, pid); err != nil {
			switch {
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
	p.describe(s.Handles)
	s.Handles = firstOfEach(s.Handles)
	// O_PATH is the description's: one look at the fd kept for each is enough.
	s.Handles = slices.DeleteFunc(s.Handles, func(h Handle) bool {
		return pathOnly(filepath.Join(p.root, strconv.Itoa(h.PID)), strconv.Itoa(h.FD))
	})
	fillFdinfo(p.root, p.targets, s.Handles)
	s.Took = time.Since(start)
	return s, nil
}

type scanState struct {
	ctx context.Context
	ids map[string]uint64 // cgroup path → id, for this scan
	buf []byte
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
	if err != nil {
		return err
	}
	if err := p.maps(st, s, base, pid, cg); err != nil {
		return err
	}
	return p.fds(st, s, base, pid, cg)
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
			return 0, fmt.Errorf("cgroup %s: %w", path, err)
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
				continue
			}
			s.Handles = append(s.Handles, Handle{CgroupID: cg, PID: pid, FD: fd, Target: i})
		}
	}
}

// describe gives fds that share an open file description the same Description, with
// kcmp(2), which compares (and orders) the kernel's file pointers without revealing them.
// Each fd is placed by binary search among one fd of each description already met: a
// process that dup()s one fd 100000 times costs a kcmp or two per fd, not a sort of
// 100000 fds.
func (p *Procfs) describe(handles []Handle) {
	type rep struct {
		pid, fd     int
		description uint64
	}
	reps := map[int][]rep{} // by target, in kcmp order
	var next uint64
	for i := range handles {
		h := &handles[i]
		rs := reps[h.Target]
		at, found := slices.BinarySearchFunc(rs, h, func(r rep, h *Handle) int {
			return kcmpFile(r.pid, h.PID, r.fd, h.FD)
		})
		if found {
			h.Description = rs[at].description
			continue
		}
		next++
		h.Description = next
		reps[h.Target] = slices.Insert(rs, at, rep{pid: h.PID, fd: h.FD, description: next})
	}
}

// kcmpFile orders two fds by their open file description: 0 when they share one. An fd
// gone since the scan compares as distinct, ordered by (pid, fd).
func kcmpFile(pid1, pid2, fd1, fd2 int) int {
	r, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(pid1), uintptr(pid2), 0 /* KCMP_FILE */, uintptr(fd1), uintptr(fd2), 0)
	if errno != 0 {
		if pid1 != pid2 {
			return pid1 - pid2
		}
		return fd1 - fd2
	}
	switch r {
	case 0:
		return 0
	case 1:
		return -1
	default:
		return 1
	}
}

// fillFdinfo sets Value for handles of FdinfoKey targets. An fd closed since, or a value
// the driver wrote in a form not understood, counts zero.
func fillFdinfo(procRoot string, targets *Targets, handles []Handle) {
	for i := range handles {
		t := targets.At(handles[i].Target)
		// In flight, no fd to read: the driver's figure for it is not known.
		if t.Measure != FdinfoKey || handles[i].PID == 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(handles[i].PID), "fdinfo", strconv.Itoa(handles[i].FD)))
		if err != nil {
			continue
		}
		if v, _, err := fdinfoValue(b, t.Key); err == nil {
			handles[i].Value = v
		}
	}
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

// firstOfEach keeps one fd per open file description and cgroup, the first in
// (PID, fd) order, as the BPF source reports them: the other fds of a description
// (dup'ed, inherited) hold nothing more.
func firstOfEach(handles []Handle) []Handle {
	type key struct {
		cgroup      uint64
		target      int
		description uint64
	}
	first := make(map[key]int, len(handles))
	out := handles[:0]
	for _, h := range handles {
		k := key{h.CgroupID, h.Target, h.Description}
		i, seen := first[k]
		switch {
		case !seen:
			first[k] = len(out)
			out = append(out, h)
		case h.PID < out[i].PID || h.PID == out[i].PID && h.FD < out[i].FD:
			out[i] = h
		}
	}
	return out
}
