// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
)

// Freeze pauses every process in dir (a v2 cgroup directory) and below it.
func (h Hierarchy) Freeze(dir string) error { return h.freezer(dir, true) }

// Thaw resumes the processes Freeze paused.
func (h Hierarchy) Thaw(dir string) error { return h.freezer(dir, false) }

func (h Hierarchy) freezer(dir string, freeze bool) error {
	if h.V2 == "" {
		return errors.New("freezing needs a cgroup v2 hierarchy (hybrid or unified)")
	}
	// dir may come from a checkpoint: only a cgroup below the v2 root is frozen or thawed.
	rel, err := filepath.Rel(h.V2, dir)
	if err != nil || !strictlyBelow(h.V2, dir) {
		return fmt.Errorf("freezer: %s is not below %s", dir, h.V2)
	}
	m, err := cgroup2.Load("/"+rel, cgroup2.WithMountpoint(h.V2))
	if err != nil {
		return fmt.Errorf("freezer %s: %w", dir, err)
	}
	if freeze {
		err = m.Freeze()
	} else {
		err = m.Thaw()
	}
	if err != nil {
		return fmt.Errorf("freezer %s: %w", dir, err)
	}
	if freeze {
		return waitFrozen(dir)
	}
	return nil
}

// frozenWait bounds how long the kernel may take to stop every task of a cgroup.
const frozenWait = 2 * time.Second

// waitFrozen waits until the kernel reports every task of dir stopped: cgroup.freeze
// says what was asked, cgroup.events what is done.
func waitFrozen(dir string) error {
	deadline := time.Now().Add(frozenWait)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			return fmt.Errorf("freezer %s: %w", dir, err)
		}
		if strings.Contains(string(b), "frozen 1") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("freezer %s: not frozen after %s", dir, frozenWait)
		}
		time.Sleep(time.Millisecond)
	}
}
