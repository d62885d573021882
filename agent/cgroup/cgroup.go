// Package cgroup resolves a container's cgroups on v1, v2 and hybrid hosts: the
// directories in each hierarchy, the v2 cgroup id the kernel (and BPF) knows it by, and
// its processes.
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Mode is how the host mounts cgroups.
type Mode int

// The cgroup modes.
const (
	Unavailable Mode = iota
	Legacy           // v1 hierarchies only
	Hybrid           // v1 controllers plus a v2 tree at <root>/unified
	Unified          // v2 only
)

func (m Mode) String() string {
	return [...]string{"unavailable", "legacy", "hybrid", "unified"}[m]
}

// Hierarchy is the host's cgroup mounts under one root (--path.cgroupfs).
type Hierarchy struct {
	Root string
	Mode Mode
	// V2 is the cgroup2 mount: Root itself (unified) or Root/unified (hybrid).
	V2 string
	// Controllers are the v1 hierarchies under Root, listed once by Detect: Resolve runs
	// for every container at every sample.
	Controllers []string
}

// Detect reads how cgroups are mounted under root, as the kernel reports the file
// systems (the statfs magic), the way containerd/cgroups does for /sys/fs/cgroup.
func Detect(root string) (Hierarchy, error) {
	h := Hierarchy{Root: root}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return h, fmt.Errorf("cgroupfs %s: %w", root, err)
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		h.Mode, h.V2 = Unified, root
		return h, nil
	}
	unified := filepath.Join(root, "unified")
	if err := unix.Statfs(unified, &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		h.Mode, h.V2 = Hybrid, unified
		return h, h.listControllers()
	}
	if _, err := os.Stat(filepath.Join(root, "memory")); err == nil {
		h.Mode = Legacy
		return h, h.listControllers()
	}
	return h, fmt.Errorf("cgroupfs %s: no cgroup v1 or v2 hierarchy found", root)
}

// Paths are a container's cgroup directories.
type Paths struct {
	// V2 is the directory in the v2 tree; empty on legacy hosts.
	V2 string `json:"v2,omitempty"`
	// V1 maps a v1 controller (memory, freezer, devices, ...) to its directory.
	V1 map[string]string `json:"v1,omitempty"`
}

// Resolve turns the cgroupsPath of an OCI spec into directories. Both drivers' forms
// are understood: "/kubepods/burstable/pod<uid>/<id>" (cgroupfs) and
// "kubepods-burstable-pod<uid>.slice:cri-containerd:<id>" (systemd).
func (h Hierarchy) Resolve(cgroupsPath string) (Paths, error) {
	rel, err := Relative(cgroupsPath)
	if err != nil {
		return Paths{}, err
	}
	var p Paths
	if h.V2 != "" {
		p.V2 = filepath.Join(h.V2, rel)
	}
	if len(h.Controllers) > 0 {
		p.V1 = make(map[string]string, len(h.Controllers))
		for _, c := range h.Controllers {
			p.V1[c] = filepath.Join(h.Root, c, rel)
		}
	}
	return p, nil
}

// listControllers lists the v1 hierarchies under Root.
func (h *Hierarchy) listControllers() error {
	entries, err := os.ReadDir(h.Root)
	if err != nil {
		return fmt.Errorf("cgroupfs %s: %w", h.Root, err)
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || name == "unified" || strings.Contains(name, ",") {
			continue // combined-controller mounts are also listed under each name
		}
		h.Controllers = append(h.Controllers, name)
	}
	return nil
}

// Relative converts a cgroupsPath of either driver to a path relative to a hierarchy's root.
func Relative(cgroupsPath string) (string, error) {
	if cgroupsPath == "" {
		return "", errors.New("empty cgroupsPath")
	}
	if strings.HasPrefix(cgroupsPath, "/") {
		clean := path.Clean(cgroupsPath)
		if clean == "/" || strings.Contains(cgroupsPath, "/../") {
			return "", fmt.Errorf("cgroupsPath %q is not a container's", cgroupsPath)
		}
		return strings.TrimPrefix(clean, "/"), nil
	}
	// systemd: "slice:prefix:name" → the slice's nesting, then "prefix-name.scope".
	parts := strings.Split(cgroupsPath, ":")
	if len(parts) != 3 || !strings.HasSuffix(parts[0], ".slice") {
		return "", fmt.Errorf("cgroupsPath %q: want an absolute path or slice:prefix:name", cgroupsPath)
	}
	slice := strings.TrimSuffix(parts[0], ".slice")
	var dirs []string
	for i := range slice {
		if slice[i] == '-' {
			dirs = append(dirs, slice[:i]+".slice")
		}
	}
	dirs = append(dirs, parts[0], parts[1]+"-"+parts[2]+".scope")
	return path.Join(dirs...), nil
}

// ID is the v2 cgroup id of dir: its inode, which is what bpf_get_current_cgroup_id and
// the BPF iterators report.
func ID(dir string) (uint64, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, fmt.Errorf("cgroup id: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("cgroup id of %s: no inode", dir)
	}
	return st.Ino, nil
}

// Subtree is what a container's cgroup holds: the processes in it and in its
// descendants, and the descendants' v2 ids. A container may make child cgroups; what
// their processes hold is the container's.
type Subtree struct {
	PIDs        []int
	Descendants []uint64
}

// ReadSubtree reads the processes of dir and its descendants, and the descendants' ids.
func ReadSubtree(dir string) (Subtree, error) {
	var t Subtree
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && p != dir {
				return nil // a child cgroup removed while we walk
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && p != dir {
				return nil
			}
			return fmt.Errorf("reading cgroup.procs: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			pid, err := strconv.Atoi(sc.Text())
			if err == nil {
				t.PIDs = append(t.PIDs, pid)
			}
		}
		if p != dir {
			if info, err := d.Info(); err == nil {
				if st, ok := info.Sys().(*syscall.Stat_t); ok {
					t.Descendants = append(t.Descendants, st.Ino)
				}
			}
		}
		return nil
	})
	if err != nil {
		return Subtree{}, fmt.Errorf("processes of cgroup %s: %w", dir, err)
	}
	return t, nil
}

// ProcsDir is the directory whose cgroup.procs lists a container's processes: the v2
// one where there is a v2 tree, else the v1 pids (or memory) controller's.
func (p Paths) ProcsDir() string {
	if p.V2 != "" {
		return p.V2
	}
	for _, c := range []string{"pids", "memory", "cpu,cpuacct", "cpu"} {
		if d, ok := p.V1[c]; ok {
			return d
		}
	}
	return ""
}
