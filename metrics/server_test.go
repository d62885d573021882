// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHealthAndReadiness(t *testing.T) {
	notYet := errors.New("device plugins not registered")
	readyErr := notYet
	s := NewServer("127.0.0.1:0", prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)),
		func() error { return readyErr })
	var liveErr error
	s.Live(func() error { return liveErr })
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d", code)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "device plugins not registered") {
		t.Errorf("/readyz before ready: %d %q", code, body)
	}
	readyErr = nil
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz when ready: %d", code)
	}
	liveErr = errors.New("enforcement stalled: one action under way for 2m0s")
	if code, body := get("/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "enforcement stalled") {
		t.Errorf("/healthz with a wedged part: %d %q", code, body)
	}
}

// The debug endpoints are on their own server, not beside /metrics: the pod network
// reaches the metrics port, and must not reach the node's CGs or the agent's profiles.
func TestDebugIsServedApart(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d := NewDebug("127.0.0.1:0", log)
	d.Handle("/debug/cgs", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "cgs") }))
	debug := httptest.NewServer(d.Handler())
	defer debug.Close()
	m := httptest.NewServer(NewServer("127.0.0.1:0", prometheus.NewRegistry(), log).Handler())
	defer m.Close()
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(debug.URL + "/debug/cgs"); code != http.StatusOK || body != "cgs" {
		t.Errorf("debug /debug/cgs: %d %q", code, body)
	}
	if code, body := get(debug.URL + "/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("debug /debug/pprof/goroutine: %d %.80q", code, body)
	}
	for _, path := range []string{"/debug/cgs", "/debug/pprof/", "/debug/pprof/heap"} {
		if code, _ := get(m.URL + path); code != http.StatusNotFound {
			t.Errorf("metrics server %s: %d, want 404", path, code)
		}
	}
}
