// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/cgroupfs"
)

// Kill ends every process in dir (a v2 cgroup directory) and below it by SIGKILL, at
// once (cgroup.kill): none can take a signal first, exit 0 on it, or fork away. A cgroup
// already gone has nothing left to kill.
func (h Hierarchy) Kill(dir string) error {
	if h.V2 == "" {
		return errors.New("killing a cgroup needs a cgroup v2 hierarchy (hybrid or unified)")
	}
	// dir comes from the runtime: only a cgroup below the v2 root is killed.
	rel, err := filepath.Rel(h.V2, dir)
	if err != nil || !strictlyBelow(h.V2, dir) {
		return fmt.Errorf("kill: %s is not below %s", dir, h.V2)
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	m, err := cgroup2.Load("/"+rel, cgroup2.WithMountpoint(h.V2))
	if err != nil {
		return fmt.Errorf("kill %s: %w", dir, err)
	}
	if err := m.Kill(); err != nil {
		return fmt.Errorf("kill %s: %w", dir, err)
	}
	return pruneDeep(dir)
}

// pruneWait bounds how long a killed cgroup's processes are waited for to be gone from
// the cgroups pruneDeep removes.
const pruneWait = 2 * time.Second

// pruneDeep removes, once their processes are gone, the cgroups below dir nested past
// PATH_MAX: a runtime removes a stopped container's cgroup and what it nests by path, and
// cannot while they are there; its stop then fails, and the container never ends.
// Nothing a path reaches is removed: that is the runtime's.
func pruneDeep(dir string) error {
	below, err := cgroupfs.Below(dir)
	if err != nil {
		return fmt.Errorf("kill %s: %w", dir, err)
	}
	deadline := time.Now().Add(pruneWait)
	for i := len(below) - 1; i >= 0; i-- {
		e := below[i]
		if e.PathLen < unix.PathMax {
			continue
		}
		for {
			err := cgroupfs.Remove(dir, e)
			if cgroupfs.Gone(err) || err == nil {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				return fmt.Errorf("kill %s: the cgroups it nests past PATH_MAX: %w", dir, err)
			}
			time.Sleep(10 * time.Millisecond) // its processes still exiting
		}
	}
	return nil
}
