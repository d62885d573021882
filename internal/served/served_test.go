// SPDX-License-Identifier: Apache-2.0

package served

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/neureality-sdk/nr1-agent/internal/syncbuf"
)

// socketDir is a directory short enough for a unix socket's path (107 bytes).
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// harness serves a gRPC health service with the options' defaults filled: the same
// name every serve unless o names its own, no periodic check unless o sets one.
type harness struct {
	sock    *Socket
	logged  *syncbuf.Buffer
	serves  atomic.Int32 // calls of Served
	mu      sync.Mutex
	l       map[string]net.Listener
	stopped func()
}

func serve(t *testing.T, o Options) *harness {
	t.Helper()
	h := &harness{logged: &syncbuf.Buffer{}, l: map[string]net.Listener{}}
	if o.Name == nil {
		o.Name = func() string { return "p.sock" }
	}
	o.New = func(string) (*grpc.Server, func()) {
		s := grpc.NewServer()
		healthpb.RegisterHealthServer(s, health.NewServer())
		return s, nil
	}
	o.Listen = func(path string) (net.Listener, error) {
		l, err := net.Listen("unix", path)
		if err == nil {
			h.mu.Lock()
			h.l[path] = l
			h.mu.Unlock()
		}
		return l, err
	}
	o.Served = func() { h.serves.Add(1) }
	o.What = "test socket"
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	o.Log = slog.New(slog.NewTextHandler(h.logged, nil))
	ctx, cancel := context.WithCancel(context.Background())
	sock, err := Serve(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	h.sock = sock
	h.stopped = func() { cancel(); sock.Stop() }
	t.Cleanup(h.stopped)
	return h
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// answers says whether something serving the health service answers at path.
func answers(path string) bool {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err == nil
}

// A socket removed, or replaced by a file that is not it, is served anew: seen by the
// directory's events, with no periodic check.
func TestRemovedOrReplacedIsServedAnewOnItsEvent(t *testing.T) {
	dir := socketDir(t)
	h := serve(t, Options{Dir: dir})
	path := filepath.Join(dir, "p.sock")
	if got := h.sock.Path(); got != path || !answers(path) {
		t.Fatalf("served at %q, answers %v", got, answers(path))
	}
	for _, c := range []struct {
		why     string
		replace func() error
	}{
		{"its socket is gone", func() error { return os.Remove(path) }},
		{"its socket was replaced by another", func() error {
			// At once, as a rename does: removed, then written, the path would name
			// nothing a moment, and the socket be seen gone.
			other := filepath.Join(dir, "other")
			if err := os.WriteFile(other, nil, 0o600); err != nil {
				return err
			}
			return os.Rename(other, path)
		}},
	} {
		again := strings.Count(h.logged.String(), "test socket served again")
		if err := c.replace(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, c.why, func() bool { return strings.Count(h.logged.String(), "test socket served again") > again })
		if !strings.Contains(h.logged.String(), c.why) {
			t.Errorf("why not logged (%s): %s", c.why, h.logged.String())
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Type() != os.ModeSocket || !answers(path) {
			t.Fatalf("%s: not served anew: %v %v", c.why, fi, err)
		}
	}
}

// A listener that fails, its socket left in place (no event tells of it), is served
// again after the backoff on the injected clock, its socket removed meanwhile; each
// serve has a name of its own when Name says so, and the owner hears of each.
func TestFailedListenerIsServedAgainAfterTheBackoff(t *testing.T) {
	dir := socketDir(t)
	clk := testingclock.NewFakeClock(time.Now())
	var n atomic.Int32
	h := serve(t, Options{Dir: dir, Clock: clk, Name: func() string { return fmt.Sprintf("p%d.sock", n.Add(1)) }})
	first := h.sock.Path()
	h.mu.Lock()
	l := h.l[first].(*net.UnixListener)
	h.mu.Unlock()
	l.SetUnlinkOnClose(false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the failure logged", func() bool {
		return strings.Contains(h.logged.String(), `level=ERROR msg="test socket served anew" socket=`+first+` why="its listener failed`)
	})
	if _, err := os.Stat(first); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed socket left: %v", err)
	}
	if got := h.sock.Path(); got != "" {
		t.Errorf("path %q while served again", got)
	}
	waitFor(t, "served again once the backoff is waited", func() bool {
		clk.Step(Backoff.Duration)
		return h.sock.Path() != ""
	})
	if second := h.sock.Path(); second == first || !answers(second) {
		t.Errorf("served again at %s (first %s), answers %v", second, first, answers(second))
	}
	if got := h.serves.Load(); got != 3 {
		t.Errorf("the owner heard of %d serves and losses, want 3 (served, lost, served again)", got)
	}
}

// Stale, asked at every check, has the socket served anew.
func TestStaleIsServedAnew(t *testing.T) {
	dir := socketDir(t)
	var stale atomic.Bool
	stale.Store(true)
	h := serve(t, Options{Dir: dir, Check: 5 * time.Millisecond, Stale: func(time.Time) string {
		if stale.Swap(false) {
			return "the owner says so"
		}
		return ""
	}})
	waitFor(t, "served anew", func() bool { return strings.Contains(h.logged.String(), "test socket served again") })
	if !strings.Contains(h.logged.String(), `why="the owner says so"`) {
		t.Errorf("why not logged: %s", h.logged.String())
	}
}

// A socket stopped after a successor took its path leaves the successor's: removing it
// would cut the successor off from the kubelet for good.
func TestStopLeavesASuccessorsSocket(t *testing.T) {
	dir := socketDir(t)
	old := serve(t, Options{Dir: dir})
	path := old.sock.Path()
	was, err := Identify(path)
	if err != nil {
		t.Fatal(err)
	}
	// A file's times come from the kernel's coarse clock, a tick apart: a successor
	// served in the same tick could take the freed inode and the same birth time, and
	// look like the socket it replaced. A successor is an agent started anew, seconds on.
	time.Sleep(50 * time.Millisecond)
	successor := serve(t, Options{Dir: dir})
	// The old one sees its socket replaced, and leaves the successor's in place.
	waitFor(t, "the old one yields", func() bool { return strings.Contains(old.logged.String(), errHeld.Error()) })
	old.stopped()
	waitFor(t, "the successor serves", func() bool { return successor.sock.Path() != "" && answers(path) })
	now, err := Identify(path)
	if err != nil || now == was {
		t.Fatalf("the successor's socket: %v %v", now, err)
	}
	successor.stopped()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("its own socket left by a stopped server: %v", err)
	}
}

// A server whose path a successor took (the same name each serve, as the DRA plugin's)
// does not take it back while the successor answers on it, and serves again once the
// path is free.
func TestASuccessorsPathIsNotTakenBack(t *testing.T) {
	dir := socketDir(t)
	old := serve(t, Options{Dir: dir})
	path := old.sock.Path()
	time.Sleep(50 * time.Millisecond) // a successor starts seconds on (TestStopLeavesASuccessorsSocket)
	successor := serve(t, Options{Dir: dir})
	theirs, err := Identify(path)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old one tries twice", func() bool { return strings.Count(old.logged.String(), errHeld.Error()) >= 2 })
	if now, err := Identify(path); err != nil || now != theirs || !answers(path) {
		t.Fatalf("the successor's socket taken: %v (was %v), %v, answers %v", now, theirs, err, answers(path))
	}
	if strings.Contains(successor.logged.String(), "served anew") {
		t.Errorf("the successor lost its socket: %s", successor.logged.String())
	}
	if !strings.Contains(old.logged.String(), `level=INFO msg="test socket not served again yet, retrying"`) {
		t.Errorf("yielding logged as a failure: %s", old.logged.String())
	}
	successor.stopped()
	waitFor(t, "the old one serves again once the path is free", func() bool { return old.sock.Path() == path && answers(path) })
}
