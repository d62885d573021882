// SPDX-License-Identifier: Apache-2.0

// Command nr1-agent is the NR1 node agent: it advertises the NR1 resources to the
// kubelet and enforces what each compute graph was allocated. `nr1-agent cleanup`
// undoes on a node what the agent did there.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/neureality-sdk/nr1-agent/agent"
	"github.com/neureality-sdk/nr1-agent/agent/config"
)

// version is set at link time.
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "cleanup" {
		return runCleanup(args[1:], getenv, stdout, stderr)
	}
	cfg, err := config.Load(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "nr1-agent: %v\n", err)
		return 2
	}
	log := newLogger(stderr, cfg.Log)
	log.Info("starting nr1-agent", "version", version)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	api := connect(cfg, log)
	removal := watchRemoval(ctx, api, getenv, log)
	code := 0
	a, err := agent.New(cfg, api, version, log)
	if err == nil {
		err = a.Run(ctx)
	}
	if err != nil {
		log.Error("nr1-agent failed", "err", err)
		fmt.Fprintf(stderr, "nr1-agent: %v\n", err)
		code = 1
	}
	if err := cleanupIfRemoved(removal, cfg, log); err != nil {
		log.Error("undoing what the agent did on this node", "err", err)
		code = 1
	}
	if code == 0 {
		log.Info("nr1-agent stopped")
	}
	return code
}

// runCleanup is `nr1-agent cleanup`, with the agent's flags, environment and file.
func runCleanup(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "nr1-agent cleanup: %v\n", err)
		return 2
	}
	if err := cleanup(cfg, stdout); err != nil {
		fmt.Fprintf(stderr, "nr1-agent cleanup: %v\n", err)
		return 1
	}
	return 0
}

func newLogger(w io.Writer, c config.Log) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated by config
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
