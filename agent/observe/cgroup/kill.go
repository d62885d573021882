// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/containerd/cgroups/v3/cgroup2"
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
	return nil
}
