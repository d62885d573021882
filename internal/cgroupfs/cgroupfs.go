// SPDX-License-Identifier: Apache-2.0

// Package cgroupfs reads a cgroup file system by descriptors and ids, never by a path
// longer than the one it starts from: a pod allowed to write its cgroups can nest them
// past PATH_MAX, where no path reaches, and what its processes hold there is still its
// own. A cgroup is opened by its id as a file handle (open_by_handle_at), which needs
// CAP_DAC_READ_SEARCH.
package cgroupfs

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// fileIDKernfs is the file handle type of a kernfs node (FILEID_KERNFS): its 8 bytes are
// the node's id, a cgroup's id (v1 or v2).
const fileIDKernfs = 0xfe

// OpenID opens the cgroup of id on the cgroup file system fd is on, by its file handle.
func OpenID(fd int, id uint64, flags int) (int, error) {
	b := make([]byte, 8)
	binary.NativeEndian.PutUint64(b, id)
	cfd, err := unix.OpenByHandleAt(fd, unix.NewFileHandle(fileIDKernfs, b), flags)
	if err != nil {
		return -1, fmt.Errorf("opening cgroup %d by its id: %w", id, err)
	}
	return cfd, nil
}

// Gone tells an error of a cgroup removed meanwhile.
func Gone(err error) bool {
	return errors.Is(err, unix.ESTALE) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV)
}

// Entries calls each for every entry of the open directory fd: its name, inode and type
// (linux_dirent64). buf is getdents' buffer.
func Entries(fd int, buf []byte, each func(name string, ino uint64, typ uint8)) error {
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("getdents: %w", err)
		}
		if n <= 0 {
			return nil
		}
		for b := buf[:n]; len(b) >= 19; {
			ino := binary.NativeEndian.Uint64(b[0:8])
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return fmt.Errorf("getdents: a record of %d bytes in %d", reclen, len(b))
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			each(string(name), ino, b[18])
			b = b[reclen:]
		}
	}
}

// Walk calls each with dir, then every cgroup below it, breadth first: each cgroup open
// as fd (for the call only) and its id. Below dir, one descriptor is open at a time and
// a cgroup removed meanwhile is skipped.
func Walk(dir string, each func(fd int, id uint64) error) error {
	return walk(dir, each, nil)
}

// walk is Walk, also telling child each cgroup as its parent's entries name it.
func walk(dir string, each func(fd int, id uint64) error, child func(parent uint64, name string, id uint64)) error {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	defer func() { _ = unix.Close(root) }()
	var st unix.Stat_t
	if err := unix.Fstat(root, &st); err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	var queue []uint64
	buf := make([]byte, 8<<10)
	visit := func(fd int, id uint64) error {
		if each != nil {
			if err := each(fd, id); err != nil {
				return err
			}
		}
		return Entries(fd, buf, func(name string, ino uint64, typ uint8) {
			if typ == unix.DT_DIR && name != "." && name != ".." {
				queue = append(queue, ino)
				if child != nil {
					child(id, name, ino)
				}
			}
		})
	}
	if err := visit(root, st.Ino); err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	for ; len(queue) > 0; queue = queue[1:] {
		fd, err := OpenID(root, queue[0], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
		if Gone(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		err = visit(fd, queue[0])
		_ = unix.Close(fd)
		if Gone(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("cgroup %s: a cgroup below it (id %d): %w", dir, queue[0], err)
		}
	}
	return nil
}

// Procs appends to pids the PIDs in the cgroup.procs of the cgroup open as fd.
func Procs(fd int, pids []int) ([]int, error) {
	f, err := unix.Openat(fd, "cgroup.procs", unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return pids, fmt.Errorf("reading cgroup.procs: %w", err)
	}
	file := os.NewFile(uintptr(f), "cgroup.procs")
	defer func() { _ = file.Close() }()
	b, err := io.ReadAll(file)
	if err != nil {
		return pids, fmt.Errorf("reading cgroup.procs: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if pid, err := strconv.Atoi(sc.Text()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// ProcsOf appends to pids the PIDs in the cgroup.procs of the cgroup of id, on the
// cgroup file system mounted at dir.
func ProcsOf(dir string, id uint64, pids []int) ([]int, error) {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return pids, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	defer func() { _ = unix.Close(root) }()
	fd, err := OpenID(root, id, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return pids, err
	}
	defer func() { _ = unix.Close(fd) }()
	if pids, err = Procs(fd, pids); err != nil {
		return pids, fmt.Errorf("cgroup %d: %w", id, err)
	}
	return pids, nil
}

// Entry is a cgroup below another: its id, its parent's id and its name there, and the
// length of its path from the directory a walk began at.
type Entry struct {
	ID, Parent uint64
	Name       string
	PathLen    int
}

// Below lists every cgroup below dir, breadth first: a cgroup's descendants come after
// it, the deepest last.
func Below(dir string) ([]Entry, error) {
	var out []Entry
	index := map[uint64]int{} // id → its entry in out; dir's is absent
	err := walk(dir, nil, func(parent uint64, name string, id uint64) {
		plen := len(dir)
		if i, ok := index[parent]; ok {
			plen = out[i].PathLen
		}
		index[id] = len(out)
		out = append(out, Entry{ID: id, Parent: parent, Name: name, PathLen: plen + 1 + len(name)})
	})
	return out, err
}

// Remove removes the empty cgroup e, below dir, by its parent's id and its name.
func Remove(dir string, e Entry) error {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	defer func() { _ = unix.Close(root) }()
	parent, err := OpenID(root, e.Parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(parent) }()
	if err := unix.Unlinkat(parent, e.Name, unix.AT_REMOVEDIR); err != nil {
		return fmt.Errorf("removing cgroup %d below %s: %w", e.ID, dir, err)
	}
	return nil
}
