// SPDX-License-Identifier: Apache-2.0

package ci

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

const chartDir = repo + "/deploy/helm/nr1-agent"

// chartFields are the Chart.yaml fields chart-testing's `ct lint` accepts, each with
// its kind and whether it must be there (ct's chart schema).
var chartFields = map[string]struct {
	kind     string
	required bool
}{
	"name": {"string", true}, "home": {"string", true}, "version": {"string", true}, "apiVersion": {"string", true},
	"description": {"string", true}, "appVersion": {"scalar", false}, "keywords": {"strings", false},
	"sources": {"strings", false}, "maintainers": {"maintainers", false}, "icon": {"string", false},
	"engine": {"string", false}, "condition": {"string", false}, "tags": {"string", false},
	"deprecated": {"bool", false}, "kubeVersion": {"string", false}, "annotations": {"stringMap", false},
	"type": {"string", false},
}

// chartYAMLErrors says what ct lint would refuse in a Chart.yaml.
func chartYAMLErrors(b []byte) []string {
	var chart map[string]any
	if err := sigsyaml.Unmarshal(b, &chart); err != nil {
		return []string{err.Error()}
	}
	var errs []string
	for name, f := range chartFields {
		if _, ok := chart[name]; !ok && f.required {
			errs = append(errs, name+": required")
		}
	}
	for name, v := range chart {
		f, ok := chartFields[name]
		if !ok {
			errs = append(errs, name+": not a Chart.yaml field ct accepts")
			continue
		}
		if why := kindError(f.kind, v); why != "" {
			errs = append(errs, fmt.Sprintf("%s: %s", name, why))
		}
	}
	slices.Sort(errs)
	return errs
}

func kindError(kind string, v any) string {
	switch kind {
	case "string":
		if _, ok := v.(string); !ok {
			return fmt.Sprintf("%v is not a string", v)
		}
	case "scalar":
		switch v.(type) {
		case string, float64:
		default:
			return fmt.Sprintf("%v is neither a string nor a number", v)
		}
	case "bool":
		if _, ok := v.(bool); !ok {
			return fmt.Sprintf("%v is not a boolean", v)
		}
	case "strings":
		l, ok := v.([]any)
		if !ok {
			return fmt.Sprintf("%v is not a list", v)
		}
		for _, e := range l {
			if _, ok := e.(string); !ok {
				return fmt.Sprintf("%v is not a string", e)
			}
		}
	case "stringMap":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Sprintf("%v is not a map", v)
		}
		for k, e := range m {
			if _, ok := e.(string); !ok {
				return fmt.Sprintf("%s: %v is not a string", k, e)
			}
		}
	case "maintainers":
		l, ok := v.([]any)
		if !ok {
			return fmt.Sprintf("%v is not a list", v)
		}
		for _, e := range l {
			m, ok := e.(map[string]any)
			if _, named := m["name"].(string); !ok || !named {
				return fmt.Sprintf("%v: a maintainer needs a name", e)
			}
			for k := range m {
				if k != "name" && k != "email" && k != "url" {
					return fmt.Sprintf("%v: a maintainer has no %s", e, k)
				}
			}
		}
	}
	return ""
}

// The chart passes what `ct lint` checks of it beside helm lint (run by make e2e's
// render, --strict, with each values file): its Chart.yaml against ct's chart schema,
// and its Chart.yaml and values files against ct's YAML rules, by yamllint.
func TestChartPassesChartTesting(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if errs := chartYAMLErrors(b); len(errs) > 0 {
		t.Errorf("Chart.yaml: %s", strings.Join(errs, "; "))
	}
	if _, err := exec.LookPath("yamllint"); err != nil {
		t.Fatal("yamllint not found: make test-deps installs Debian's")
	}
	files, _ := filepath.Glob(filepath.Join(chartDir, "values*.yaml"))
	files = append(files, filepath.Join(chartDir, "Chart.yaml"))
	out, err := exec.Command("yamllint", append([]string{"--strict", "-c", "testdata/ct-lintconf.yaml"}, files...)...).CombinedOutput()
	if err != nil {
		t.Errorf("yamllint with ct's rules: %v\n%s", err, out)
	}
}

// What ct's chart schema refuses, this check refuses too.
func TestChartTestingChecksRefuseWhatCTRefuses(t *testing.T) {
	for _, c := range []struct{ chart, want string }{
		{"name: x\nversion: 1.0.0\napiVersion: v2\ndescription: d\n", "home: required"},
		{"name: x\nhome: h\nversion: 1.0.0\napiVersion: v2\ndescription: d\nmaintaners: []\n", "maintaners: not a Chart.yaml field ct accepts"},
		{"name: x\nhome: h\nversion: 1.0.0\napiVersion: v2\ndescription: d\nsources: https://x\n", "sources: https://x is not a list"},
		{"name: x\nhome: h\nversion: 1.0.0\napiVersion: v2\ndescription: d\nmaintainers: [{email: a@b}]\n", "a maintainer needs a name"},
		{"name: x\nhome: h\nversion: 1.0.0\napiVersion: v2\ndescription: d\ndeprecated: \"no\"\n", "deprecated: no is not a boolean"},
	} {
		if got := strings.Join(chartYAMLErrors([]byte(c.chart)), "; "); !strings.Contains(got, c.want) {
			t.Errorf("%q: %q, want %q", c.chart, got, c.want)
		}
	}
	bad := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(bad, []byte("a:  1\nb: [ 1 ]   \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("yamllint", "--strict", "-c", "testdata/ct-lintconf.yaml", bad).CombinedOutput(); err == nil {
		t.Errorf("yamllint with ct's rules passed %s:\n%s", bad, out)
	}
}
