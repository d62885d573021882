// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// serveBackoff spaces the attempts to serve a socket again after its server stopped:
// a listener that keeps failing is not a busy loop, and one that failed once is served
// again at once, as far as the kubelet can tell.
var serveBackoff = wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Steps: 10, Cap: 30 * time.Second}

// Defaults of how a served socket is watched: how often its path is checked, and how
// long the registration socket may be served without the kubelet registering the
// plugin before it is served anew, a new socket the kubelet's plugin watcher sees.
const (
	defaultCheckEvery        = 2 * time.Second
	defaultRegistrationGrace = 30 * time.Second
)

// server is a gRPC server on a unix socket: served again while ctx lives when its
// listener fails or its socket is no longer the one the path names, and the socket
// removed when stopped.
type server struct {
	grpc    *grpc.Server
	path    string
	listen  func(path string) (net.Listener, error)
	clock   clock.Clock
	log     *slog.Logger
	stopped chan struct{}
	done    chan struct{}
	// stale, when set, says why the socket, served since the time given, must be
	// served anew, or "".
	stale func(servedAt time.Time) string

	mu       sync.Mutex
	l        net.Listener // nil while it is served again
	ino      uint64       // the socket's inode: what the path must still name
	servedAt time.Time
}

// serve serves register's services on the socket at path until ctx ends or stop.
func (d *Driver) serve(ctx context.Context, path string, register func(*grpc.Server), stale ...func(time.Time) string) (*server, error) {
	l, err := d.listen(path)
	if err != nil {
		return nil, err
	}
	s := &server{grpc: grpc.NewServer(), path: path, listen: d.listen, clock: d.clock, log: d.log, stopped: make(chan struct{}), done: make(chan struct{})}
	if len(stale) > 0 {
		s.stale = stale[0]
	}
	register(s.grpc)
	s.track(l)
	go s.run(ctx, l)
	go s.watch(ctx, d.checkEvery)
	return s, nil
}

// unregistered says why the registration socket must be served anew: served a while
// and the kubelet has not registered the plugin. Its plugin watcher finds sockets by
// their creation; a new socket is found again.
func (d *Driver) unregistered(servedAt time.Time) string {
	if d.registered.Load() {
		return ""
	}
	if waited := time.Since(servedAt); waited > d.registrationGrace {
		return fmt.Sprintf("the kubelet has not registered the plugin %s after the socket was served", waited.Round(time.Second))
	}
	return ""
}

// listenUnix listens on the unix socket at path. The path is removed by its server
// alone, and only while it names that server's socket: closing a listener must not
// remove the socket of a plugin instance that replaced it.
func listenUnix(path string) (net.Listener, error) {
	// A socket left by an earlier run (killed, or the node rebooted) is stale.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("DRA plugin socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("DRA plugin socket %s: %w", path, err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	return l, nil
}

// track records l as the served listener, and the socket its path names now.
func (s *server) track(l net.Listener) {
	ino, _ := inode(s.path)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.l, s.ino, s.servedAt = l, ino, time.Now()
}

// removeOwn removes the socket if its path still names this server's.
func (s *server) removeOwn() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ino, err := inode(s.path); err == nil && ino == s.ino {
		_ = os.Remove(s.path)
	}
}

func inode(path string) (uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("DRA plugin socket: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("%s: no inode", path)
	}
	return st.Ino, nil
}

// run serves l, and a new listener on the same path whenever the one served fails or
// is closed by watch (gRPC's Serve returns only then, or when stopped). The kubelet
// finds the socket again: its plugin watcher registers a new registration socket anew,
// and its client of the DRA socket reconnects to the path.
func (s *server) run(ctx context.Context, l net.Listener) {
	defer close(s.done)
	backoff := serveBackoff
	for {
		started := s.clock.Now()
		err := s.grpc.Serve(l)
		select {
		case <-s.stopped:
			return
		case <-ctx.Done():
			return
		default:
		}
		s.mu.Lock()
		s.l = nil
		s.mu.Unlock()
		s.removeOwn()
		s.log.Error("DRA plugin socket no longer served: serving it again", "socket", s.path, "err", err)
		// A server that served a while failed anew: the next is not held back by the last.
		if s.clock.Since(started) > serveBackoff.Cap {
			backoff = serveBackoff
		}
		for l = nil; l == nil; {
			select {
			case <-s.stopped:
				return
			case <-ctx.Done():
				return
			case <-s.clock.After(backoff.Step()):
			}
			if l, err = s.listen(s.path); err != nil {
				s.log.Error("DRA plugin socket not served again yet, retrying", "socket", s.path, "err", err)
			}
		}
		s.track(l)
		s.log.Info("DRA plugin socket served again", "socket", s.path)
	}
}

// watch closes the served listener, for run to serve the socket anew, when its path
// no longer names it (removed or replaced: the kubelet cannot reach a socket no path
// names, and a plugin watcher that saw it go deregistered the plugin) or when stale
// says so. It checks on the wall clock: a check is a stat.
func (s *server) watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stopped:
			return
		case <-t.C:
		}
		s.mu.Lock()
		l, ino, servedAt := s.l, s.ino, s.servedAt
		s.mu.Unlock()
		if l == nil {
			continue // being served again
		}
		var why string
		switch now, err := inode(s.path); {
		case err != nil:
			why = fmt.Sprintf("its socket is gone: %v", err)
		case now != ino:
			why = "its socket was replaced by another"
		case s.stale != nil:
			why = s.stale(servedAt)
		}
		if why != "" {
			s.log.Warn("DRA plugin socket served anew", "socket", s.path, "why", why)
			_ = l.Close()
		}
	}
}

// stop ends the server and its restarts, then removes the socket if it is still its.
func (s *server) stop() {
	close(s.stopped)
	s.grpc.Stop()
	<-s.done
	s.removeOwn()
}
