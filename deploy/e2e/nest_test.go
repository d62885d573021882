// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// deepLevels nest a chain of 250-byte names past PATH_MAX (4096) below a container's
// cgroup.
const deepLevels = 20

// nest is a chain of cgroups made below a container's cgroup, as a container allowed to
// manage its cgroups can: one "moved", or levels of 250-byte names, past PATH_MAX from
// 17 on, made and removed by descriptors since no path reaches so deep. A runtime
// removes a container's cgroup, and the kubelet its pod's, only when what they nest can
// be removed by path: the test removes the nest once what it moved there is gone.
type nest struct {
	name string
	fds  []int // the container's cgroup, then each level
	once sync.Once
}

// nestCgroups makes the chain below dir.
func nestCgroups(dir string, levels int) (*nest, error) {
	n := &nest{name: "moved"}
	if levels > 1 {
		n.name = strings.Repeat("w", 250)
	}
	top, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	n.fds = append(n.fds, top)
	for range levels {
		parent := n.fds[len(n.fds)-1]
		if err := unix.Mkdirat(parent, n.name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			n.remove()
			return nil, fmt.Errorf("nesting %d levels below %s: %w", len(n.fds), dir, err)
		}
		fd, err := unix.Openat(parent, n.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			n.remove()
			return nil, fmt.Errorf("nesting %d levels below %s: %w", len(n.fds), dir, err)
		}
		n.fds = append(n.fds, fd)
	}
	return n, nil
}

// move moves process pid into the deepest cgroup.
func (n *nest) move(pid int) error {
	procs, err := unix.Openat(n.fds[len(n.fds)-1], "cgroup.procs", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the nest's cgroup.procs: %w", err)
	}
	defer func() { _ = unix.Close(procs) }()
	if _, err := unix.Write(procs, []byte(strconv.Itoa(pid))); err != nil {
		return fmt.Errorf("moving process %d %d levels down: %w", pid, len(n.fds)-1, err)
	}
	return nil
}

// populated tells whether a process is still in the deepest cgroup.
func (n *nest) populated() bool {
	fd, err := unix.Openat(n.fds[len(n.fds)-1], "cgroup.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer func() { _ = unix.Close(fd) }()
	b := make([]byte, 256)
	k, _ := unix.Read(fd, b)
	return strings.Contains(string(b[:max(k, 0)]), "populated 1")
}

// remove removes the chain from the bottom up, waiting a little for its processes to
// be gone, and closes its descriptors; once.
func (n *nest) remove() {
	n.once.Do(func() {
		for i := len(n.fds) - 1; i > 0; i-- {
			for range 100 {
				err := unix.Unlinkat(n.fds[i-1], n.name, unix.AT_REMOVEDIR)
				if err == nil || errors.Is(err, unix.ENOENT) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		for _, fd := range n.fds {
			_ = unix.Close(fd)
		}
	})
}
