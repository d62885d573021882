// SPDX-License-Identifier: Apache-2.0

package nodelabels

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/internal/clocktest"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

func TestFound(t *testing.T) {
	got := Found(ModeDRA, nr1.Amounts{116244, 512, 13417, 65536}, "1.4.0-sim")
	want := map[string]string{
		"neureality.ai/nr1.mode":                     "dra",
		"neureality.ai/nr1.compute_dma_memory_in_mb": "116244",
		"neureality.ai/nr1.cpu_dma_memory_in_mb":     "512",
		"neureality.ai/nr1.docker_partition_in_mb":   "13417",
		"neureality.ai/nr1.ai_hypervisor_queue":      "65536",
		"neureality.ai/nr1.driver-version":           "1.4.0-sim",
	}
	if !maps.Equal(got, want) {
		t.Errorf("Found = %v, want %v", got, want)
	}
	// A version no label can hold is left out, not cut or invented.
	for _, v := range []string{"", "1.4 beta", "v1/2", string(make([]byte, 64))} {
		if _, ok := Found(ModeDevicePlugin, nr1.Amounts{}, v)[DriverVersionLabel]; ok {
			t.Errorf("driver version %q labelled", v)
		}
	}
}

func TestSelected(t *testing.T) {
	const key = "nr1.neureality.ai/mode"
	for _, c := range []struct {
		labels  map[string]string
		key     string
		want    string
		wantErr bool
	}{
		{labels: nil, key: key},
		{labels: map[string]string{key: "dra"}, key: key, want: ModeDRA},
		{labels: map[string]string{key: "devicePlugin"}, key: key, want: ModeDevicePlugin},
		{labels: map[string]string{key: "dra"}, key: ""},
		{labels: map[string]string{key: "DRA"}, key: key, wantErr: true},
		{labels: map[string]string{key: ""}, key: key, wantErr: true},
	} {
		got, err := Selected(c.labels, c.key)
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("Selected(%v, %q) = %q, %v; want %q, error %v", c.labels, c.key, got, err, c.want, c.wantErr)
		}
	}
}

func TestRemembered(t *testing.T) {
	m := Remembered{Path: filepath.Join(t.TempDir(), "state", "mode")}
	if got, err := m.Load(); got != "" || err != nil {
		t.Fatalf("nothing remembered: %q, %v", got, err)
	}
	if err := m.Store(ModeDRA); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Load(); got != ModeDRA || err != nil {
		t.Fatalf("remembered dra: %q, %v", got, err)
	}
	if err := m.Store(""); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Load(); got != "" || err != nil {
		t.Fatalf("forgotten: %q, %v", got, err)
	}
}

func TestChangesTouchOnlyTheAgentsLabels(t *testing.T) {
	have := map[string]string{
		"kubernetes.io/hostname":                 "vm",
		"neureality.ai/nr1":                      "true", // Node Feature Discovery's
		"nr1.neureality.ai/mode":                 "dra",  // the operator's
		"neureality.ai/nr1.mode":                 "devicePlugin",
		"neureality.ai/nr1.driver-version":       "1.3",
		"neureality.ai/nr1.cpu_dma_memory_in_mb": "512",
	}
	want := map[string]string{"neureality.ai/nr1.mode": "dra", "neureality.ai/nr1.cpu_dma_memory_in_mb": "512"}
	got := Changes(have, want)
	if len(got) != 2 || got["neureality.ai/nr1.mode"] == nil || *got["neureality.ai/nr1.mode"] != "dra" {
		t.Errorf("Changes = %v", got)
	}
	if v, ok := got["neureality.ai/nr1.driver-version"]; !ok || v != nil {
		t.Errorf("a label no longer found is not removed: %v", got)
	}
	if len(Changes(want, want)) != 0 {
		t.Error("labels already right are written again")
	}
}

// fakeNode is a node's labels behind an API server that fails while failing is set.
type fakeNode struct {
	mu      sync.Mutex
	labels  map[string]string
	failing bool
	patches int
}

func (n *fakeNode) Labels(context.Context) (map[string]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.failing {
		return nil, errors.New("API server unavailable")
	}
	return maps.Clone(n.labels), nil
}

func (n *fakeNode) PatchLabels(_ context.Context, patch map[string]*string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.patches++
	for k, v := range patch {
		if v == nil {
			delete(n.labels, k)
		} else {
			n.labels[k] = *v
		}
	}
	return nil
}

func (n *fakeNode) state() (map[string]string, int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.labels), n.patches
}

// The publisher labels the node, puts back a label someone removed at its next look,
// and keeps trying, backing off, while the API server fails.
func TestPublisherKeepsTheLabels(t *testing.T) {
	node := &fakeNode{labels: map[string]string{"kubernetes.io/hostname": "vm"}, failing: true}
	clk := clocktest.New(time.Unix(0, 0))
	want := Found(ModeDevicePlugin, nr1.Amounts{1, 2, 3, 4}, "")
	p := &Publisher{Node: node, Want: want, Recheck: 5 * time.Minute, Clock: clk, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()

	if d := clk.Next(t, clocktest.Timer, 10*time.Second); d != time.Second {
		t.Fatalf("waits %v after a failure, want 1s", d)
	}
	clk.Step(time.Second)
	if d := clk.Next(t, clocktest.Timer, 10*time.Second); d != 2*time.Second {
		t.Fatalf("waits %v after a second failure, want 2s", d)
	}
	node.mu.Lock()
	node.failing = false
	node.mu.Unlock()
	clk.Step(2 * time.Second)
	if d := clk.Next(t, clocktest.Timer, 10*time.Second); d != 5*time.Minute {
		t.Fatalf("after labelling, waits %v, want the recheck", d)
	}
	labels, patches := node.state()
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, labels[k], v)
		}
	}
	if labels["kubernetes.io/hostname"] != "vm" || patches != 1 {
		t.Errorf("labels %v after %d patches", labels, patches)
	}

	node.mu.Lock()
	delete(node.labels, ModeLabel)
	node.mu.Unlock()
	clk.Step(5 * time.Minute)
	clk.Next(t, clocktest.Timer, 10*time.Second)
	if labels, patches := node.state(); labels[ModeLabel] != ModeDevicePlugin || patches != 2 {
		t.Errorf("a removed label not put back: %v after %d patches", labels, patches)
	}
	clk.Step(5 * time.Minute)
	clk.Next(t, clocktest.Timer, 10*time.Second)
	if _, patches := node.state(); patches != 2 {
		t.Errorf("labels already right patched again (%d patches)", patches)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
