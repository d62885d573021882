// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// render returns the Helm chart with the local values and the kustomize local overlay,
// as the stack's own helm and kubectl render them.
func render(t *testing.T) (helm, kustomize []byte) {
	t.Helper()
	chart := filepath.Join(repo, "deploy", "helm", "nr1-agent")
	run(t, "helm", "lint", "--strict", chart, "-f", filepath.Join(chart, "values-local.yaml"))
	run(t, "helm", "lint", "--strict", chart)
	helm = run(t, "helm", "template", "nr1-agent", chart, "-f", filepath.Join(chart, "values-local.yaml"))
	kustomize = run(t, "kubectl", "kustomize", filepath.Join(repo, "deploy", "kustomize", "overlays", "local"))
	return helm, kustomize
}

// objects parses a multi-document rendering into objects keyed by kind/namespace/name,
// with every embedded config.yaml parsed too, so that formatting and key order do not
// count but content does.
func objects(t *testing.T, rendering []byte) map[string]any {
	t.Helper()
	out := map[string]any{}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendering), 4096)
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if obj == nil {
			continue
		}
		meta, _ := obj["metadata"].(map[string]any)
		if data, ok := obj["data"].(map[string]any); ok {
			for k, v := range data {
				var parsed any
				if s, ok := v.(string); ok && sigsyaml.Unmarshal([]byte(s), &parsed) == nil {
					data[k] = parsed
				}
			}
		}
		key := fmt.Sprintf("%v/%v/%v", obj["kind"], meta["namespace"], meta["name"])
		out[key] = canonical(obj)
	}
}

// canonical sorts lists of named items (containers, env, volumes, mounts) by name: both
// the API server and the kubelet treat them as maps.
func canonical(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = canonical(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = canonical(e)
		}
		sort.SliceStable(x, func(i, j int) bool { return name(x[i]) < name(x[j]) })
		return x
	default:
		return v
	}
}

func name(v any) string {
	if m, ok := v.(map[string]any); ok {
		if n, ok := m["name"].(string); ok {
			return n
		}
	}
	return ""
}

func TestHelmAndKustomizeRenderTheSameObjects(t *testing.T) {
	helm, kustomize := render(t)
	h, k := objects(t, helm), objects(t, kustomize)
	if len(h) == 0 || len(h) != len(k) {
		t.Fatalf("helm renders %d objects, kustomize %d", len(h), len(k))
	}
	for key, ho := range h {
		ko, ok := k[key]
		if !ok {
			t.Errorf("%s only in the Helm rendering", key)
			continue
		}
		if !reflect.DeepEqual(ho, ko) {
			hb, _ := sigsyaml.Marshal(ho)
			kb, _ := sigsyaml.Marshal(ko)
			t.Errorf("%s differs:\n--- helm\n%s\n--- kustomize\n%s", key, hb, kb)
		}
	}
}

func TestRenderingsAcceptedByAPIServer(t *testing.T) {
	helm, kustomize := render(t)
	for name, rendering := range map[string][]byte{"helm": helm, "kustomize": kustomize} {
		path := filepath.Join(t.TempDir(), name+".yaml")
		writeFile(t, path, rendering)
		run(t, "kubectl", "apply", "--dry-run=server", "-f", path)
	}
	// The base (production) rendering too.
	run(t, "kubectl", "apply", "--dry-run=server", "-k", filepath.Join(repo, "deploy", "kustomize", "base"))
}

// A misspelt key of the agent's configuration fails helm install, against the chart's
// schema (the configuration type's), instead of crash-looping the agent on every node.
func TestChartRefusesAMisspeltConfigKey(t *testing.T) {
	chart := filepath.Join(repo, "deploy", "helm", "nr1-agent")
	for set, want := range map[string]string{
		"config.sampling.intervall=5s": "at '/config/sampling': additional properties 'intervall' not allowed",
		"config.sampling.interval=5":   "at '/config/sampling/interval': got number, want string",
	} {
		_, err := runErr("helm", "install", "nr1-typo", chart, "--dry-run=server", "--namespace", "default", "--set", set)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: %v, want refused: %s", set, err, want)
		}
	}
	// The same key spelt right passes the schema (rendered: the agent this suite runs owns
	// the chart's objects on the stack, which an install would find taken).
	run(t, "helm", "template", "nr1-typo", chart, "--set", "config.sampling.interval=5s")
}

// The kubelet's root, the CDI directory and the runtime's socket follow the agent's
// configuration, on the host and in the agent's container alike: microk8s and CRI-O
// keep them elsewhere.
func TestChartFollowsTheConfiguredHostPaths(t *testing.T) {
	const kubelet, crio, cdi = "/var/snap/microk8s/common/var/lib/kubelet", "/var/run/crio", "/etc/cdi"
	out := string(run(t, "helm", "template", "nr1-agent", filepath.Join(repo, "deploy", "helm", "nr1-agent"),
		"--set", "config.paths.kubelet="+kubelet, "--set", "config.runtime.endpoint=unix://"+crio+"/crio.sock", "--set", "config.paths.cdi="+cdi))
	for _, want := range []string{
		"mountPath: " + kubelet + "/device-plugins}", "path: " + kubelet + "/device-plugins,",
		"mountPath: " + kubelet + "/plugins}", "path: " + kubelet + "/plugins_registry,",
		"mountPath: " + kubelet + "/pod-resources,", "path: " + kubelet + "/pod-resources,",
		"{name: cri, mountPath: " + crio + ",", "path: " + crio + ",",
		"{name: cdi, mountPath: " + cdi + "}", "path: " + cdi + ",",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the rendering has no %q", want)
		}
	}
	if strings.Contains(out, "ath: /var/lib/kubelet") || strings.Contains(out, "/run/containerd") {
		t.Error("the rendering still names the default paths")
	}
}
