// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/neureality-sdk/nr1-agent/internal/untrusted"
)

// IsPodDir tells whether name is the cgroup directory of the pod with uid, as either
// driver names it: pod<uid> (cgroupfs), kubepods[-<qos>]-pod<uid, '-' as '_'>.slice
// (systemd).
func IsPodDir(name, uid string) bool {
	got, ok := podUID(name)
	return ok && got == uid
}

// PodDir finds the v2 cgroup directory of the pod with uid below the kubepods tree of
// either driver; "" when it has none (gone, or a host without a v2 tree). The UID is
// only compared with names read from cgroupfs.
func (h Hierarchy) PodDir(uid string) (string, error) {
	if h.V2 == "" || untrusted.PodUID(uid) != nil {
		return "", nil
	}
	found, err := podDirs(h.V2, map[string]bool{uid: true})
	if err != nil {
		return "", err
	}
	return found[uid], nil
}

// containerDirPrefixes are what runtimes put before a container's ID in its cgroup's
// name: none or crio- with the cgroupfs driver, <prefix>-<id>.scope with systemd's. A
// CRI-O container's monitor, crio-conmon-<id>, is not the container.
var containerDirPrefixes = []string{"cri-containerd-", "crio-", "docker-"}

// ContainerDir finds, among the children of the pod cgroup podDir, the cgroup of the
// container with id, as its runtime names it: <id>, crio-<id>, or <prefix>-<id>.scope.
// "" when there is none (the container not started, or gone). The id is only compared
// with names read from cgroupfs, never joined into a path.
func ContainerDir(podDir, id string) (string, error) {
	if id == "" {
		return "", nil
	}
	entries, err := os.ReadDir(podDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", fmt.Errorf("looking for container %s in %s: %w", untrusted.Quote(id), podDir, err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		name := e.Name()
		match := name == id
		for _, p := range containerDirPrefixes {
			match = match || name == p+id || name == p+id+".scope"
		}
		if match && !strings.HasPrefix(name, "crio-conmon-") {
			return filepath.Join(podDir, name), nil
		}
	}
	return "", nil
}
