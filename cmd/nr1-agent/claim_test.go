package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

func TestClaimFromResourcesYAML(t *testing.T) {
	var out, errs strings.Builder
	if code := run([]string{"claim", "--name", "resnet50", "--namespace", "ml", "../../nr1/testdata/resnet50-resources.yaml"}, func(string) string { return "" }, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	var tmpl resourceapi.ResourceClaimTemplate
	if err := yaml.UnmarshalStrict([]byte(out.String()), &tmpl); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if tmpl.Kind != "ResourceClaimTemplate" || tmpl.Name != "resnet50" || tmpl.Namespace != "ml" {
		t.Errorf("template %s %s/%s", tmpl.Kind, tmpl.Namespace, tmpl.Name)
	}
	caps := tmpl.Spec.Spec.Devices.Requests[0].Exactly.Capacity.Requests
	for k, v := range map[resourceapi.QualifiedName]string{"computeDMA": "3Mi", "dockerPartition": "2392Mi", "hvQueues": "7"} {
		if q := caps[k]; q.String() != v {
			t.Errorf("%s = %s, want %s", k, q.String(), v)
		}
	}
	if _, ok := caps["cpuDMA"]; ok {
		t.Error("cpuDMA requested although the CG needs none")
	}
}

func TestClaimRefusesBadResourcesYAML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resources.yaml")
	if err := os.WriteFile(path, []byte("neureality.ai/compute_dma_memory_in_mb: 3\nneureality.ai/gpu: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs strings.Builder
	if code := run([]string{"claim", path}, func(string) string { return "" }, &out, &errs); code != 1 || out.Len() != 0 {
		t.Fatalf("exit %d, output %q", code, out.String())
	}
	if !strings.Contains(errs.String(), "line 2") || !strings.Contains(errs.String(), "neureality.ai/gpu") {
		t.Errorf("error %q does not name the line and the key", errs.String())
	}
}

// The DRA example's template is what `nr1-agent claim` writes from the ResNet-50 CG's
// resources.yaml.
func TestExampleTemplateIsTheClaimOfTheSeed(t *testing.T) {
	var out, errs strings.Builder
	if code := run([]string{"claim", "--name", "resnet50", "--namespace", "default", "../../nr1/testdata/resnet50-resources.yaml"}, func(string) string { return "" }, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	var fromClaim, example resourceapi.ResourceClaimTemplate
	if err := yaml.UnmarshalStrict([]byte(out.String()), &fromClaim); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../deploy/examples/resnet50-cg-dra.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(strings.Split(string(b), "\n---\n")[0]), &example); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(fromClaim, example) {
		t.Errorf("deploy/examples/resnet50-cg-dra.yaml's template differs from nr1-agent claim's:\n%s", out.String())
	}
}
