// SPDX-License-Identifier: Apache-2.0

// Package cgroup resolves a container's cgroups on v1, v2 and hybrid hosts: the
// directories in each hierarchy, the v2 cgroup id the kernel (and BPF) knows it by, and
// its processes.
//
// Cgroup mode (legacy/hybrid/unified, by statfs magic), cgroupsPath of either driver →
// directories per hierarchy (a `.` or `..` element, a systemd slice, prefix or name
// holding `/` or an empty component, a NUL, over 4096 bytes, or any directory not
// strictly below its own hierarchy's root: refused, naming the cgroupsPath), v2 id
// (inode), processes (`cgroup.procs` of the subtree, every cgroup below the first
// opened by its id, so that a subtree nested past PATH_MAX is read whole); a pod's
// cgroup and every cgroup below it in one getdents walk (`Tree`: what no path reaches is
// left out, not an error) and a cgroup no walk read placed below the nearest of a set
// by its id alone (`Lineage`: open_by_handle_at, then "..", one climb remembered while
// its cgroup lives, since the kernel renames a cgroup only within its parent); a pod's cgroup by its UID
// (`PodDir`, either driver's name, `IsPodDir`) and a container's below it by its ID as
// each runtime names it (`ContainerDir`: `<id>`, `crio-<id>`, `<prefix>-<id>.scope`,
// never CRI-O's monitor); freezer; `Kill` (every process of a cgroup by SIGKILL at once,
// `cgroup.kill`, strictly below the v2 root only); frozen pod cgroups by pod UID below
// kubepods (either driver; v2 `cgroup.freeze`, v1 `freezer.self_freezing`) and thawing
// them; the freezer acts strictly below the v2 root only.
package cgroup
