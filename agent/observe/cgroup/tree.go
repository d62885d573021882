// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/cgroupfs"
)

// Tree reads the v2 cgroup dir and every cgroup below it in one walk: their ids by
// path. A child cgroup removed meanwhile is left out, and so are the cgroups below one
// whose path is longer than PATH_MAX.
//
// A cgroup's id is its inode, which the directory entries already carry: the walk reads
// each directory once (getdents) and stats only dir itself, not each cgroup below it,
// nor the dozens of control files each holds. A sample walks every pod's cgroup.
func Tree(dir string) (map[string]uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	tree := map[string]uint64{dir: st.Ino}
	buf := make([]byte, 8<<10)
	// Each directory is closed before the next is opened: however deep a pod nests its
	// cgroups, the walk holds one descriptor.
	for queue := []string{dir}; len(queue) > 0; queue = queue[1:] {
		d := queue[0]
		fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ENOENT) && d != dir {
			delete(tree, d) // removed while we walk
			continue
		}
		if errors.Is(err, unix.ENAMETOOLONG) && d != dir {
			// Nested past PATH_MAX, where no path reaches: its id is known, the cgroups
			// below it are placed by their ids (Lineage), not by this walk.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", d, err)
		}
		err = cgroupfs.Entries(fd, buf, func(name string, ino uint64, typ uint8) {
			if typ == unix.DT_DIR && name != "." && name != ".." {
				p := filepath.Join(d, name)
				tree[p] = ino
				queue = append(queue, p)
			}
		})
		_ = unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", d, err)
		}
	}
	return tree, nil
}
