// SPDX-License-Identifier: Apache-2.0

// Command nr1-load is a compute-graph workload for the simulated NR1: it maps DMA
// memory, opens hypervisor queues and fills its writable layer as told, changes that
// over time, and reports what it holds. With --fork it holds the same in several
// processes, as a CG whose runtime forks workers does. With --ignore-sigterm it keeps
// running on SIGTERM, as a workload that does not shut down when asked does. With decoy
// NAME it waits as a process of another name (one named kubelet, say).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ignoreSIGTERM is set by --ignore-sigterm: SIGTERM is then logged and ignored.
var ignoreSIGTERM atomic.Bool

// sigtermExit is nr1-load's exit status on SIGTERM (--sigterm-exit): 143 by default, as
// a process killed by it; 0 as a workload that takes SIGTERM as the end of its work.
var sigtermExit atomic.Int32

func init() { sigtermExit.Store(128 + int32(syscall.SIGTERM)) }

type load struct {
	compute, cpu dmaFile
	queues       queues
	write        writable
	status       string
	out          io.Writer
	now          func() time.Time
	held         Holding
	workers      []int // PIDs of the --fork workers
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == decoyArg {
		if err := decoy(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "nr1-load: %v\n", err)
			os.Exit(2)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == decoyWaitArg {
		decoyWait()
		return
	}
	if len(os.Args) > 1 && os.Args[1] == poolArg {
		os.Exit(poolWorker(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == workerArg {
		if err := workerMain(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "nr1-load: %v\n", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := notifyContext(os.Stdout)
	err := run(ctx, os.Args[1:], os.Stdout)
	signalled := ctx.Err() != nil
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nr1-load: %v\n", err)
		os.Exit(1)
	}
	if signalled {
		// As a workload killed by SIGTERM would, so that its pod's status shows it.
		fmt.Fprintln(os.Stderr, "nr1-load: terminated")
		os.Exit(int(sigtermExit.Load()))
	}
}

// notifyContext is cancelled by SIGINT, and by SIGTERM unless --ignore-sigterm is set;
// an ignored SIGTERM is logged to out with its time.
func notifyContext(out io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGTERM && ignoreSIGTERM.Load() {
				fmt.Fprintf(out, "%s ignoring SIGTERM\n", time.Now().UTC().Format(time.RFC3339Nano))
				continue
			}
			cancel()
		}
	}()
	return ctx, func() { signal.Stop(sigs); cancel() }
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("nr1-load", flag.ContinueOnError)
	l := &load{out: out, now: time.Now}
	var initial Holding
	fs.StringVar(&l.compute.path, "compute-dma-file", "/dev/nr1_0_compute_dma", "compute DMA device file")
	fs.StringVar(&l.cpu.path, "cpu-dma-file", "/dev/nr1_0_cpu_dma", "CPU DMA device file")
	fs.Int64Var(&l.compute.base, "compute-dma-offset-mb", 0, "where in the compute DMA file the buffers start (MB): distinct buffers map distinct ranges")
	fs.Int64Var(&l.cpu.base, "cpu-dma-offset-mb", 0, "where in the CPU DMA file the buffers start (MB)")
	fs.StringVar(&l.queues.path, "queue-file", "/dev/nr1_0_hv_queue", "hypervisor queue device file")
	fs.StringVar(&l.write.path, "write-file", "/var/lib/nr1-load/blob", "file filled in the writable layer")
	fs.StringVar(&l.status, "status-file", "/var/lib/nr1-load/status.json", "where what is held is reported (empty: nowhere)")
	fs.Int64Var(&initial.ComputeDMAMB, "compute-dma-mb", 0, "MB of compute DMA memory to map")
	fs.Int64Var(&initial.CPUDMAMB, "cpu-dma-mb", 0, "MB of CPU DMA memory to map")
	fs.Int64Var(&initial.Queues, "queues", 0, "hypervisor queue handles to open")
	fs.Int64Var(&initial.WriteMB, "write-mb", 0, "MB to write into the writable layer")
	fs.BoolVar(&l.write.unlink, "unlink-written", false, "adversary: remove the name of what is written to the writable layer once written, keeping it open (its blocks stay in the layer)")
	forks := fs.Int("fork", 0, "after taking the initial holding, start this many worker processes that inherit its DMA file and queue descriptors, map the same ranges of the DMA files and hold it all until nr1-load exits (steps change only nr1-load's own holding)")
	var adv adversary
	fs.IntVar(&adv.dupQueues, "dup-queues", 0, "adversary: open one more queue handle and dup() it so many times (one queue, many fds)")
	fs.IntVar(&adv.tinyMaps, "tiny-maps", 0, "adversary: map so many single pages of the compute DMA file, every other page from --tiny-maps-offset-mb")
	fs.Int64Var(&adv.tinyBaseMB, "tiny-maps-offset-mb", 1024, "where in the compute DMA file the tiny mappings start (MB)")
	fs.IntVar(&adv.inflightQueues, "inflight-queues", 0, "adversary: open so many queue handles, send them over a unix socket nobody reads and close its own fds")
	fs.StringVar(&adv.sendTo, "send-queues-to", "", "adversary: send the --inflight-queues handles to the unix datagram socket at this path (a neighbour's) instead of a socket pair of its own")
	fs.IntVar(&adv.parkQueues, "park-queues", 0, "adversary: open so many queue handles, send them into a socket pair of its own, hand the pair's receiving end to the keeper at --park-with and close everything of its own (what outlives a container that exits)")
	fs.StringVar(&adv.parkWith, "park-with", "", "the unix datagram socket a keeper (--keep-sockets) of the pod binds, where --park-queues hands its socket")
	fs.StringVar(&adv.keepSockets, "keep-sockets", "", "bind a unix datagram socket at this path and keep open every fd sent there, never reading it")
	fs.StringVar(&adv.bindSocket, "bind-socket", "", "adversary: bind a unix datagram socket at this path and never read it")
	fs.IntVar(&adv.blockedQueues, "blocked-queues", 0, "adversary: open so many queue handles, block a thread reading each and close their fds under the reads (the simulated queue needs CAP_NET_ADMIN for its read to block)")
	fs.IntVar(&adv.ringQueues, "ring-queues", 0, "adversary: open so many queue handles, register them with an io_uring and close its own fds")
	fs.IntVar(&adv.copies, "copies", 1, "adversary: send each in-flight handle, and register each ring handle, this many times (copies of one open file)")
	fs.IntVar(&adv.ringSlots, "ring-slots", 0, "adversary: make an io_uring with so many empty slots in its file table (past 16384, more than a scan reads)")
	fs.IntVar(&adv.nullFDs, "null-fds", 0, "adversary: hold so many fds on /dev/null (ordinary descriptors, costly to walk); --fork workers inherit as many each")
	probe := fs.Duration("probe", 0, "after the last step, try to open one more queue this often, closing it at once, and log each refusal with its time (0: never)")
	fs.IntVar(&adv.pathOnlyQueues, "path-only-queues", 0, "adversary: open so many O_PATH fds on the queue device (names, not handles)")
	pool := fs.Int("pool", 0, "after the last step, keep so many short-lived workers going, each opening one queue, holding it --pool-hold and exiting with it open, another starting at once; log each refusal and the counts every 5 s (pool opens=N refused=M failed=K)")
	poolHold := fs.Duration("pool-hold", 150*time.Millisecond, "how long a --pool worker holds its queue")
	once := fs.Bool("exit", false, "exit after the last step instead of holding until signalled")
	ignoreTerm := fs.Bool("ignore-sigterm", false, "keep running on SIGTERM, logging it with its time: only SIGINT or SIGKILL ends nr1-load")
	termExit := fs.Int("sigterm-exit", 128+int(syscall.SIGTERM), "exit status on SIGTERM (0: as a workload that ends its work when asked)")
	var steps []Step
	fs.Func("step", "DURATION:key=value,... change the holding at that offset from start (keys compute, cpu, queues, write); repeatable", func(v string) error {
		s, err := ParseStep(v)
		steps = append(steps, s)
		return err
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	ignoreSIGTERM.Store(*ignoreTerm)
	if *termExit < 0 || *termExit > 255 {
		return fmt.Errorf("--sigterm-exit %d: must be 0 to 255", *termExit)
	}
	sigtermExit.Store(int32(*termExit))
	if (adv.parkQueues > 0) != (adv.parkWith != "") || adv.parkQueues < 0 {
		return fmt.Errorf("--park-queues %d --park-with %q: parked queues need a keeper's socket, and a keeper's socket queues to park", adv.parkQueues, adv.parkWith)
	}
	if *forks < 0 {
		return fmt.Errorf("--fork %d: must not be negative", *forks)
	}
	if *pool < 0 || *poolHold <= 0 {
		return fmt.Errorf("--pool %d --pool-hold %v: a pool must not be negative, nor its hold at most 0", *pool, *poolHold)
	}
	for _, p := range []string{l.write.path, l.status} {
		if p != "" {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return fmt.Errorf("preparing %s: %w", p, err)
			}
		}
	}
	SortSteps(steps)
	l.reportBudget(os.Environ())
	start := l.now()
	if err := l.apply(initial); err != nil {
		return err
	}
	if adv.any() {
		if err := adv.hold(out, l.queues.path, l.compute.path); err != nil {
			return err
		}
		defer func() { _ = adv.release() }()
	}
	if *forks > 0 {
		w, err := l.fork(*forks)
		if err != nil {
			return err
		}
		defer func() { _ = w.stop() }() // their exit status says nothing once we are done
		l.workers = w.pids()
		if err := l.report(); err != nil {
			return err
		}
	}
	for _, s := range steps {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(start.Add(s.At))):
		}
		// Said before it is taken: a process killed for what a step takes, before its
		// holding line, has said when it began taking it.
		next := s.Apply(l.held)
		fmt.Fprintf(l.out, "%s stepping to compute_dma_mb=%d cpu_dma_mb=%d queues=%d write_mb=%d\n",
			l.now().UTC().Format(time.RFC3339Nano), next.ComputeDMAMB, next.CPUDMAMB, next.Queues, next.WriteMB)
		if err := l.apply(next); err != nil {
			return err
		}
	}
	if !*once {
		switch {
		case *pool > 0:
			return l.pool(ctx, *pool, *poolHold, 5*time.Second)
		case *probe > 0:
			l.probe(ctx, *probe)
		}
		<-ctx.Done()
	}
	return nil
}

// probe tries a new open of the queue device every interval until ctx ends, closing
// it at once, and logs each try: a throttled CG's opens are refused by the kernel, and
// its log shows from when (and whether one got through while the agent was away).
func (l *load) probe(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fd, err := unix.Open(l.queues.path, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			fmt.Fprintf(l.out, "%s probe refused: %v\n", l.now().UTC().Format(time.RFC3339Nano), err)
			continue
		}
		fmt.Fprintf(l.out, "%s probe opened\n", l.now().UTC().Format(time.RFC3339Nano))
		_ = unix.Close(fd)
	}
}

// apply changes every holding to target, then reports.
func (l *load) apply(target Holding) error {
	if err := l.compute.set(target.ComputeDMAMB); err != nil {
		return err
	}
	if err := l.cpu.set(target.CPUDMAMB); err != nil {
		return err
	}
	if err := l.queues.set(target.Queues); errors.Is(err, unix.EDQUOT) {
		fmt.Fprintf(l.out, "%s refused: %v\n", l.now().UTC().Format(time.RFC3339Nano), err)
		target.Queues = int64(len(l.queues.fds))
	} else if err != nil {
		return err
	}
	if err := l.write.set(target.WriteMB); err != nil {
		return err
	}
	l.held = target
	return l.report()
}

// reportBudget logs the budget the device plugin's Allocate gave this container.
func (l *load) reportBudget(env []string) {
	var budget []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "NR1_") {
			budget = append(budget, kv)
		}
	}
	sort.Strings(budget)
	fmt.Fprintf(l.out, "%s budget %s\n", l.now().UTC().Format(time.RFC3339Nano), strings.Join(budget, " "))
}

type status struct {
	Time    string `json:"time"`
	PID     int    `json:"pid"`
	Workers []int  `json:"workers,omitempty"`
	Holding
}

// report logs one line with a timestamp and rewrites the status file atomically.
func (l *load) report() error {
	st := status{Time: l.now().UTC().Format(time.RFC3339Nano), PID: os.Getpid(), Workers: l.workers, Holding: l.held}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encoding status: %w", err)
	}
	var forked string
	if len(l.workers) > 0 {
		forked = fmt.Sprintf(" workers=%d", len(l.workers))
	}
	fmt.Fprintf(l.out, "%s holding compute_dma_mb=%d cpu_dma_mb=%d queues=%d write_mb=%d%s\n",
		st.Time, st.ComputeDMAMB, st.CPUDMAMB, st.Queues, st.WriteMB, forked)
	if l.status == "" {
		return nil
	}
	tmp := l.status + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	if err := os.Rename(tmp, l.status); err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	return nil
}
