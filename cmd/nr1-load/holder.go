// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

const mb = 1 << 20

// dmaFile holds shared mappings of one DMA device file, as a driver's DMA buffers are
// mapped: one mapping per growth step, shrunk from the end (partially when needed).
type dmaFile struct {
	path string
	// base is where in the file the buffers start, in MB: two processes holding
	// distinct buffers of one device map distinct ranges.
	base     int64
	f        *os.File
	mappings [][]byte
}

func (d *dmaFile) held() int64 {
	var n int64
	for _, m := range d.mappings {
		n += int64(len(m))
	}
	return n / mb
}

func (d *dmaFile) set(target int64) error {
	if target > 0 && d.f == nil {
		f, err := os.OpenFile(d.path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("opening DMA file: %w", err)
		}
		d.f = f
	}
	for cur := d.held(); cur < target; cur = d.held() {
		size := uintptr((target - cur) * mb) //nolint:gosec // positive
		p, err := unix.MmapPtr(int(d.f.Fd()), (d.base+cur)*mb, nil, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return fmt.Errorf("mapping %d MB of %s at %d MB: %w", target-cur, d.path, d.base+cur, err)
		}
		m := unsafe.Slice((*byte)(p), size)
		m[0] = 1 // a buffer in use
		d.mappings = append(d.mappings, m)
	}
	for cur := d.held(); cur > target; cur = d.held() {
		last := d.mappings[len(d.mappings)-1]
		keep := int64(len(last)) - (cur-target)*mb
		if keep <= 0 {
			keep = 0
		}
		// A partial munmap, as a driver's client freeing part of a buffer does.
		tail := last[keep:]
		if err := unix.MunmapPtr(unsafe.Pointer(&tail[0]), uintptr(len(tail))); err != nil {
			return fmt.Errorf("unmapping %s: %w", d.path, err)
		}
		if keep == 0 {
			d.mappings = d.mappings[:len(d.mappings)-1]
		} else {
			d.mappings[len(d.mappings)-1] = last[:keep]
		}
	}
	if target == 0 && d.f != nil {
		err := d.f.Close()
		d.f = nil
		if err != nil {
			return fmt.Errorf("closing %s: %w", d.path, err)
		}
	}
	return nil
}

// queues holds open handles of the queue device, each its own open file description.
type queues struct {
	path string
	fds  []*os.File
}

// set opens or closes handles until target are held. An open refused as past the
// CG's booking (EDQUOT, the budget gate's answer) ends the growth there, as a CG whose
// runtime is told no would: the error says so, and what is held stays.
func (q *queues) set(target int64) error {
	for int64(len(q.fds)) < target {
		f, err := os.OpenFile(q.path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("opening queue %d of %s: %w", len(q.fds)+1, q.path, err)
		}
		q.fds = append(q.fds, f)
	}
	for int64(len(q.fds)) > target {
		last := q.fds[len(q.fds)-1]
		q.fds = q.fds[:len(q.fds)-1]
		if err := last.Close(); err != nil {
			return fmt.Errorf("closing queue of %s: %w", q.path, err)
		}
	}
	return nil
}

// writable fills a file in the container's writable layer with real bytes.
type writable struct {
	path string
	mb   int64
	// unlink has each growth written to a file of its own whose name is removed once
	// written, held open (held) until the holding shrinks: its blocks stay in the layer
	// with no name a walk of the layer finds.
	unlink bool
	held   []*os.File
}

func (w *writable) set(target int64) error {
	if target == w.mb {
		return nil
	}
	if w.unlink {
		return w.setUnlinked(target)
	}
	if target == 0 {
		if err := os.Remove(w.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", w.path, err)
		}
		w.mb = 0
		return nil
	}
	f, err := os.OpenFile(w.path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("writable layer file: %w", err)
	}
	defer f.Close()
	if target < w.mb {
		if err := f.Truncate(target * mb); err != nil {
			return fmt.Errorf("truncating %s: %w", w.path, err)
		}
	} else {
		chunk := make([]byte, mb)
		for i := range chunk {
			chunk[i] = byte(i) | 1 // not zeros, so no file system can keep it sparse
		}
		for i := w.mb; i < target; i++ {
			if _, err := f.WriteAt(chunk, i*mb); err != nil {
				return fmt.Errorf("writing %s: %w", w.path, err)
			}
		}
	}
	w.mb = target
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", w.path, err)
	}
	return nil
}

// setUnlinked holds target MB in files with no name: a growth writes one more, a shrink
// closes them all and writes what is left again.
func (w *writable) setUnlinked(target int64) error {
	if target < w.mb {
		for _, f := range w.held {
			_ = f.Close()
		}
		w.held, w.mb = nil, 0
	}
	if target == w.mb {
		return nil
	}
	name := fmt.Sprintf("%s.%d", w.path, len(w.held))
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("writable layer file: %w", err)
	}
	grown := writable{path: name}
	if err := grown.set(target - w.mb); err != nil {
		_ = f.Close()
		return err
	}
	if err := os.Remove(name); err != nil {
		_ = f.Close()
		return fmt.Errorf("removing %s: %w", name, err)
	}
	w.held = append(w.held, f)
	w.mb = target
	return nil
}
