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
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/internal/latest"
	"github.com/neureality-sdk/nr1-agent/internal/served"
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
	return socketPrefix(r) + strconv.FormatInt(m.started, 36) + strconv.FormatInt(m.serves.Add(1), 36) + ".sock"
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
// kubelet.sock, and each plugin must then be served and registered again. Each plugin's
// socket is kept served by internal/served; the manager registers each socket it
// serves with the kubelet that listens now.
type Manager struct {
	dir     string
	plugins []*Plugin
	resync  time.Duration
	clock   clock.WithTicker
	log     *slog.Logger
	// listen makes the plugins' sockets; wake hears of a socket served or lost.
	listen func(network, address string) (net.Listener, error)
	wake   chan struct{}
	serves atomic.Int64

	mu            sync.Mutex
	registered    map[nr1.Resource]bool
	sockets       map[nr1.Resource]string
	endpoints     map[string]*endpoint // by socket, those served now
	registrations int
	started       int64 // unix seconds, in socket names

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
// retries, the debounce of events and the serves of a socket again.
func NewManager(dir string, plugins []*Plugin, resync time.Duration, clk clock.WithTicker, log *slog.Logger) *Manager {
	return &Manager{dir: dir, plugins: plugins, resync: resync, clock: clk, log: log, registered: map[nr1.Resource]bool{}, sockets: map[nr1.Resource]string{},
		endpoints: map[string]*endpoint{}, started: time.Now().Unix(), passes: latest.New(0), listen: net.Listen, wake: make(chan struct{}, 1)}
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

// OnPreStart has do run before each container given r starts (see Plugin.OnPreStart);
// it is called before Run.
func (m *Manager) OnPreStart(r nr1.Resource, do func(ctx context.Context)) {
	for _, p := range m.plugins {
		if p.Resource() == r {
			p.OnPreStart(do)
		}
	}
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
	s := &managerState{socks: make([]*served.Socket, len(m.plugins)), registeredAt: make([]string, len(m.plugins))}
	defer func() {
		for _, sock := range s.socks {
			if sock != nil {
				sock.Stop()
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
		select {
		case <-retry:
		case <-m.wake:
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
		s.kubelet = served.FileID{}
		clear(s.registeredAt)
	}
}

type managerState struct {
	socks []*served.Socket
	// registeredAt is the socket each plugin was registered at with the kubelet of
	// kubelet, "" when it is not.
	registeredAt []string
	kubelet      served.FileID
}

// socketOptions are how p's socket is served: a new name at every serve, and the
// manager woken at each serve and loss to register it again.
func (m *Manager) socketOptions(p *Plugin) served.Options {
	return served.Options{
		Dir:  m.dir,
		Name: func() string { return m.newSocketName(p.Resource()) },
		New: func(path string) (*grpc.Server, func()) {
			e, srv := newEndpoint(p, path)
			m.mu.Lock()
			m.endpoints[path] = e
			m.mu.Unlock()
			return srv, func() {
				e.end()
				m.mu.Lock()
				delete(m.endpoints, path)
				m.mu.Unlock()
			}
		},
		Check:  m.resync,
		Listen: func(path string) (net.Listener, error) { return m.listen("unix", path) },
		Served: func() {
			select {
			case m.wake <- struct{}{}:
			default:
			}
		},
		What:  "device plugin socket of " + p.Resource().Name(),
		Clock: m.clock,
		Log:   m.log,
	}
}

// reconcile serves the plugins not served yet and registers each socket served with the
// kubelet listening now. It reports false when something is left to retry.
func (m *Manager) reconcile(ctx context.Context, s *managerState) bool {
	settled := true
	paths := make([]string, len(m.plugins))
	for i, p := range m.plugins {
		if s.socks[i] == nil {
			sock, err := served.Serve(ctx, m.socketOptions(p))
			if err != nil {
				m.log.Error("serving device plugin", "resource", p.Resource().Name(), "err", err)
				settled = false
				continue
			}
			s.socks[i] = sock
		}
		if paths[i] = s.socks[i].Path(); paths[i] == "" {
			settled = false // being served again
		}
	}
	m.setSockets(paths)
	kubelet := filepath.Join(m.dir, KubeletSocketName)
	id, err := served.Identify(kubelet)
	if err != nil {
		id = served.FileID{}
	}
	if id != s.kubelet {
		if id != (served.FileID{}) {
			m.log.Info("kubelet registration socket appeared", "socket", kubelet)
		}
		s.kubelet = id
		clear(s.registeredAt)
	}
	registered := make([]bool, len(m.plugins))
	if id != (served.FileID{}) {
		for i, p := range m.plugins {
			if paths[i] == "" {
				continue
			}
			if s.registeredAt[i] != paths[i] {
				e := m.endpoint(paths[i])
				if e == nil {
					settled = false // lost since
					continue
				}
				if err := e.register(ctx, kubelet); err != nil {
					m.log.Warn("device plugin registration failed, will retry", "resource", p.Resource().Name(), "err", err)
					settled = false
					continue
				}
				s.registeredAt[i] = paths[i]
				m.countRegistration()
				m.log.Info("device plugin registered", "resource", p.Resource().Name(), "capacity", p.capacity, "socket", paths[i])
			}
			registered[i] = true
		}
	}
	m.setRegistered(registered)
	return settled
}

func (m *Manager) endpoint(socket string) *endpoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.endpoints[socket]
}

func (m *Manager) setRegistered(registered []bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.registered)
	for i, ok := range registered {
		m.registered[m.plugins[i].Resource()] = ok
	}
}

func (m *Manager) setSockets(paths []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.sockets)
	for i, p := range paths {
		if p != "" {
			m.sockets[m.plugins[i].Resource()] = p
		}
	}
}

func (m *Manager) countRegistration() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.registrations++
}
