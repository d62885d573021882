// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/neureality-sdk/nr1-agent/bpf"
)

// Changes tells, as it happens, that a process opened or mapped a target
// (or took an fd of one from another process): a CG may have just taken more than it
// was given, and a scan now finds out in milliseconds instead of at the next interval.
// It is a wake-up only; the scan decides what anyone holds.
type Changes struct {
	ch   *bpf.Changes
	wake chan struct{}
	seen atomic.Uint64
	lost atomic.Uint64 // the last count read: a failed read is not a reset
	log  *slog.Logger
}

// WatchChanges attaches the BPF source's syscall tracepoints.
func (b *BPF) WatchChanges(log *slog.Logger) (*Changes, error) {
	ch, err := b.fp.WatchChanges()
	if err != nil {
		return nil, err
	}
	return &Changes{ch: ch, wake: make(chan struct{}, 1), log: log}, nil
}

// Wake receives once after any number of changes, until it is received. It is closed
// when changes can no longer be read: no wake will come.
func (c *Changes) Wake() <-chan struct{} { return c.wake }

// Seen is how many changes were reported.
func (c *Changes) Seen() uint64 { return c.seen.Load() }

// Lost is how many changes the kernel could not report (its ring buffer full); the
// wake-up they would have given came with the changes before them.
func (c *Changes) Lost() uint64 {
	if n, err := c.ch.Lost(); err == nil {
		c.lost.Store(n)
	}
	return c.lost.Load()
}

// Run reads the changes until ctx ends, then detaches the tracepoints. A failure to
// read closes Wake, so that a cadence that rested on the wakes samples at its interval
// again, and is logged.
func (c *Changes) Run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { _ = c.ch.Close() })
	defer stop()
	for {
		_, err := c.ch.Read()
		if errors.Is(err, ringbuf.ErrClosed) {
			return
		}
		if err != nil {
			c.log.Error("reading footprint changes failed: sampling at the interval only", "err", err)
			_ = c.ch.Close()
			close(c.wake)
			return
		}
		c.seen.Add(1)
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}
