// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// Change is a process taking more of a target, as the syscall tracepoints report it:
// mapping one, opening one, or taking an fd of one from another process.
type Change = footprintChange

// ChangeSize is the size of struct change in footprint.bpf.c.
const ChangeSize = 16

// Changes reads the changes the footprint's tracepoints report, as they happen.
type Changes struct {
	links []link.Link
	rd    *ringbuf.Reader
	lost  *ebpf.Variable
}

// changeTracepoints are the syscalls followed besides mmap, which the mappers' marks
// share (Footprint.attachMmap); an optional one is missing on some architectures
// (open(2) on arm64) or kernels.
var changeTracepoints = []struct {
	name     string
	prog     func(*footprintPrograms) *ebpf.Program
	optional bool
}{
	{"sys_exit_openat", func(p *footprintPrograms) *ebpf.Program { return p.Nr1ExitOpenat }, false},
	{"sys_exit_openat2", func(p *footprintPrograms) *ebpf.Program { return p.Nr1ExitOpenat2 }, true},
	{"sys_exit_open", func(p *footprintPrograms) *ebpf.Program { return p.Nr1ExitOpen }, true},
	{"sys_exit_pidfd_getfd", func(p *footprintPrograms) *ebpf.Program { return p.Nr1ExitPidfdGetfd }, true},
}

// WatchChanges attaches the syscall tracepoints. Tracepoints are found through tracefs,
// which a container's own sysfs does not mount: it is mounted at /sys/kernel/tracing
// when no tracefs is mounted anywhere the agent sees.
func (f *Footprint) WatchChanges() (*Changes, error) {
	if err := ensureTracefs(); err != nil {
		return nil, err
	}
	if err := f.attachMmap(); err != nil {
		return nil, err
	}
	c := &Changes{lost: f.objs.ChangesLost}
	for _, tp := range changeTracepoints {
		l, err := link.Tracepoint("syscalls", tp.name, tp.prog(&f.objs.footprintPrograms), nil)
		if err != nil {
			if tp.optional && errors.Is(err, os.ErrNotExist) {
				continue
			}
			_ = c.Close()
			return nil, fmt.Errorf("attaching to tracepoint syscalls/%s: %w", tp.name, err)
		}
		c.links = append(c.links, l)
	}
	err := attachCompat(compatProbe{"kretprobe/compat_new_fd", f.objs.Nr1CompatNewFd}, func(_ string, l link.Link) error {
		c.links = append(c.links, l)
		return nil
	})
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	rd, err := ringbuf.NewReader(f.objs.Changes)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("reading the changes ring buffer: %w", err)
	}
	c.rd = rd
	return c, nil
}

// Read blocks until a change is reported; after Close it returns ringbuf.ErrClosed.
func (c *Changes) Read() (Change, error) {
	rec, err := c.rd.Read()
	if err != nil {
		return Change{}, fmt.Errorf("reading a change: %w", err)
	}
	if len(rec.RawSample) < ChangeSize {
		return Change{}, fmt.Errorf("a change of %d bytes, want %d", len(rec.RawSample), ChangeSize)
	}
	e := binary.NativeEndian
	return Change{
		CgroupId: e.Uint64(rec.RawSample[0:]),
		Pid:      e.Uint32(rec.RawSample[8:]),
		Target:   e.Uint32(rec.RawSample[12:]),
	}, nil
}

// Lost is how many changes were not reported because the ring buffer was full.
func (c *Changes) Lost() (uint64, error) {
	var n uint64
	if err := c.lost.Get(&n); err != nil {
		return 0, fmt.Errorf("reading changes_lost: %w", err)
	}
	return n, nil
}

// Close detaches the tracepoints, but mmap's, which the footprint keeps, and unblocks
// Read.
func (c *Changes) Close() error {
	var errs []error
	if c.rd != nil {
		errs = append(errs, c.rd.Close())
	}
	for _, l := range c.links {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

var tracefsOnce = sync.OnceValue(mountTracefs)

func ensureTracefs() error { return tracefsOnce() }

// mountTracefs mounts tracefs at /sys/kernel/tracing unless one is mounted already.
func mountTracefs() error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("looking for tracefs: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "36 35 0:32 / /sys/kernel/tracing rw,… - tracefs tracefs rw"
		if _, after, ok := strings.Cut(sc.Text(), " - "); ok && strings.HasPrefix(after, "tracefs ") {
			return nil
		}
	}
	if err := unix.Mount("tracefs", "/sys/kernel/tracing", "tracefs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("no tracefs mounted, and mounting one at /sys/kernel/tracing: %w", err)
	}
	return nil
}
