// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

// decoyArg runs nr1-load as a process of another name: `nr1-load decoy NAME ARG...`
// runs the binary through a link named NAME, with NAME and ARG... as its command line,
// as a pod's process may pretend to be one of the node's (a "kubelet" whose --config
// names /dev/zero). It only waits for SIGTERM.
const (
	decoyArg      = "decoy"
	decoyWaitArg  = "decoy-wait"
	decoyUsageMsg = "usage: nr1-load decoy NAME [ARG...]"
)

// decoy links the running binary as name in a directory of its own and replaces this
// process with it, its command line name, decoyWaitArg and args: the kernel names a
// process after the path it was executed by, and a link takes nothing of the writable
// layer.
func decoy(args []string) error {
	if len(args) < 1 || args[0] == "" || filepath.Base(args[0]) != args[0] {
		return fmt.Errorf("%s", decoyUsageMsg)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding its own binary: %w", err)
	}
	dir, err := os.MkdirTemp("", "decoy")
	if err != nil {
		return fmt.Errorf("a directory for the link: %w", err)
	}
	path := filepath.Join(dir, args[0])
	if err := os.Symlink(self, path); err != nil {
		return fmt.Errorf("linking %s: %w", path, err)
	}
	argv := append([]string{args[0], decoyWaitArg}, args[1:]...)
	// The workload's own binary, through the link it just made: what its user asked to run.
	if err := syscall.Exec(path, argv, os.Environ()); err != nil { //nolint:gosec // G702: the binary itself, by a name the user gave
		return fmt.Errorf("running %s: %w", path, err)
	}
	return nil
}

// decoyWait waits for SIGTERM or SIGINT.
func decoyWait() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Println("waiting as", filepath.Base(os.Args[0]))
	<-ctx.Done()
}
