// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// workerArg, as the first argument, makes nr1-load a fork worker. It is not a flag: a
// worker is only ever started by nr1-load itself.
const workerArg = "__nr1-load-fork-worker"

// A worker's descriptors: fd 3 is the read end of a pipe whose write end only the parent
// holds (EOF: the parent is gone), then the inherited files in order.
const lifeFD = 3

// forkSpec tells a worker what it inherited and what to map of it.
type forkSpec struct {
	Maps   []forkMap `json:"maps,omitempty"`
	Queues []int     `json:"queues,omitempty"`
}

// forkMap is one shared mapping of an inherited DMA file descriptor.
type forkMap struct {
	FD     int   `json:"fd"`
	Offset int64 `json:"offset"`
	Size   int64 `json:"size"`
}

// workers are the processes started by --fork: each inherited the parent's DMA file
// and queue descriptors (the same open file descriptions), mapped the same ranges of the
// DMA files, and holds them until the parent exits.
type workers struct {
	life  *os.File // write end of the life pipe; closing it ends every worker
	procs []*exec.Cmd
}

// spec describes what the load holds now as a worker inherits it: ExtraFiles (after the
// life pipe) and, for each, the mappings to make.
func (l *load) spec() (forkSpec, []*os.File) {
	var spec forkSpec
	var files []*os.File
	for _, d := range []*dmaFile{&l.compute, &l.cpu} {
		if d.f == nil {
			continue
		}
		fd := lifeFD + 1 + len(files)
		files = append(files, d.f)
		off := d.base * mb
		for _, m := range d.mappings {
			spec.Maps = append(spec.Maps, forkMap{FD: fd, Offset: off, Size: int64(len(m))})
			off += int64(len(m))
		}
	}
	for _, q := range l.queues.fds {
		spec.Queues = append(spec.Queues, lifeFD+1+len(files))
		files = append(files, q)
	}
	return spec, files
}

// fork starts n workers holding what the load holds now. They are stopped by stop, or
// end by themselves when this process exits, however it exits.
func (l *load) fork(n int) (*workers, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	spec, files := l.spec()
	arg, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	defer lifeR.Close() // the workers have their copies
	w := &workers{life: lifeW}
	for i := range n {
		cmd := exec.Command(exe, workerArg, string(arg))
		cmd.ExtraFiles = append([]*os.File{lifeR}, files...)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			_ = w.stop() // the start failure is the error to report
			return nil, fmt.Errorf("starting worker %d: %w", i+1, err)
		}
		w.procs = append(w.procs, cmd)
		if err := awaitReady(out, 10*time.Second); err != nil {
			_ = w.stop() // the readiness failure is the error to report
			return nil, fmt.Errorf("worker %d (pid %d): %w", i+1, cmd.Process.Pid, err)
		}
	}
	return w, nil
}

// awaitReady reads the worker's "ready" line.
func awaitReady(out io.Reader, timeout time.Duration) error {
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != "ready" {
			return errors.New("ended before holding what it inherited")
		}
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("not ready after %v", timeout)
	}
}

func (w *workers) pids() []int {
	if w == nil {
		return nil
	}
	pids := make([]int, 0, len(w.procs))
	for _, p := range w.procs {
		pids = append(pids, p.Process.Pid)
	}
	return pids
}

// stop ends the workers and waits for them.
func (w *workers) stop() error {
	if w == nil {
		return nil
	}
	_ = w.life.Close() // closing the write end is the signal; nothing is written
	var errs []error
	for _, p := range w.procs {
		if err := p.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("worker %d: %w", p.Process.Pid, err))
		}
	}
	w.procs = nil
	return errors.Join(errs...)
}

// workerMain is a worker's life: map what the spec says of the inherited descriptors,
// say ready, and hold everything until the parent is gone.
func workerMain(args []string) error {
	if len(args) != 1 {
		return errors.New("worker: want one argument, the spec")
	}
	var spec forkSpec
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		return fmt.Errorf("worker spec: %w", err)
	}
	for _, m := range spec.Maps {
		p, err := unix.MmapPtr(m.FD, m.Offset, nil, uintptr(m.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED) //nolint:gosec // a mapping's size is positive
		if err != nil {
			return fmt.Errorf("worker: mapping %d bytes at %d of fd %d: %w", m.Size, m.Offset, m.FD, err)
		}
		*(*byte)(p) = 1 // a buffer in use
	}
	for _, fd := range spec.Queues {
		// Held as inherited: never wrapped in an *os.File, whose finalizer would close it.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			return fmt.Errorf("worker: queue fd %d: %w", fd, err)
		}
	}
	if _, err := os.Stdout.WriteString("ready\n"); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	_ = os.Stdout.Close() // the parent reads until EOF
	// Blocks until every copy of the write end is closed: the parent stopped the
	// workers or exited.
	_, _ = io.Copy(io.Discard, os.NewFile(lifeFD, "life"))
	return nil
}
