// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/internal/syncbuf"
)

// startMain runs nr1-load as a process with args and waits until it logs want; done
// receives how the process ended.
func startMain(t *testing.T, want string, args ...string) (cmd *exec.Cmd, out *syncbuf.Buffer, done <-chan error) {
	t.Helper()
	cmd = exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "NR1_LOAD_TEST_MAIN=1")
	out = &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended, reaped := make(chan error, 1), make(chan struct{})
	go func() { ended <- cmd.Wait(); close(reaped) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-reaped
	})
	waitLog(t, out, want)
	return cmd, out, ended
}

// exitedOnSignal checks that nr1-load ended with 143, as a workload ended by SIGTERM.
func exitedOnSignal(t *testing.T, done <-chan error, out *syncbuf.Buffer) {
	t.Helper()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 128+int(syscall.SIGTERM) {
			t.Errorf("ended with %v, want exit %d:\n%s", err, 128+int(syscall.SIGTERM), out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("nr1-load did not end:\n%s", out.String())
	}
}

func waitLog(t *testing.T, out *syncbuf.Buffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q logged:\n%s", want, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loadArgs are nr1-load's flags to hold two queues of l's files.
func loadArgs(l *load, extra ...string) []string {
	return append([]string{
		"--compute-dma-file", l.compute.path, "--cpu-dma-file", l.cpu.path, "--queue-file", l.queues.path,
		"--write-file", l.write.path, "--status-file", l.status, "--queues", "2",
	}, extra...)
}

// TestIgnoreSIGTERM: with --ignore-sigterm, SIGTERM is logged and nr1-load keeps
// running; SIGINT still ends it.
func TestIgnoreSIGTERM(t *testing.T) {
	cmd, out, done := startMain(t, " holding ", loadArgs(newLoad(t), "--ignore-sigterm")...)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitLog(t, out, " ignoring SIGTERM")
	select {
	case err := <-done:
		t.Fatalf("nr1-load ended on SIGTERM (%v):\n%s", err, out.String())
	case <-time.After(300 * time.Millisecond):
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	exitedOnSignal(t, done, out)
}

// TestSIGTERMEndsByDefault: without the flag SIGTERM ends nr1-load.
func TestSIGTERMEndsByDefault(t *testing.T) {
	cmd, out, done := startMain(t, " holding ", loadArgs(newLoad(t))...)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exitedOnSignal(t, done, out)
	if strings.Contains(out.String(), "ignoring SIGTERM") {
		t.Errorf("SIGTERM ignored without --ignore-sigterm:\n%s", out.String())
	}
}
