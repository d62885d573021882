// SPDX-License-Identifier: Apache-2.0

package inventory

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/neureality-sdk/nr1-agent/agent/observe/cgroup"
)

// counted is a count of cgroup changes that moves when the test says.
type counted struct{ n *atomic.Uint64 }

func (c counted) Count() (uint64, error) {
	if c.n == nil {
		return 0, nil
	}
	return c.n.Load(), nil
}

// failing is a count of changes that cannot be read.
type failing struct{}

func (failing) Count() (uint64, error) { return 0, errors.New("map gone") }

// TestTreesWalkAgainOnlyOnceACgroupChanged: a pod's tree is walked at the first round;
// a cgroup made meanwhile is not seen while the count stands, and is once it moves;
// without a count, or with one that cannot be read, every round walks; a pod no round
// asks for is forgotten.
func TestTreesWalkAgainOnlyOnceACgroupChanged(t *testing.T) {
	pod := t.TempDir()
	ctr := filepath.Join(pod, "ctr")
	if err := os.Mkdir(ctr, 0o755); err != nil {
		t.Fatal(err)
	}
	paths := func(tr *trees) []string {
		t.Helper()
		r := tr.round()
		defer r.end()
		tree, err := r.tree(pod)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for p := range tree {
			rel, _ := filepath.Rel(pod, p)
			out = append(out, rel)
		}
		slices.Sort(out)
		return out
	}
	n := &atomic.Uint64{}
	cached, uncounted, broken := &trees{changes: counted{n}}, &trees{}, &trees{changes: failing{}}
	for _, tr := range []*trees{cached, uncounted, broken} {
		if got := paths(tr); !slices.Equal(got, []string{".", "ctr"}) {
			t.Fatalf("first walk: %v", got)
		}
	}
	if err := os.Mkdir(filepath.Join(ctr, "child"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := []string{".", "ctr", "ctr/child"}
	if got := paths(cached); !slices.Equal(got, []string{".", "ctr"}) {
		t.Errorf("count unchanged: walked again, %v", got)
	}
	for name, tr := range map[string]*trees{"no count": uncounted, "count unreadable": broken} {
		if got := paths(tr); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	n.Add(1)
	if got := paths(cached); !slices.Equal(got, want) {
		t.Errorf("count moved: %v, want %v", got, want)
	}
	cached.round().end()
	if len(cached.walked) != 0 {
		t.Errorf("a round that walked nothing left %d trees", len(cached.walked))
	}
}

// TestResolutionsKeptWhileTheirPathIsMet: a cgroupsPath is resolved once, its refusal
// too, and forgotten after a round that did not meet it.
func TestResolutionsKeptWhileTheirPathIsMet(t *testing.T) {
	h := cgroup.Hierarchy{V2: "/sys/fs/cgroup/unified"}
	tr := &trees{}
	const good, bad = "/kubepods/besteffort/podx/ctr", "/../../etc"
	r := tr.round()
	want, err := h.Resolve(good)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, err := r.resolve(h, good); err != nil || got.V2 != want.V2 {
			t.Errorf("resolve(%q) = %+v, %v; want %+v", good, got, err, want)
		}
		if _, err := r.resolve(h, bad); err == nil {
			t.Errorf("resolve(%q): no refusal", bad)
		}
	}
	r.end()
	if len(tr.resolved) != 2 {
		t.Errorf("after a round meeting both: %d kept", len(tr.resolved))
	}
	r = tr.round()
	_, _ = r.resolve(h, good)
	r.end()
	if _, kept := tr.resolved[bad]; kept || len(tr.resolved) != 1 {
		t.Errorf("after a round meeting one: %v kept", tr.resolved)
	}
}
