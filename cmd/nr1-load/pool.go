// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// poolArg, as the first argument, makes nr1-load a pool worker: it opens one queue,
// holds it for a while and exits with it open, the kernel releasing it. Like workerArg,
// not a flag.
const poolArg = "__nr1-load-pool-worker"

// A pool worker's exit status says how its open went.
const (
	poolHeld    = 0
	poolRefused = 3 // EDQUOT: the gate refused it
)

// poolWorker opens the queue file args[0], holds it args[1] (a duration) and exits
// holding it.
func poolWorker(args []string) int {
	if len(args) != 2 {
		fmt.Fprintf(os.Stderr, "nr1-load pool worker: want a queue file and a time, got %q\n", args)
		return 1
	}
	hold, err := time.ParseDuration(args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "nr1-load pool worker: %v\n", err)
		return 1
	}
	if _, err := unix.Open(args[0], unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
		fmt.Fprintf(os.Stderr, "nr1-load pool worker: opening %s: %v\n", args[0], err)
		if errors.Is(err, unix.EDQUOT) {
			return poolRefused
		}
		return 1
	}
	time.Sleep(hold)
	return poolHeld
}

// pool keeps n workers going until ctx ends, as a CG's pool of short-lived workers at
// its booking: each opens one queue, holds it hold and exits, and another takes its
// place at once. Each refusal is logged with its time, and every interval (and at the
// end) the counts so far: "pool opens=N refused=M failed=K".
func (l *load) pool(ctx context.Context, n int, hold, interval time.Duration) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("pool: %w", err)
	}
	var opens, refused, failed atomic.Int64
	report := func() {
		fmt.Fprintf(l.out, "%s pool opens=%d refused=%d failed=%d\n", l.now().UTC().Format(time.RFC3339Nano), opens.Load(), refused.Load(), failed.Load())
	}
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				// A worker still running a minute past its hold is stuck: killed, and
				// counted failed. One holding when the pool ends is waited for.
				stuck, stop := context.WithTimeout(context.Background(), hold+time.Minute)
				cmd := exec.CommandContext(stuck, exe, poolArg, l.queues.path, hold.String())
				out, err := cmd.CombinedOutput()
				stop()
				var exit *exec.ExitError
				switch {
				case err == nil:
					opens.Add(1)
				case errors.As(err, &exit) && exit.ExitCode() == poolRefused:
					refused.Add(1)
					fmt.Fprintf(l.out, "%s pool refused: worker %d: %s\n", l.now().UTC().Format(time.RFC3339Nano), w, bytes.TrimSpace(out))
				default:
					failed.Add(1)
					fmt.Fprintf(l.out, "%s pool failed: worker %d: %v: %s\n", l.now().UTC().Format(time.RFC3339Nano), w, err, bytes.TrimSpace(out))
					time.Sleep(100 * time.Millisecond) // what fails at once would fail again at once
				}
			}
		})
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			report()
		case <-ctx.Done():
			wg.Wait()
			report()
			return nil
		}
	}
}
