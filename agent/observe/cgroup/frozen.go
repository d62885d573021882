// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/neureality-sdk/nr1-agent/internal/untrusted"
)

// FrozenPod is a pod's cgroup that the freezer holds.
type FrozenPod struct {
	UID string
	Dir string
	// V1 tells a directory of the v1 freezer hierarchy from one of the v2 tree.
	V1 bool
}

// FrozenPods finds the cgroups of the pods with the given UIDs that are frozen: in the
// v2 tree those whose cgroup.freeze is 1, in a v1 freezer hierarchy those whose
// freezer.self_freezing is 1 (frozen themselves, not by an ancestor). Pod cgroups are
// looked for below the kubepods tree of either driver: pod<uid> (cgroupfs) and
// kubepods[-<qos>]-pod<uid, '-' as '_'>.slice (systemd). Other pods' cgroups are never
// read, let alone their containers'.
func (h Hierarchy) FrozenPods(uids []string) ([]FrozenPod, error) {
	// The UIDs are only compared with names read from cgroupfs, never joined into a
	// path; one that is no pod UID could match no pod's cgroup.
	want := make(map[string]bool, len(uids))
	for _, u := range uids {
		if untrusted.PodUID(u) == nil {
			want[u] = true
		}
	}
	var out []FrozenPod
	if h.V2 != "" {
		found, err := podDirs(h.V2, want)
		if err != nil {
			return nil, err
		}
		for uid, dir := range found {
			if yes, err := holds(dir, "cgroup.freeze", "1"); err != nil {
				return nil, err
			} else if yes {
				out = append(out, FrozenPod{UID: uid, Dir: dir})
			}
		}
	}
	if slices.Contains(h.Controllers, "freezer") {
		found, err := podDirs(filepath.Join(h.Root, "freezer"), want)
		if err != nil {
			return nil, err
		}
		for uid, dir := range found {
			if yes, err := holds(dir, "freezer.self_freezing", "1"); err != nil {
				return nil, err
			} else if yes {
				out = append(out, FrozenPod{UID: uid, Dir: dir, V1: true})
			}
		}
	}
	slices.SortFunc(out, func(a, b FrozenPod) int { return strings.Compare(a.Dir, b.Dir) })
	return out, nil
}

// ThawPod thaws a pod cgroup FrozenPods found.
func (h Hierarchy) ThawPod(p FrozenPod) error {
	if !p.V1 {
		return h.Thaw(p.Dir)
	}
	// The v1 freezer thaws asynchronously: write THAWED until the state reads THAWED.
	state := filepath.Join(p.Dir, "freezer.state")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := os.WriteFile(state, []byte("THAWED"), 0); err != nil {
			return fmt.Errorf("thawing %s: %w", p.Dir, err)
		}
		v, err := readTrimmed(state)
		if err != nil {
			return fmt.Errorf("thawing %s: %w", p.Dir, err)
		}
		if v == "THAWED" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("thawing %s: still %s after 5s", p.Dir, v)
		}
	}
}

// searchDepth bounds how deep the kubepods tree is looked for (the kubelet's
// --cgroup-root may nest it) and how deep pods are looked for inside it.
const searchDepth = 4

// podDirs finds below root the pod cgroup directories of the wanted UIDs.
func podDirs(root string, want map[string]bool) (map[string]string, error) {
	found := map[string]string{}
	if len(want) == 0 {
		return found, nil
	}
	var walk func(dir string, depth int, inPods bool) error
	walk = func(dir string, depth int, inPods bool) error {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) && dir != root {
			return nil // removed while we look
		}
		if err != nil {
			return fmt.Errorf("looking for pod cgroups: %w", err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			name, child := e.Name(), filepath.Join(dir, e.Name())
			switch uid, isPod := podUID(name); {
			case inPods && isPod:
				if want[uid] {
					found[uid] = child
				}
			case inPods || isKubepods(name):
				if depth < 2*searchDepth {
					err = walk(child, depth+1, true)
				}
			case depth < searchDepth:
				err = walk(child, depth+1, false)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	return found, walk(root, 0, false)
}

// isKubepods tells the root of the kubelet's pod cgroups: kubepods (cgroupfs driver),
// kubepods.slice or <parent>-kubepods.slice (systemd driver).
func isKubepods(name string) bool {
	return name == "kubepods" || name == "kubepods.slice" || strings.HasSuffix(name, "-kubepods.slice")
}

// podUID reads a pod's UID from its cgroup's name, in the cgroupfs form pod<uid> or the
// systemd form <parent>-pod<uid with '-' escaped as '_'>.slice.
func podUID(name string) (string, bool) {
	if uid, ok := strings.CutPrefix(name, "pod"); ok && uid != "" {
		return uid, true
	}
	base, ok := strings.CutSuffix(name, ".slice")
	if i := strings.LastIndex(base, "-pod"); ok && i >= 0 && i+4 < len(base) {
		return strings.ReplaceAll(base[i+4:], "_", "-"), true
	}
	return "", false
}

// holds tells whether dir's file reads value; a cgroup removed meanwhile holds nothing.
func holds(dir, file, value string) (bool, error) {
	v, err := readTrimmed(filepath.Join(dir, file))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return v == value, err
}

func readTrimmed(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// KubepodsDir finds the v2 cgroup directory above every pod: the kubelet's kubepods
// (either driver), the shallowest found; "" when there is none (a host without a v2
// tree, or the kubelet's pods not put there).
func (h Hierarchy) KubepodsDir() (string, error) {
	if h.V2 == "" {
		return "", nil
	}
	level := []string{h.V2}
	for range searchDepth + 1 {
		var next []string
		for _, dir := range level {
			entries, err := os.ReadDir(dir)
			if errors.Is(err, fs.ErrNotExist) && dir != h.V2 {
				continue // removed while we look
			}
			if err != nil {
				return "", fmt.Errorf("looking for the kubepods cgroup: %w", err)
			}
			for _, e := range entries {
				if !e.IsDir() {
					continue
				}
				if isKubepods(e.Name()) {
					return filepath.Join(dir, e.Name()), nil
				}
				next = append(next, filepath.Join(dir, e.Name()))
			}
		}
		level = next
	}
	return "", nil
}
