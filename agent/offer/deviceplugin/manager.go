// SPDX-License-Identifier: Apache-2.0

package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/internal/latest"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// KubeletSocketName is the kubelet's registration socket in the device-plugins dir.
const KubeletSocketName = "kubelet.sock"

// socketPrefix starts the names of the sockets of the plugin for r. Every serve gets a
// new name: a kubelet (1.37) keys plugins by socket path and refuses a path it still
// believes connected, and it can keep such a stale entry for good when a plugin
// re-serves while the kubelet cleans the directory.
func socketPrefix(r nr1.Resource) string { return "nr1-" + r.Short() + "-" }

// newSocketName is short (a unix socket path has 107 bytes) and new at every serve,
// across agent restarts too: seconds since the epoch, then a sequence number.
func (m *Manager) newSocketName(r nr1.Resource) string {
	m.serves++
	return socketPrefix(r) + strconv.FormatInt(m.started, 36) + strconv.FormatInt(m.serves, 36) + ".sock"
}

// removeStaleSockets removes plugin sockets an earlier run left behind.
func (m *Manager) removeStaleSockets() {
	stale, _ := filepath.Glob(filepath.Join(m.dir, "nr1-*.sock"))
	for _, s := range stale {
		_ = os.Remove(s)
	}
}

// Manager serves the plugins in the kubelet's device-plugins dir and keeps them
// registered: when the kubelet restarts it deletes the plugins' sockets and creates a new
// kubelet.sock, and each plugin must then be served and registered again.
type Manager struct {
	dir     string
	plugins []*Plugin
	resync  time.Duration
	clock   clock.WithTicker
	log     *slog.Logger
	// listen makes the plugins' sockets; ended hears of a server whose listener failed.
	listen func(network, address string) (net.Listener, error)
	ended  chan struct{}

	mu            sync.Mutex
	registered    map[nr1.Resource]bool
	sockets       map[nr1.Resource]string
	registrations int
	started       int64 // unix seconds, in socket names
	serves        int64

	// passes counts finished reconcile passes; it fails while a pass leaves something
	// to retry (a socket not served, a registration refused).
	passes *latest.Value[int]
}

// Passes returns how many reconcile passes have finished, and a channel closed at the
// next: a caller that changed something can wait until the manager has looked at it.
func (m *Manager) Passes() (int, <-chan struct{}) { return m.passes.Load() }

// Health reports when every plugin was last served and registered, and what is left.
func (m *Manager) Health() (time.Time, error) { return m.passes.Health() }

// Socket is the path the plugin for r is served on now ("" when not served).
func (m *Manager) Socket(r nr1.Resource) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sockets[r]
}

// NewManager returns a manager for plugins with sockets in dir (<kubelet root>/device-plugins).
// resync bounds how long a missed filesystem event can go unnoticed; clk times it, the
// retries and the debounce of events.
func NewManager(dir string, plugins []*Plugin, resync time.Duration, clk clock.WithTicker, log *slog.Logger) *Manager {
	return &Manager{dir: dir, plugins: plugins, resync: resync, clock: clk, log: log, registered: map[nr1.Resource]bool{}, sockets: map[nr1.Resource]string{}, started: time.Now().Unix(),
		passes: latest.New(0), listen: net.Listen, ended: make(chan struct{}, 1)}
}

// Registered reports whether the plugin for r is registered with the running kubelet.
func (m *Manager) Registered(r nr1.Resource) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.registered[r]
}

// Registrations counts successful registrations since start.
func (m *Manager) Registrations() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.registrations
}

// Run serves and registers the plugins until ctx ends, then removes their sockets.
func (m *Manager) Run(ctx context.Context) error {
	if err := os.MkdirAll(m.dir, 0o750); err != nil {
		return fmt.Errorf("device-plugins dir: %w", err)
	}
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", m.dir, err)
	}
	defer watcher.Close()
	if err := watcher.Add(m.dir); err != nil {
		return fmt.Errorf("watching %s: %w", m.dir, err)
	}
	m.removeStaleSockets()
	s := &managerState{eps: make([]*endpoint, len(m.plugins)), failures: make([]serveFailures, len(m.plugins))}
	defer func() {
		for _, e := range s.eps {
			if e != nil {
				e.close()
			}
		}
		m.setRegistered(nil)
		m.setSockets(nil)
	}()
	tick := m.clock.NewTicker(m.resync)
	defer tick.Stop()
	// A failed registration is retried soon, backing off: the kubelet's socket appears
	// (bind) a moment before the kubelet accepts on it (listen), so the first try after
	// its creation event can be refused.
	var retry <-chan time.Time // nil while nothing is left to retry
	backoff := m.retryBackoff()
	for pass := 1; ; pass++ {
		if m.reconcile(ctx, s) {
			backoff, retry = m.retryBackoff(), nil
			m.passes.Publish(m.clock.Now(), pass)
		} else {
			retry = m.clock.After(backoff.Step())
			m.passes.PublishFailing(pass, errUnsettled)
		}
		var serveAgain <-chan time.Time // nil while no failed server waits to be replaced
		if s.serveAgainIn > 0 {
			serveAgain = m.clock.After(s.serveAgainIn)
		}
		select {
		case <-retry:
		case <-serveAgain:
		case <-m.ended:
		case <-ctx.Done():
			return nil
		case ev, ok := <-watcher.Events:
			if !ok {
				return fmt.Errorf("watching %s: event stream closed", m.dir)
			}
			// Events come in bursts (a starting kubelet empties the directory, then makes
			// its socket): act once the burst is over, not in the middle of it.
			for quiet := m.clock.NewTimer(debounce); ok; {
				m.noteKubeletRemoval(ev, s)
				select {
				case ev, ok = <-watcher.Events:
					quiet.Reset(debounce)
				case <-quiet.C():
					ok = false
				}
			}
		case werr := <-watcher.Errors:
			m.log.Warn("device-plugins dir watch error", "dir", m.dir, "err", werr)
		case <-tick.C():
		}
	}
}

// retryBackoff doubles from retryMin up to the resync; its steps are waited on m.clock.
func (m *Manager) retryBackoff() wait.Backoff {
	return wait.Backoff{Duration: retryMin, Factor: 2, Cap: m.resync, Steps: math.MaxInt32}
}

var errUnsettled = errors.New("a plugin is not served or not registered yet; retrying")

const (
	retryMin = 50 * time.Millisecond
	debounce = 50 * time.Millisecond
)

// noteKubeletRemoval forgets the kubelet at once when its socket goes: a kubelet
// removes its socket before making a new one, which may get the same inode.
func (m *Manager) noteKubeletRemoval(ev fsnotify.Event, s *managerState) {
	if filepath.Base(ev.Name) == KubeletSocketName && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) {
		s.kubelet = fileID{}
		clear(s.registered)
	}
}

type managerState struct {
	eps        []*endpoint
	registered []bool
	kubelet    fileID
	failures   []serveFailures
	// serveAgainIn is how soon the next plugin whose server failed is served again; 0
	// when none waits.
	serveAgainIn time.Duration
}

// serveBackoff spaces the serves of a plugin whose server keeps failing: its listener
// failing at once again is not a busy loop.
var serveBackoff = wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Steps: 10, Cap: 30 * time.Second}

// serveFailures is how a plugin's server has been failing: when it was last served,
// when it may be served again, and the backoff its failures have reached.
type serveFailures struct {
	served, again time.Time
	backoff       wait.Backoff
}

// failed records a failure of the server served since f.served, at now.
func (f *serveFailures) failed(now time.Time) {
	// A server that served a while failed anew: it is not held back by the last.
	if f.backoff.Duration == 0 || now.Sub(f.served) > serveBackoff.Cap {
		f.backoff = serveBackoff
	}
	f.again = now.Add(f.backoff.Step())
}

// reconcile brings the sockets and registrations in line with what is on disk. It
// reports false when something is left to retry.
func (m *Manager) reconcile(ctx context.Context, s *managerState) bool {
	settled := true
	if s.registered == nil {
		s.registered = make([]bool, len(m.plugins))
	}
	s.serveAgainIn = 0
	for i, p := range m.plugins {
		if s.eps[i] != nil && s.eps[i].failed() == nil && s.eps[i].present() {
			continue
		}
		if s.eps[i] != nil {
			if err := s.eps[i].failed(); err != nil {
				m.log.Error("device plugin socket no longer served: serving the plugin again", "resource", p.Resource().Name(), "socket", s.eps[i].socket, "err", err)
				s.failures[i].failed(m.clock.Now())
			} else {
				m.log.Info("plugin socket removed, serving again", "resource", p.Resource().Name(), "socket", s.eps[i].socket)
			}
			s.eps[i].close()
			s.eps[i] = nil
		}
		s.registered[i] = false
		if in := s.failures[i].again.Sub(m.clock.Now()); in > 0 {
			if s.serveAgainIn == 0 || in < s.serveAgainIn {
				s.serveAgainIn = in
			}
			settled = false
			continue
		}
		e, err := serve(p, filepath.Join(m.dir, m.newSocketName(p.Resource())), m.listen, m.ended)
		if err != nil {
			m.log.Error("serving device plugin", "resource", p.Resource().Name(), "err", err)
			settled = false
			continue
		}
		s.eps[i] = e
		s.failures[i].served = m.clock.Now()
	}
	m.setSockets(s.eps)
	kubelet := filepath.Join(m.dir, KubeletSocketName)
	id, err := identify(kubelet)
	if err != nil {
		id = fileID{}
	}
	if id != s.kubelet {
		if id != (fileID{}) {
			m.log.Info("kubelet registration socket appeared", "socket", kubelet)
		}
		s.kubelet = id
		clear(s.registered)
	}
	if id != (fileID{}) {
		for i, e := range s.eps {
			if e == nil || s.registered[i] {
				continue
			}
			if err := e.register(ctx, kubelet); err != nil {
				m.log.Warn("device plugin registration failed, will retry", "resource", e.plugin.Resource().Name(), "err", err)
				settled = false
				continue
			}
			s.registered[i] = true
			m.countRegistration()
			m.log.Info("device plugin registered", "resource", e.plugin.Resource().Name(), "capacity", e.plugin.capacity)
		}
	}
	m.setRegistered(s.registered)
	return settled
}

func (m *Manager) setRegistered(registered []bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.registered)
	for i, ok := range registered {
		m.registered[m.plugins[i].Resource()] = ok
	}
}

func (m *Manager) setSockets(eps []*endpoint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.sockets)
	for i, e := range eps {
		if e != nil {
			m.sockets[m.plugins[i].Resource()] = e.socket
		}
	}
}

func (m *Manager) countRegistration() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.registrations++
}
