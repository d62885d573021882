// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Exemption is the administrator's: the configuration's lists and the namespace's labels
// decide, a pod's annotation counts only where they allow it, and while the labels are
// unknown only the lists can decide. Every CG here is throttled and past the hard ratio:
// exempt lifts the throttle; enforced warns and kills; undecided leaves it as it is.
func TestExemptionIsTheAdministrators(t *testing.T) {
	const (
		exempt    = "unthrottle"
		enforced  = "warn kill"
		undecided = ""
		reported  = "bad-annotation "
	)
	unknown := map[string]string{"unknown": ""} // stands for labels that are not known
	tests := []struct {
		name        string
		exemptNS    []string // enforcement.exemptNamespaces
		podExemptNS []string // enforcement.podExemptionNamespaces
		labels      map[string]string
		annotation  string // empty: none
		want        string
	}{
		{name: "nothing exempts", want: enforced},
		{name: "config list", exemptNS: []string{"team"}, want: exempt},
		{name: "config list, labels unknown", exemptNS: []string{"team"}, labels: unknown, want: exempt},
		{name: "config list, annotation", exemptNS: []string{"team"}, annotation: "disabled", want: exempt},
		{name: "namespace labelled exempt", labels: map[string]string{ExemptLabel: "disabled"}, want: exempt},
		{name: "namespace labelled exempt, annotation", labels: map[string]string{ExemptLabel: "disabled"}, annotation: "disabled", want: exempt},
		{name: "namespace label with another value", labels: map[string]string{ExemptLabel: "enabled"}, want: enforced},
		{name: "labels unknown", labels: unknown, want: undecided},
		{name: "labels unknown, annotation enabled", labels: unknown, annotation: "enabled", want: undecided},
		{name: "annotation, namespace allows it", labels: map[string]string{AllowPodExemptionLabel: "true"}, annotation: "disabled", want: exempt},
		{name: "annotation, namespace does not allow it", annotation: "disabled", want: reported + enforced},
		{name: "annotation, allow label not true", labels: map[string]string{AllowPodExemptionLabel: "yes"}, annotation: "disabled", want: reported + enforced},
		{name: "annotation, config allows it", podExemptNS: []string{"team"}, annotation: "disabled", want: exempt},
		{name: "annotation, config allows it, labels unknown", podExemptNS: []string{"team"}, labels: unknown, annotation: "disabled", want: exempt},
		{name: "annotation, config allows another namespace", podExemptNS: []string{"other"}, annotation: "disabled", want: reported + enforced},
		{name: "annotation, labels unknown", labels: unknown, annotation: "disabled", want: undecided},
		{name: "allowed namespace, annotation enabled", labels: map[string]string{AllowPodExemptionLabel: "true"}, annotation: "enabled", want: enforced},
		{name: "allowed namespace, unreadable annotation", labels: map[string]string{AllowPodExemptionLabel: "true"}, annotation: "off", want: reported + enforced},
		{name: "unreadable annotation, labels unknown", labels: unknown, annotation: "off", want: reported + undecided},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := noWarmup()
			p.ExemptNamespaces, p.PodExemptionNamespaces = tt.exemptNS, tt.podExemptNS
			c := teamCG(tt.labels, tt.annotation)
			st := NewState(t0.Add(-time.Hour))
			st.AdoptThrottle("a")
			if got := actionKinds(Decide(t0, snap(t0, c), st, p)); got != strings.TrimSpace(tt.want) {
				t.Errorf("got %q, want %q", got, strings.TrimSpace(tt.want))
			}
			// Reported once: the next sample does not report it again.
			if again := Decide(at(1), snap(at(1), teamCG(tt.labels, tt.annotation)), st, p); strings.Contains(actionKinds(again), "bad-annotation") {
				t.Errorf("reported again: %s", actionKinds(again))
			}
		})
	}
}

// A CG whose exemption could not be decided keeps its ladder: it goes on from where it
// was once the namespace's labels are known again, with nothing repeated, its clock
// stopped while they were unknown.
func TestUnknownNamespaceLabelsFreezeTheLadder(t *testing.T) {
	p := noWarmup()
	st := NewState(t0.Add(-time.Hour))
	var got []string
	for s := 0; s <= 25; s++ {
		labels := map[string]string(nil)
		if s >= 3 && s <= 10 {
			labels = map[string]string{"unknown": ""}
		}
		c := teamCG(labels, "")
		c.Usage = nr1.Usage{4 * mb, 0, 0, 0}
		c.Ratio = view.Ratios(c.Usage, c.Allocation)
		for _, a := range Decide(at(s), snap(at(s), c), st, p) {
			got = append(got, fmt.Sprintf("%d:%s", s, a.Kind))
		}
	}
	if strings.Join(got, " ") != "0:warn 13:throttle 23:kill" {
		t.Errorf("actions %v, want warn at 0, nothing while unknown, the ladder going on after with its clock stopped meanwhile", got)
	}
}

// In dry-run a node keeps no throttle, whatever is known of the CG's namespace; nothing
// else is reported of a CG whose exemption is undecided.
func TestDryRunLiftsThrottlesOfUndecidedCGs(t *testing.T) {
	p := noWarmup()
	p.Mode = DryRun
	st := NewState(t0.Add(-time.Hour))
	st.AdoptThrottle("a")
	if got := actionKinds(Decide(t0, snap(t0, teamCG(map[string]string{"unknown": ""}, "disabled")), st, p)); got != "unthrottle" {
		t.Errorf("got %q, want the throttle lifted and nothing else", got)
	}
}

// teamCG is CG "a" of namespace team, 20 queues of 7 (past the hard ratio), with its
// namespace's labels (unknown when they hold the key "unknown") and the annotation.
func teamCG(labels map[string]string, annotation string) *view.Measured {
	c := cg("a", nr1.Usage{0, 0, 0, 20})
	c.Namespace = "team"
	if _, ok := labels["unknown"]; ok {
		c.NamespaceUnknown = "namespaces not listed yet"
	} else {
		c.NamespaceLabels = labels
	}
	if annotation != "" {
		c.Annotations = map[string]string{AnnotationKey: annotation}
	}
	return c
}

func actionKinds(as []Action) string {
	var out []string
	for _, a := range as {
		out = append(out, string(a.Kind))
	}
	return strings.Join(out, " ")
}

func TestPolicyValidateExemption(t *testing.T) {
	p := DefaultPolicy()
	p.ExemptNamespaces = []string{"kube-system", "Team_A"}
	p.PodExemptionNamespaces = []string{""}
	p.MaxNamespaceAge = Duration{}
	err := p.Validate("enforcement")
	for _, want := range []string{
		`enforcement.exemptNamespaces[1]: "Team_A" is not a namespace name`,
		`enforcement.podExemptionNamespaces[0]: "" is not a namespace name`,
		"enforcement.maxNamespaceAge: must be positive",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "kube-system") {
		t.Errorf("a valid name refused: %v", err)
	}
}

// The annotation's value is the pod owner's: the Event naming it stays one bounded line
// whatever the value holds.
func TestIgnoredAnnotationIsQuotedAndBounded(t *testing.T) {
	c := cg("a", nr1.Usage{})
	c.Annotations = map[string]string{AnnotationKey: "x\n" + strings.Repeat("y", 100000)}
	got := Decide(t0, snap(t0, c), NewState(t0.Add(-time.Hour)), DefaultPolicy())
	if len(got) != 1 || got[0].Kind != BadAnnotation || strings.Contains(got[0].Message, "\n") || len(got[0].Message) > 1024 {
		t.Fatalf("%d actions; message of %d bytes: %.200q", len(got), len(got[0].Message), got[0].Message)
	}
}
