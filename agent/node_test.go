// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/neureality-sdk/nr1-agent/agent/config"
)

// nodeAnswer is a node whose labels read as labels, or fail with err.
type nodeAnswer struct {
	labels map[string]string
	err    error
}

func (n nodeAnswer) Labels(context.Context) (map[string]string, error) { return n.labels, n.err }

// The node's label chooses the mode over the configuration; when the labels cannot be
// read, the value last read is kept; a value that is not a mode is not.
func TestSelectMode(t *testing.T) {
	cfg := config.Default()
	cfg.Paths.State = t.TempDir()
	quiet := slog.New(slog.DiscardHandler)
	const key = "nr1.neureality.ai/mode"
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "vm")
	for _, step := range []struct {
		name string
		node nodeAnswer
		want string
	}{
		{"no label", nodeAnswer{labels: map[string]string{}}, "devicePlugin"},
		{"labelled dra", nodeAnswer{labels: map[string]string{key: "dra"}}, "dra"},
		{"API server away: the label last read", nodeAnswer{err: notFound}, "dra"},
		{"labelled something else: the configuration", nodeAnswer{labels: map[string]string{key: "gpu"}}, "devicePlugin"},
		{"API server away: nothing remembered", nodeAnswer{err: notFound}, "devicePlugin"},
		{"labelled devicePlugin", nodeAnswer{labels: map[string]string{key: "devicePlugin"}}, "devicePlugin"},
	} {
		if got := selectMode(&cfg, step.node, quiet).Mode; got != step.want {
			t.Fatalf("%s: mode %s, want %s", step.name, got, step.want)
		}
	}
	if cfg.Mode != "devicePlugin" {
		t.Errorf("selectMode changed the configuration it was given: %s", cfg.Mode)
	}
	b, err := os.ReadFile(filepath.Join(cfg.Paths.State, "mode"))
	if err != nil || strings.TrimSpace(string(b)) != "devicePlugin" {
		t.Errorf("remembered %q, %v", b, err)
	}
}

// An answer that will not change holds up no start; one that may is asked again until
// the deadline.
func TestReadLabelsWaitsOnlyForAnAnswerThatMayCome(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "vm", errors.New("no"))
	if _, err := readLabels(ctx, nodeAnswer{err: forbidden}); !apierrors.IsForbidden(err) {
		t.Errorf("forbidden: %v", err)
	}
	cancel()
	if _, err := readLabels(ctx, nodeAnswer{err: errors.New("connection refused")}); err == nil {
		t.Error("an unanswering API server read as labels")
	}
}
