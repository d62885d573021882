// SPDX-License-Identifier: Apache-2.0

package ci

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Everything released carries the one version in VERSION: the chart, the image it
// deploys, the kustomize base and the images' labels it gives, and CHANGELOG.md has its
// section.
func TestOneVersionEverywhere(t *testing.T) {
	version := strings.TrimSpace(read(t, "VERSION"))
	if !regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$`).MatchString(version) {
		t.Fatalf("VERSION %q is not a release's semantic version", version)
	}
	tag := "v" + version
	var chart struct{ Version, AppVersion string }
	unmarshal(t, "deploy/helm/nr1-agent/Chart.yaml", &chart)
	var values struct{ Image struct{ Tag string } }
	unmarshal(t, "deploy/helm/nr1-agent/values.yaml", &values)
	var base struct {
		Images []struct{ NewTag string }           `json:"images"`
		Labels []struct{ Pairs map[string]string } `json:"labels"`
	}
	unmarshal(t, "deploy/kustomize/base/kustomization.yaml", &base)
	var dra struct {
		Labels []struct{ Pairs map[string]string } `json:"labels"`
	}
	unmarshal(t, "deploy/kustomize/components/dra/kustomization.yaml", &dra)

	got := map[string]string{
		"deploy/helm/nr1-agent/Chart.yaml version":                         chart.Version,
		"deploy/helm/nr1-agent/Chart.yaml appVersion":                      chart.AppVersion,
		"deploy/kustomize/base images[0].newTag":                           first(base.Images, func(i struct{ NewTag string }) string { return i.NewTag }),
		"deploy/kustomize/base labels app.kubernetes.io/version":           label(base.Labels),
		"deploy/kustomize/components/dra labels app.kubernetes.io/version": label(dra.Labels),
	}
	// The chart's image is its appVersion's unless a user says otherwise.
	if values.Image.Tag != "" {
		t.Errorf("deploy/helm/nr1-agent/values.yaml image.tag is %q, want empty: the chart's appVersion", values.Image.Tag)
	}
	for where, v := range got {
		want := tag
		if strings.HasSuffix(where, "Chart.yaml version") {
			want = version
		}
		if v != want {
			t.Errorf("%s is %q, want %q (VERSION %s)", where, v, want, version)
		}
	}
	if !regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(version) + `\]`).MatchString(read(t, "CHANGELOG.md")) {
		t.Errorf("CHANGELOG.md has no section ## [%s]", version)
	}
}

func unmarshal(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, path))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func first[T any](s []T, f func(T) string) string {
	if len(s) == 0 {
		return ""
	}
	return f(s[0])
}

func label(l []struct{ Pairs map[string]string }) string {
	for _, p := range l {
		if v, ok := p.Pairs["app.kubernetes.io/version"]; ok {
			return v
		}
	}
	return ""
}
