// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
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
	addr  string
	reg   *prometheus.Registry
	ready []ReadinessCheck
	live  []LivenessCheck
	log   *slog.Logger
}

// NewServer serves reg on addr; /readyz passes when every check does.
func NewServer(addr string, reg *prometheus.Registry, log *slog.Logger, ready ...ReadinessCheck) *Server {
	return &Server{addr: addr, reg: reg, ready: ready, log: log}
}

// Live adds a check to /healthz: failing it makes the kubelet restart the agent, so
// only a part that cannot recover by itself belongs here.
func (s *Server) Live(check LivenessCheck) { s.live = append(s.live, check) }

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}))
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
	return serve(ctx, "metrics", s.addr, s.Handler(), s.log)
}

// Debug serves what is for the node's operator and not for the pod network: the node's
// CGs with their processes and cgroups, and the agent's own profiles. It listens on its
// own address, the pod's loopback by default, reached with kubectl port-forward.
type Debug struct {
	addr string
	mux  *http.ServeMux
	log  *slog.Logger
}

// NewDebug serves /debug/pprof/ (net/http/pprof: CPU, heap, goroutines, …) on addr.
func NewDebug(addr string, log *slog.Logger) *Debug {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return &Debug{addr: addr, mux: mux, log: log}
}

// Handle adds a GET endpoint, such as /debug/cgs.
func (d *Debug) Handle(path string, h http.Handler) { d.mux.Handle("GET "+path, h) }

// Handler is the debug server's HTTP handler.
func (d *Debug) Handler() http.Handler { return d.mux }

// Run serves until ctx ends.
func (d *Debug) Run(ctx context.Context) error {
	return serve(ctx, "debug", d.addr, d.mux, d.log)
}

// serve serves h on addr until ctx ends. A profile may take its full 30 s, so writes
// have no deadline; headers must come within 5 s.
func serve(ctx context.Context, name, addr string, h http.Handler, log *slog.Logger) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s listener on %s: %w", name, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	log.Info("serving "+name, "addr", lis.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("%s server: %w", name, err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s server shutdown: %w", name, err)
	}
	return nil
}
