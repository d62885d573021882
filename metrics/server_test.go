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
