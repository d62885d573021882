// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/opencontainers/cgroups/systemd"
	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/cgroupfs"
	"github.com/neureality-sdk/nr1-agent/internal/untrusted"
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
// "kubepods-burstable-pod<uid>.slice:cri-containerd:<id>" (systemd). The cgroupsPath
// comes from the runtime: a directory that would not lie below the root of its
// hierarchy is refused, with an error naming the cgroupsPath. The check is lexical,
// which is enough: cgroupfs holds no symbolic links.
func (h Hierarchy) Resolve(cgroupsPath string) (Paths, error) {
	rel, err := Relative(cgroupsPath)
	if err != nil {
		return Paths{}, err
	}
	var p Paths
	if h.V2 != "" {
		if p.V2, err = below(h.V2, rel); err != nil {
			return Paths{}, fmt.Errorf("cgroupsPath %s: %w", untrusted.Quote(cgroupsPath), err)
		}
	}
	if len(h.Controllers) > 0 {
		p.V1 = make(map[string]string, len(h.Controllers))
		for _, c := range h.Controllers {
			if p.V1[c], err = below(filepath.Join(h.Root, c), rel); err != nil {
				return Paths{}, fmt.Errorf("cgroupsPath %s: %w", untrusted.Quote(cgroupsPath), err)
			}
		}
	}
	return p, nil
}

// below joins rel to root and checks that the result lies strictly below root: each
// hierarchy is its own tree, so a v1 path may not reach a sibling controller's either.
func below(root, rel string) (string, error) {
	p := filepath.Join(root, rel)
	if !strictlyBelow(root, p) {
		return "", fmt.Errorf("%s is not below %s", p, root)
	}
	return p, nil
}

// strictlyBelow tells whether p names a directory below root, not root itself.
func strictlyBelow(root, p string) bool {
	r, err := filepath.Rel(root, p)
	return err == nil && r != "." && r != ".." && !strings.HasPrefix(r, "../")
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

// maxCgroupsPath bounds a cgroupsPath: PATH_MAX, the longest path the kernel resolves.
const maxCgroupsPath = 4096

// Relative converts a cgroupsPath of either driver to a clean path relative to a
// hierarchy's root. What the kubelet writes never holds a "." or ".." element, nor a "/"
// inside a systemd slice, prefix or name: such a path is refused rather than cleaned,
// so that no cgroupsPath leads out of the hierarchy or to its root.
func Relative(cgroupsPath string) (string, error) {
	switch {
	case cgroupsPath == "":
		return "", errors.New("empty cgroupsPath")
	case len(cgroupsPath) > maxCgroupsPath:
		return "", fmt.Errorf("cgroupsPath %s: longer than %d bytes", untrusted.Quote(cgroupsPath), maxCgroupsPath)
	case strings.IndexByte(cgroupsPath, 0) >= 0:
		return "", fmt.Errorf("cgroupsPath %s: holds a NUL byte", untrusted.Quote(cgroupsPath))
	}
	if strings.HasPrefix(cgroupsPath, "/") {
		for _, e := range strings.Split(cgroupsPath, "/") {
			if e == "." || e == ".." {
				return "", fmt.Errorf("cgroupsPath %s: holds a %q element", untrusted.Quote(cgroupsPath), e)
			}
		}
		rel := strings.TrimPrefix(path.Clean(cgroupsPath), "/")
		if rel == "" {
			return "", fmt.Errorf("cgroupsPath %s: the root is not a container's cgroup", untrusted.Quote(cgroupsPath))
		}
		return rel, nil
	}
	// systemd: "slice:prefix:name" → the slice's nesting, then "prefix-name.scope".
	parts := strings.Split(cgroupsPath, ":")
	if len(parts) != 3 {
		return "", fmt.Errorf("cgroupsPath %s: want an absolute path or slice:prefix:name", untrusted.Quote(cgroupsPath))
	}
	// The slice's nesting as runc and systemd expand it: "kubepods-burstable.slice" is
	// kubepods.slice/kubepods-burstable.slice, "-.slice" the root. A name holding "/"
	// or an empty component is refused; what it returns is never "." or "..". Its error
	// names the slice raw: the refusal is said here, quoted.
	slice, err := systemd.ExpandSlice(parts[0])
	if err != nil {
		return "", fmt.Errorf("cgroupsPath %s: the slice is not a systemd slice name (one ending in .slice, without \"/\" or an empty component)", untrusted.Quote(cgroupsPath))
	}
	for _, s := range parts[1:] {
		if s == "" || strings.Contains(s, "/") {
			return "", fmt.Errorf("cgroupsPath %s: a scope's prefix and name are non-empty names without \"/\"", untrusted.Quote(cgroupsPath))
		}
	}
	return strings.TrimPrefix(path.Join(slice, parts[1]+"-"+parts[2]+".scope"), "/"), nil
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
func ReadSubtree(dir string) (Subtree, error) { return walkSubtree(dir, true) }

// Descendants reads the v2 ids of dir's descendants, and not their processes: what a
// sample needs of every container, so cheaper than ReadSubtree.
func Descendants(dir string) ([]uint64, error) {
	t, err := walkSubtree(dir, false)
	return t.Descendants, err
}

// walkSubtree reads dir and each cgroup below it by its id (cgroupfs.Walk), not by its
// path: a container can nest its cgroups past PATH_MAX, and its processes there are
// still the container's.
func walkSubtree(dir string, procs bool) (Subtree, error) {
	var t Subtree
	top := true
	err := cgroupfs.Walk(dir, func(fd int, id uint64) error {
		if !top {
			t.Descendants = append(t.Descendants, id)
		}
		top = false
		if !procs {
			return nil
		}
		var err error
		t.PIDs, err = cgroupfs.Procs(fd, t.PIDs)
		return err
	})
	if err != nil {
		return Subtree{}, err
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
