// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/neureality-sdk/nr1-agent/internal/golden"
)

// shipped is the file the chart ships and `go generate` writes, from this directory.
const shipped = "../../helm/nr1-agent/files/nr1-agent.json"

// TestShippedDashboardIsGenerated keeps the committed JSON what the definition builds, so
// that nobody edits the JSON by hand and has it overwritten at the next generate.
func TestShippedDashboardIsGenerated(t *testing.T) {
	got, err := render()
	if err != nil {
		t.Fatal(err)
	}
	if want := golden.Read(t, shipped, got); !bytes.Equal(got, want) {
		t.Errorf("%s is not what deploy/grafana/dashboard generates: run make generate and commit it", shipped)
	}
}

// TestPanelsDoNotOverlap checks what Grafana's schema cannot: Grafana moves a panel that
// overlaps another, and mixes up links and repeats of two panels with one id.
func TestPanelsDoNotOverlap(t *testing.T) {
	ids := map[uint32]string{}
	for i, p := range panels {
		if other, dup := ids[p.id]; dup {
			t.Errorf("panels %q and %q have id %d", other, p.title, p.id)
		}
		ids[p.id] = p.title
		if p.x+p.w > 24 || p.w == 0 || p.h == 0 {
			t.Errorf("panel %q is %d wide at column %d, %d high: off the 24 columns or empty", p.title, p.w, p.x, p.h)
		}
		for _, q := range panels[:i] {
			if p.x < q.x+q.w && q.x < p.x+p.w && p.y < q.y+q.h && q.y < p.y+p.h {
				t.Errorf("panels %q and %q overlap", q.title, p.title)
			}
		}
	}
}

func TestUnescapeHTML(t *testing.T) {
	for in, want := range map[string]string{
		`"a \u003e 1 \u0026\u0026 b \u003c 2"`: `"a > 1 && b < 2"`,
		`"\\u003e"`:                            `"\\u003e"`,
		`"\\\u003e"`:                           `"\\>"`,
		`"\u00e9\n"`:                           `"\u00e9\n"`,
	} {
		if got := string(unescapeHTML([]byte(in))); got != want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", in, got, want)
		}
	}
}

// What is used is read from the CG-level families: a buffer or queue several containers
// of a CG hold counts once there, and would count for each in the per-container ones.
func TestUsedIsTheCGs(t *testing.T) {
	perContainer := regexp.MustCompile(`\bnr1_usage_(bytes|queues)\b`)
	for _, p := range panels {
		for _, q := range p.queries {
			if perContainer.MatchString(q.expr) {
				t.Errorf("panel %d %q sums the per-container family: %s", p.id, p.title, q.expr)
			}
		}
	}
}
