// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"strings"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// sharing is two ResNet-50 CGs sharing one claim (3 MB of compute), each holding its
// own, and together holding together.
func sharing(at time.Time, a, b, together nr1.Usage, uncertain string) *view.Sample {
	s := &view.Shared{Claims: []string{"default/nr1-shared"}, Pods: []string{"default/cg-a", "default/cg-b"},
		Allocation: nr1.Amounts{3, 0, 2392, 7}, Usage: together, Uncertain: uncertain}
	s.Ratio = view.Ratios(together, s.Allocation)
	ca, cb := cg("a", a), cg("b", b)
	ca.Shared, cb.Shared, s.Members = s, s, []*view.Measured{ca, cb}
	return snap(at, ca, cb)
}

func TestPodsSharingAClaimAreJudgedTogether(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup = Duration{Duration: 0}
	twoMB := nr1.Usage{2 * mb}
	t.Run("together over: both acted on", func(t *testing.T) {
		by := run(p, 120, func(s int) *view.Sample {
			return sharing(t0.Add(time.Duration(s)*time.Second), twoMB, twoMB, nr1.Usage{4 * mb}, "")
		})
		acted := map[string]bool{}
		for _, as := range by {
			for _, a := range as {
				acted[a.Pod] = true
				if a.Resource != nr1.ComputeDMAMemory || a.Usage != 4*mb || a.Allocation != 3 ||
					!strings.Contains(a.Message, "sharing default/nr1-shared") || !strings.Contains(a.Message, "together") {
					t.Errorf("%s on %s: %+v, want the group's 4 MB of 3 named in its message", a.Kind, a.Pod, a)
				}
			}
		}
		if !acted["cg-a"] || !acted["cg-b"] {
			t.Errorf("acted on %v, want both pods: %s", acted, kinds(by))
		}
	})
	t.Run("together within: neither", func(t *testing.T) {
		// Each holds 2 MB, the same 2 MB: one union of 2 MB.
		if by := run(p, 120, func(s int) *view.Sample {
			return sharing(t0.Add(time.Duration(s)*time.Second), twoMB, twoMB, twoMB, "")
		}); len(by) != 0 {
			t.Errorf("acted: %s", kinds(by))
		}
	})
	t.Run("one over alone: judged on its own figures", func(t *testing.T) {
		by := run(p, 120, func(s int) *view.Sample {
			return sharing(t0.Add(time.Duration(s)*time.Second), nr1.Usage{5 * mb}, nr1.Usage{}, nr1.Usage{5 * mb}, "")
		})
		for _, as := range by {
			for _, a := range as {
				if a.Pod != "cg-a" {
					t.Errorf("%s on %s, which holds nothing: the pod over alone is the one to act on", a.Kind, a.Pod)
				}
			}
		}
		if len(by) == 0 {
			t.Error("nothing done on a pod holding 5 MB of 3")
		}
	})
	t.Run("a pod exempt, or its exemption unknown: the others do not pay for the group", func(t *testing.T) {
		pe := p
		pe.ExemptNamespaces = []string{"exempt"}
		for name, mark := range map[string]func(*view.Measured){
			"exempt":  func(c *view.Measured) { c.Namespace = "exempt" },
			"unknown": func(c *view.Measured) { c.NamespaceUnknown = "the API server does not answer" },
		} {
			if by := run(pe, 120, func(s int) *view.Sample {
				sn := sharing(t0.Add(time.Duration(s)*time.Second), twoMB, twoMB, nr1.Usage{4 * mb}, "")
				mark(sn.CGs[0])
				return sn
			}); len(by) != 0 {
				t.Errorf("%s: acted: %s", name, kinds(by))
			}
		}
	})
	t.Run("uncertain group under: the ladder neither moves nor resets", func(t *testing.T) {
		st := NewState(t0.Add(-time.Hour))
		over := sharing(t0, twoMB, twoMB, nr1.Usage{4 * mb}, "")
		if a := Decide(t0, over, st, p); len(a) == 0 {
			t.Fatal("no first step on a group over")
		}
		// Far under by the lower bound, long past the hold: not a reset.
		for s := 1; s <= 600; s++ {
			at := t0.Add(time.Duration(s) * time.Second)
			Decide(at, sharing(at, nr1.Usage{}, nr1.Usage{}, nr1.Usage{}, "cg-b: the scan ran out of time"), st, p)
		}
		if c := st.cgs["a"]; c == nil || c.Over[nr1.ComputeDMAMemory].IsZero() {
			t.Errorf("a's ladder reset on an uncertain group's usage: %+v", c)
		}
	})
}
