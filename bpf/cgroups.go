// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// CgroupChanges counts, as the kernel reports them, the cgroups made and removed on
// the node, in every hierarchy: a v2 tree walked at one count is the same tree while
// the count is (v2 refuses renames).
type CgroupChanges struct {
	objs  cgroupsObjects
	links []link.Link
}

// WatchCgroups attaches the cgroup tracepoints (tracefs mounted when the agent sees
// none, as for WatchChanges).
func WatchCgroups() (*CgroupChanges, error) {
	if err := haveSyscall(); err != nil {
		return nil, fmt.Errorf("loading the cgroup programs: %w", err)
	}
	if err := ensureTracefs(); err != nil {
		return nil, err
	}
	c := &CgroupChanges{}
	if err := loadCgroupsObjects(&c.objs, nil); err != nil {
		return nil, fmt.Errorf("loading the cgroup programs: %w", err)
	}
	for name, prog := range map[string]*ebpf.Program{
		"cgroup_mkdir": c.objs.Nr1CgroupMkdir, "cgroup_rmdir": c.objs.Nr1CgroupRmdir,
	} {
		l, err := link.Tracepoint("cgroup", name, prog, nil)
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("attaching to tracepoint cgroup/%s: %w", name, err)
		}
		c.links = append(c.links, l)
	}
	return c, nil
}

// Count is how many cgroups were made or removed since WatchCgroups.
func (c *CgroupChanges) Count() (uint64, error) {
	var n uint64
	if err := c.objs.CgroupChanges.Get(&n); err != nil {
		return 0, fmt.Errorf("reading the count of cgroup changes: %w", err)
	}
	return n, nil
}

// Close detaches the tracepoints and releases the programs.
func (c *CgroupChanges) Close() error {
	var errs []error
	for _, l := range c.links {
		errs = append(errs, l.Close())
	}
	return errors.Join(append(errs, c.objs.Close())...)
}
