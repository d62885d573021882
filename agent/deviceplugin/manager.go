package deviceplugin

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// KubeletSocketName is the kubelet's registration socket in the device-plugins dir.
const KubeletSocketName = "kubelet.sock"

// SocketName is the socket of the plugin for r.
func SocketName(r nr1.Resource) string { return "nr1-" + r.Short() + ".sock" }

// Manager serves the plugins in the kubelet's device-plugins dir and keeps them
// registered: when the kubelet restarts it deletes the plugins' sockets and creates a new
// kubelet.sock, and each plugin must then be served and registered again.
type Manager struct {
	dir     string
	plugins []*Plugin
	resync  time.Duration
	log     *slog.Logger

	mu            sync.Mutex
	registered    map[nr1.Resource]bool
	registrations int
}

// NewManager returns a manager for plugins with sockets in dir (<kubelet root>/device-plugins).
// resync bounds how long a missed filesystem event can go unnoticed.
func NewManager(dir string, plugins []*Plugin, resync time.Duration, log *slog.Logger) *Manager {
	return &Manager{dir: dir, plugins: plugins, resync: resync, log: log, registered: map[nr1.Resource]bool{}}
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
	s := &managerState{eps: make([]*endpoint, len(m.plugins))}
	defer func() {
		for _, e := range s.eps {
			if e != nil {
				e.close()
			}
		}
		m.setRegistered(nil)
	}()
	tick := time.NewTicker(m.resync)
	defer tick.Stop()
	// A failed registration is retried soon, backing off: the kubelet's socket appears
	// (bind) a moment before the kubelet accepts on it (listen), so the first try after
	// its creation event can be refused.
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	backoff := retryMin
	for {
		if m.reconcile(ctx, s) {
			backoff = retryMin
		} else {
			retry.Reset(backoff)
			backoff = min(backoff*2, m.resync)
		}
		select {
		case <-retry.C:
		case <-ctx.Done():
			return nil
		case ev, ok := <-watcher.Events:
			if !ok {
				return fmt.Errorf("watching %s: event stream closed", m.dir)
			}
			// A kubelet removes its socket before making a new one. Forget the old one at
			// once: the new one may get the same inode and (coarse) ctime.
			if filepath.Base(ev.Name) == KubeletSocketName && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) {
				s.kubelet = fileID{}
				clear(s.registered)
			}
		case werr := <-watcher.Errors:
			m.log.Warn("device-plugins dir watch error", "dir", m.dir, "err", werr)
		case <-tick.C:
		}
	}
}

const retryMin = 50 * time.Millisecond

type managerState struct {
	eps        []*endpoint
	registered []bool
	kubelet    fileID
}

// reconcile brings the sockets and registrations in line with what is on disk. It
// reports false when something is left to retry.
func (m *Manager) reconcile(ctx context.Context, s *managerState) bool {
	settled := true
	if s.registered == nil {
		s.registered = make([]bool, len(m.plugins))
	}
	for i, p := range m.plugins {
		if s.eps[i] != nil && s.eps[i].present() {
			continue
		}
		if s.eps[i] != nil {
			m.log.Info("plugin socket removed, serving again", "resource", p.Resource().Name(), "socket", s.eps[i].socket)
			s.eps[i].close()
			s.eps[i] = nil
		}
		s.registered[i] = false
		e, err := serve(p, filepath.Join(m.dir, SocketName(p.Resource())))
		if err != nil {
			m.log.Error("serving device plugin", "resource", p.Resource().Name(), "err", err)
			settled = false
			continue
		}
		s.eps[i] = e
	}
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

func (m *Manager) countRegistration() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.registrations++
}
