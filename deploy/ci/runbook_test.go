// SPDX-License-Identifier: Apache-2.0

package ci

import (
	"regexp"
	"strings"
	"testing"
)

// runbooks is where every alert's runbook_url points: the README's section of its name.
const runbooks = "https://github.com/neureality-sdk/nr1-agent/blob/main/README.md#"

// Every alert links its runbook, the README's section for it, and every such section is
// an alert's.
func TestEveryAlertHasItsRunbook(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Annotations map[string]string
			}
		}
	}
	unmarshal(t, "deploy/helm/nr1-agent/files/nr1-agent.rules.yaml", &rules)
	readme := read(t, "README.md")
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#### (NR1[A-Za-z0-9]+)$`).FindAllStringSubmatch(readme, -1) {
		sections[m[1]] = true
	}
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if want := runbooks + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !sections[r.Alert] {
				t.Errorf("%s: the README has no section #### %s", r.Alert, r.Alert)
			}
			delete(sections, r.Alert)
		}
	}
	if alerts == 0 {
		t.Fatal("no alert read")
	}
	for s := range sections {
		t.Errorf("the README's runbook %s is no alert's", s)
	}
}
