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
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// Backoff spaces the serves of a socket after its listener failed or its socket went:
// a socket that keeps failing, or that something keeps removing, is not a busy loop.
// A socket served longer than its cap starts again from the first step.
var Backoff = wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Steps: 10, Cap: 30 * time.Second}

// stopGrace bounds a graceful stop: the RPCs in flight finish, a stream that would hold
// the stop for longer is cut.
const stopGrace = 2 * time.Second

// Options say what is served, where, and how it is watched.
type Options struct {
	// Dir holds the socket; it is watched for the socket's removal or replacement.
	Dir string
	// Name names the socket in Dir at each serve: one name each time (the DRA plugin's
	// sockets), or a new one (a device plugin's: the kubelet keys a plugin by its
	// socket's path and refuses a path it still believes connected). It may be called
	// from another goroutine than Serve's.
	Name func() string
	// New makes the server of one serve, its services registered (a gRPC server once
	// stopped cannot serve again), and what ends its long-lived streams before it
	// stops (nil: nothing to end).
	New func(path string) (*grpc.Server, func())
	// Stale, when set, says why the socket served since servedAt must be served anew,
	// or "" to keep it; it is asked every Check.
	Stale func(servedAt time.Time) string
	// Check is how often the socket's identity (a missed event) and Stale are checked;
	// 0: only when fsnotify reports a change in Dir.
	Check time.Duration
	// Listen makes the socket at path; net.Listen's unix socket when nil.
	Listen func(path string) (net.Listener, error)
	// Served is called after every serve, and when a socket stops being served: the
	// owner registers the new socket where it must.
	Served func()
	// What names the socket in logs ("DRA plugin socket").
	What  string
	Clock clock.WithTicker
	Log   *slog.Logger
}

// Socket is a socket kept served until its context ends or Stop.
type Socket struct {
	o       Options
	stopped chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	current *serving // nil while it is served again
}

// serving is one serve: its listener, server and socket.
type serving struct {
	path     string
	id       FileID
	l        net.Listener
	srv      *grpc.Server
	end      func()
	servedAt time.Time
	lost     chan struct{} // closed when the socket must be served anew
	why      string        // why, once lost is closed
	failed   bool          // its listener failed, rather than its socket went
	once     sync.Once
}

func (s *serving) lose(why string, failed bool) {
	s.once.Do(func() {
		s.why, s.failed = why, failed
		close(s.lost)
		_ = s.l.Close()
	})
}

// Serve serves a first socket, and returns its error when it cannot (nothing is served
// then); it keeps a socket served until ctx ends or Stop.
func Serve(ctx context.Context, o Options) (*Socket, error) {
	if o.Listen == nil {
		o.Listen = listenUnix
	}
	if o.Served == nil {
		o.Served = func() {}
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("%s: watching %s: %w", o.What, o.Dir, err)
	}
	if err := w.Add(o.Dir); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("%s: watching %s: %w", o.What, o.Dir, err)
	}
	s := &Socket{o: o, stopped: make(chan struct{}), done: make(chan struct{})}
	first, err := s.serve(true)
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	go s.run(ctx, first, w)
	return s, nil
}

// Path is the socket served now, "" while it is served again.
func (s *Socket) Path() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == nil {
		return ""
	}
	return s.current.path
}

// Stop ends the serving and its restarts, then removes the socket if its path still
// names it: a successor that took the path keeps its own.
func (s *Socket) Stop() {
	select {
	case <-s.stopped:
	default:
		close(s.stopped)
	}
	<-s.done
}

// errHeld is a path another server answers on.
var errHeld = errors.New("another server answers on its path")

// serve listens on a socket named anew and serves it. The first serve takes the path
// whatever is there: a socket left by an earlier run (killed, or the node rebooted) is
// stale, and one an earlier agent still serves is its predecessor's, which this one
// succeeds. A later serve does not take a path another server answers on: that is a
// successor's, and taking it back would have the two take it from each other for good.
func (s *Socket) serve(first bool) (*serving, error) {
	path := filepath.Join(s.o.Dir, s.o.Name())
	if !first && answered(path) {
		return nil, fmt.Errorf("%s %s: %w", s.o.What, path, errHeld)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s %s: %w", s.o.What, path, err)
	}
	l, err := s.o.Listen(path)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", s.o.What, path, err)
	}
	if ul, ok := l.(*net.UnixListener); ok {
		// The socket is removed by its server alone, and only while its path names it.
		ul.SetUnlinkOnClose(false)
	}
	id, err := Identify(path)
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("%s %s: %w", s.o.What, path, err)
	}
	srv, end := s.o.New(path)
	sv := &serving{path: path, id: id, l: l, srv: srv, end: end, servedAt: s.o.Clock.Now(), lost: make(chan struct{})}
	go func() {
		// Serve returns when the listener fails or is closed (lose), or the server stops.
		if err := srv.Serve(l); err != nil {
			sv.lose(fmt.Sprintf("its listener failed: %v", err), true)
		}
	}()
	s.mu.Lock()
	s.current = sv
	s.mu.Unlock()
	s.o.Served()
	return sv, nil
}

// run keeps a socket served: it watches the one served, and serves another when it is
// lost, after the backoff.
func (s *Socket) run(ctx context.Context, sv *serving, w *fsnotify.Watcher) {
	defer close(s.done)
	defer func() { _ = w.Close() }()
	backoff := Backoff
	for {
		if sv != nil {
			s.watch(ctx, sv, w)
			s.mu.Lock()
			s.current = nil
			s.mu.Unlock()
			s.shut(sv)
			if s.ended(ctx) {
				s.o.Served()
				return
			}
			level := slog.LevelWarn
			if sv.failed {
				level = slog.LevelError
			}
			s.o.Log.Log(ctx, level, s.o.What+" served anew", "socket", sv.path, "why", sv.why)
			s.o.Served()
			if s.o.Clock.Since(sv.servedAt) > Backoff.Cap {
				backoff = Backoff // it served a while: not held back by earlier failures
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.stopped:
			return
		case <-s.o.Clock.After(backoff.Step()):
		}
		var err error
		if sv, err = s.serve(false); err != nil {
			level := slog.LevelError
			if errors.Is(err, errHeld) {
				level = slog.LevelInfo // a successor serves: this one is on its way out
			}
			s.o.Log.Log(ctx, level, s.o.What+" not served again yet, retrying", "err", err)
			continue
		}
		s.o.Log.Info(s.o.What+" served again", "socket", sv.path)
	}
}

// ended says whether the socket is no longer to be served.
func (s *Socket) ended(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	case <-s.stopped:
		return true
	default:
		return false
	}
}

// watch returns once sv is lost, or ctx ends or Stop: sv then lost too.
func (s *Socket) watch(ctx context.Context, sv *serving, w *fsnotify.Watcher) {
	var tick <-chan time.Time
	if s.o.Check > 0 {
		t := s.o.Clock.NewTicker(s.o.Check)
		defer t.Stop()
		tick = t.C()
	}
	for {
		select {
		case <-sv.lost:
			return
		case <-ctx.Done():
			sv.lose("stopped", false)
			return
		case <-s.stopped:
			sv.lose("stopped", false)
			return
		case ev, ok := <-w.Events:
			if !ok {
				w.Events = nil // checked at every tick only
				continue
			}
			if ev.Name == sv.path {
				s.check(sv)
			}
		case err := <-w.Errors:
			s.o.Log.Warn(s.o.What+": watching its directory", "dir", s.o.Dir, "err", err)
			s.check(sv) // an overflow may have dropped its event
		case <-tick:
			s.check(sv)
		}
	}
}

// check loses sv when its path no longer names it (the kubelet cannot reach a socket no
// path names, and a plugin watcher that saw it go deregistered the plugin), or when
// Stale says so.
func (s *Socket) check(sv *serving) {
	switch id, err := Identify(sv.path); {
	case errors.Is(err, os.ErrNotExist):
		sv.lose("its socket is gone", false)
	case err != nil:
		sv.lose(fmt.Sprintf("its socket cannot be told: %v", err), false)
	case id != sv.id:
		sv.lose("its socket was replaced by another", false)
	case s.o.Stale != nil:
		if why := s.o.Stale(sv.servedAt); why != "" {
			sv.lose(why, false)
		}
	}
}

// shut stops sv's server (its streams ended first, then a graceful stop bounded by
// stopGrace) and removes its socket if the path still names it.
func (s *Socket) shut(sv *serving) {
	if sv.end != nil {
		sv.end()
	}
	done := make(chan struct{})
	go func() { sv.srv.GracefulStop(); close(done) }()
	// Real time, not the injected clock: this bounds how long a real gRPC server takes
	// to finish the RPCs in flight, which a test's clock cannot hurry.
	select {
	case <-done:
	case <-time.After(stopGrace):
		sv.srv.Stop()
	}
	if id, err := Identify(sv.path); err == nil && id == sv.id {
		_ = os.Remove(sv.path)
	}
}

// answered says whether a server accepts a connection on the unix socket at path.
func answered(path string) bool {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

func listenUnix(path string) (net.Listener, error) {
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening: %w", err)
	}
	return l, nil
}

// FileID tells a file from the one that replaced it at the same path. The inode alone
// does not (a file system may give a new socket the inode of the one just removed), and
// the change time changes with a chmod: the birth time is what stays.
type FileID struct {
	Ino   uint64
	Btime unix.StatxTimestamp
}

// Identify is the identity of the file at path.
func Identify(path string) (FileID, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_INO|unix.STATX_BTIME, &st); err != nil {
		return FileID{}, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	id := FileID{Ino: st.Ino}
	if st.Mask&unix.STATX_BTIME != 0 {
		id.Btime = st.Btime
	}
	return id, nil
}
