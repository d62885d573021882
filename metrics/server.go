// Package metrics serves the agent's Prometheus metrics and its health endpoints. Every
// series is built at scrape time from the agent's current state.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ReadinessCheck reports why the agent is not ready yet, or nil.
type ReadinessCheck func() error

// LivenessCheck reports why the agent is wedged and must be restarted, or nil.
type LivenessCheck func() error

// Server serves /metrics, /healthz and /readyz.
type Server struct {
	addr   string
	reg    *prometheus.Registry
	ready  []ReadinessCheck
	live   []LivenessCheck
	log    *slog.Logger
	extras map[string]http.Handler
}

// NewServer serves reg on addr; /readyz passes when every check does.
func NewServer(addr string, reg *prometheus.Registry, log *slog.Logger, ready ...ReadinessCheck) *Server {
	return &Server{addr: addr, reg: reg, ready: ready, log: log, extras: map[string]http.Handler{}}
}

// Live adds a check to /healthz: failing it makes the kubelet restart the agent, so
// only a part that cannot recover by itself belongs here.
func (s *Server) Live(check LivenessCheck) { s.live = append(s.live, check) }

// Handle adds a GET endpoint, such as /debug/cgs.
func (s *Server) Handle(path string, h http.Handler) { s.extras[path] = h }

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}))
	for path, h := range s.extras {
		mux.Handle("GET "+path, h)
	}
	mux.HandleFunc("GET /healthz", checks("unhealthy", s.live))
	mux.HandleFunc("GET /readyz", checks("not ready", s.ready))
	return mux
}

func checks[C ~func() error](failing string, cs []C) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		var why []string
		for _, check := range cs {
			if err := check(); err != nil {
				why = append(why, err.Error())
			}
		}
		if len(why) > 0 {
			http.Error(w, failing+": "+strings.Join(why, "; "), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	lis, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("metrics listener on %s: %w", s.addr, err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	s.log.Info("serving metrics", "addr", lis.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("metrics server: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics server shutdown: %w", err)
	}
	return nil
}
