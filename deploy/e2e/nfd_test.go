// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"bytes"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/node-feature-discovery/pkg/apis/nfd/nodefeaturerule"
	sigsyaml "sigs.k8s.io/yaml"
)

// The chart's NodeFeatureRule is accepted by the API server against Node Feature
// Discovery's own CRD, and NFD's own rule engine labels neureality.ai/nr1=true a node
// holding a PCI device of the NR1's IDs, and no node without one.
func TestNodeFeatureRule(t *testing.T) {
	const vendor, device = "1e5a", "0002"
	rendered := helmTemplate(t, "nr1-agent", "nr1-system", "--set", "nodeFeatureRule.enabled=true",
		"--set", "nodeFeatureRule.pci.vendor="+vendor, "--set", "nodeFeatureRule.pci.devices={0001,"+device+"}",
		"--show-only", "templates/nodefeaturerule.yaml")

	nfd := strings.TrimSpace(string(run(t, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/node-feature-discovery")))
	crds := filepath.Join(nfd, "deployment", "base", "nfd-crds", "nfd-api-crds.yaml")
	run(t, "kubectl", "apply", "--server-side", "--field-manager=nr1-e2e", "-f", crds)
	t.Cleanup(func() { _ = exec.Command("kubectl", "delete", "--ignore-not-found", "-f", crds).Run() })
	run(t, "kubectl", "wait", "--for=condition=Established", "--timeout=60s", "crd/nodefeaturerules.nfd.k8s-sigs.io")
	path := filepath.Join(t.TempDir(), "rule.yaml")
	writeFile(t, path, rendered)
	run(t, "kubectl", "apply", "--dry-run=server", "--validate=strict", "-f", path)

	var rule nfdv1alpha1.NodeFeatureRule
	if err := sigsyaml.UnmarshalStrict(bytes.TrimPrefix(rendered, []byte("---\n")), &rule); err != nil {
		t.Fatalf("the rendered rule: %v\n%s", err, rendered)
	}
	if len(rule.Spec.Rules) != 1 {
		t.Fatalf("%d rules, want 1", len(rule.Spec.Rules))
	}
	node := func(devices ...map[string]string) *nfdv1alpha1.Features {
		f := nfdv1alpha1.NewFeatures()
		var set []nfdv1alpha1.InstanceFeature
		for _, d := range devices {
			set = append(set, *nfdv1alpha1.NewInstanceFeature(d))
		}
		f.Instances["pci.device"] = nfdv1alpha1.NewInstanceFeatures(set...)
		return f
	}
	gpu := map[string]string{"vendor": "10de", "device": "2330", "class": "0302"}
	for name, c := range map[string]struct {
		features *nfdv1alpha1.Features
		want     map[string]string
	}{
		"an NR1 beside a GPU":              {node(gpu, map[string]string{"vendor": vendor, "device": device, "class": "1200"}), map[string]string{"neureality.ai/nr1": "true"}},
		"a GPU only":                       {node(gpu), nil},
		"another device of the NR1 vendor": {node(map[string]string{"vendor": vendor, "device": "00ff", "class": "1200"}), nil},
		"no PCI device":                    {node(), nil},
	} {
		out, err := nodefeaturerule.Execute(&rule.Spec.Rules[0], c.features, false)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(out.Labels) == 0 {
			out.Labels = nil
		}
		if !maps.Equal(out.Labels, c.want) {
			t.Errorf("%s: labels %v, want %v", name, out.Labels, c.want)
		}
	}
}
