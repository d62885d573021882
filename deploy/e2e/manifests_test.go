// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

var chart = filepath.Join(repo, "deploy", "helm", "nr1-agent")

// helmTemplate renders the chart as helm template does for the stack's API server: the
// chart's kubeVersion refuses helm's default (Kubernetes 1.20) without it.
func helmTemplate(t *testing.T, release, namespace string, args ...string) []byte {
	t.Helper()
	var v struct {
		ServerVersion struct{ GitVersion string } `json:"serverVersion"`
	}
	if err := json.Unmarshal(run(t, "kubectl", "version", "-o", "json"), &v); err != nil || v.ServerVersion.GitVersion == "" {
		t.Fatalf("the API server's version: %v", err)
	}
	return run(t, "helm", append([]string{"template", release, chart, "--namespace", namespace, "--kube-version", v.ServerVersion.GitVersion}, args...)...)
}

// render returns the Helm chart with the local values and the kustomize local overlay,
// as the stack's own helm and kubectl render them.
func render(t *testing.T) (helm, kustomize []byte) {
	t.Helper()
	run(t, "helm", "lint", "--strict", chart, "-f", filepath.Join(chart, "values-local.yaml"))
	run(t, "helm", "lint", "--strict", chart)
	helm = helmTemplate(t, "nr1-agent", "nr1-system", "-f", filepath.Join(chart, "values-local.yaml"))
	kustomize = run(t, "kubectl", "kustomize", filepath.Join(repo, "deploy", "kustomize", "overlays", "local"))
	return helm, kustomize
}

// helmRelease is what a Helm rendering says of its release, which a kustomize rendering
// has no release to say: the labels naming the release, its manager and chart, and the
// configuration's checksum rolling the agents when it changes (kustomize's users apply
// the DaemonSet and its ConfigMap together, and restart it).
var helmRelease = struct{ labels, annotations []string }{
	labels:      []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart"},
	annotations: []string{"checksum/config"},
}

// withoutRelease drops helmRelease's labels and annotations from an object and its pod
// template.
func withoutRelease(obj map[string]any) {
	for _, path := range [][]string{{"metadata"}, {"spec", "template", "metadata"}} {
		meta, ok := dig(obj, path...).(map[string]any)
		if !ok {
			continue
		}
		for field, keys := range map[string][]string{"labels": helmRelease.labels, "annotations": helmRelease.annotations} {
			m, _ := meta[field].(map[string]any)
			for _, k := range keys {
				delete(m, k)
			}
			if m != nil && len(m) == 0 {
				delete(meta, field)
			}
		}
	}
}

func dig(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
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
	for _, obj := range h {
		withoutRelease(obj.(map[string]any))
	}
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

// A misspelt key anywhere in the chart's values fails helm install, against the chart's
// schema, instead of rendering silently or crash-looping the agent on every node: every
// key the schema names (the agent's configuration's included) misspelt, at once, each
// refused by name; and values the agent would refuse, each refused with its key.
func TestChartRefusesAMisspeltConfigKey(t *testing.T) {
	for set, want := range map[string]string{
		"config.sampling.intervall=5s": "at '/config/sampling': additional properties 'intervall' not allowed",
		"config.sampling.interval=5":   "at '/config/sampling/interval': got number, want string",
	} {
		_, err := runErr("helm", "install", "nr1-typo", chart, "--dry-run=server", "--namespace", "default", "--set", set)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: %v, want refused: %s", set, err, want)
		}
	}
	b, err := os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	var misspelt []misspelling
	misspell(schema, "", "", &misspelt)
	if len(misspelt) < 100 {
		t.Fatalf("%d keys misspelt: the schema names fewer keys than the chart reads", len(misspelt))
	}
	args := []string{"template", "nr1-typo", chart, "--kube-version", "1.37.0"}
	for _, m := range misspelt {
		args = append(args, "--set", m.set)
	}
	out, err := runErr("helm", args...)
	if err == nil {
		t.Fatalf("%d misspelt keys rendered:\n%s", len(misspelt), out)
	}
	// helm names the keys refused in one object on one line.
	refused := map[string]string{}
	for _, line := range strings.Split(err.Error(), "\n") {
		if at, rest, ok := strings.Cut(line, "- at '"); ok && strings.TrimSpace(at) == "" {
			pointer, msg, _ := strings.Cut(rest, "': ")
			if strings.HasPrefix(msg, "additional properties") {
				refused[pointer] = msg
			}
		}
	}
	for _, m := range misspelt {
		if !strings.Contains(refused[m.pointer], "'"+m.wrong+"'") {
			t.Errorf("--set %s: not refused at '%s' (%q)", m.set, m.pointer, refused[m.pointer])
		}
	}
	t.Logf("%d misspelt keys refused by name", len(misspelt))
	for set, want := range map[string]string{
		"config.mode=DRA":          "at '/config/mode': value must be one of 'devicePlugin', 'dra'",
		"config.log.level=verbose": "at '/config/log/level': value must be one of",
		"config.enforcement.resources.compute_dma_memory.ladder[0].action=kil": "at '/config/enforcement/resources/compute_dma_memory/ladder/0/action': value must be one of",
		"config.sampling.source=ebpf":                                          "at '/config/sampling/source': value must be one of",
		"config.sampling.interval=5parsecs":                                    "at '/config/sampling/interval': '5parsecs' does not match pattern",
		"config.mode=dra":                                                      "at '/dra/enabled': value must be true",
		"resources.limits.memory=lots":                                         "at '/resources/limits/memory'",
		"resources.limits.memroy=1Gi":                                          "invalid propertyName 'memroy'",
		"image.pullPolicy=Sometimes":                                           "at '/image/pullPolicy': value must be one of",
		"dnsPolicy=Cluster":                                                    "at '/dnsPolicy': value must be one of",
		"tolerations[0].operator=Exist":                                        "at '/tolerations/0/operator': value must be one of",
		"config.enforcement.killScope=pod":                                     "at '/config/enforcement/killScope': value must be one of",
		"extraHostPaths[0].path=relative/dir":                                  "at '/extraHostPaths/0",
		"fullnameOverride=NR1_Agent":                                           "at '/fullnameOverride': 'NR1_Agent' does not match pattern",
	} {
		_, err := runErr("helm", "template", "nr1-typo", chart, "--kube-version", "1.37.0", "--set", set)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: %v, want refused: %s", set, err, want)
		}
	}
	// The same key spelt right passes the schema (rendered: the agent this suite runs owns
	// the chart's objects on the stack, which an install would find taken).
	helmTemplate(t, "nr1-typo", "default", "--set", "config.sampling.interval=5s")
}

// misspelling is a key misspelt: its --set, and where helm must refuse what.
type misspelling struct{ set, pointer, wrong string }

// misspell adds, for every key of every closed object of schema (at set, as --set names
// it, and pointer, as helm's errors do), the key misspelt; arrays of objects through
// their first item.
func misspell(schema map[string]any, set, pointer string, out *[]misspelling) {
	props, _ := schema["properties"].(map[string]any)
	if open, ok := schema["additionalProperties"].(bool); ok && !open {
		for _, name := range slices.Sorted(maps.Keys(props)) {
			wrong := name + name[len(name)-1:]
			if _, taken := props[wrong]; taken {
				continue
			}
			*out = append(*out, misspelling{set: strings.TrimPrefix(set+"."+wrong, ".") + "=x", pointer: pointer, wrong: wrong})
		}
	}
	for name, p := range props {
		sub, _ := p.(map[string]any)
		key := strings.TrimPrefix(set+"."+name, ".")
		switch sub["type"] {
		case "object":
			misspell(sub, key, pointer+"/"+name, out)
		case "array":
			if items, ok := sub["items"].(map[string]any); ok && items["type"] == "object" {
				misspell(items, key+"[0]", pointer+"/"+name+"/0", out)
			}
		}
	}
}

// The kubelet's root, the CDI directory and the runtime's socket follow the agent's
// configuration, on the host and in the agent's container alike: microk8s and CRI-O
// keep them elsewhere.
func TestChartFollowsTheConfiguredHostPaths(t *testing.T) {
	const kubelet, crio, cdi = "/var/snap/microk8s/common/var/lib/kubelet", "/var/run/crio", "/etc/cdi"
	out := string(helmTemplate(t, "nr1-agent", "nr1-system",
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

// The kustomize component for CRI-O nodes gives the agent what the chart gives it for
// CRI-O's socket: the same DaemonSet, its socket's directory mounted instead of
// containerd's.
func TestCRIOComponentIsTheChartsCRIOSocket(t *testing.T) {
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, filepath.Join(repo, "deploy", "kustomize"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "kustomization.yaml"), []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"+
		"resources: ["+rel+"/overlays/local]\ncomponents: ["+rel+"/components/crio]\n"))
	k := objects(t, run(t, "kubectl", "kustomize", dir))
	h := objects(t, helmTemplate(t, "nr1-agent", "nr1-system", "-f", filepath.Join(chart, "values-local.yaml"),
		"--set", "config.runtime.endpoint=unix:///run/crio/crio.sock"))
	const key = "DaemonSet/nr1-system/nr1-agent"
	ho, ko := h[key].(map[string]any), k[key]
	if ho == nil || ko == nil {
		t.Fatalf("no %s: helm %v, kustomize %v", key, ho != nil, ko != nil)
	}
	withoutRelease(ho)
	if !reflect.DeepEqual(ho, ko) {
		hb, _ := sigsyaml.Marshal(ho)
		kb, _ := sigsyaml.Marshal(ko)
		t.Errorf("%s differs:\n--- helm\n%s\n--- kustomize\n%s", key, hb, kb)
	}
	if b, _ := sigsyaml.Marshal(ko); !strings.Contains(string(b), "/run/crio") || strings.Contains(string(b), "/run/containerd") {
		t.Errorf("the component's DaemonSet does not mount CRI-O's socket alone:\n%s", b)
	}
}

// The chart installs into its release's namespace and labels every object as Kubernetes
// and Helm recommend, with a DaemonSet selector that no release can change; a changed
// configuration rolls the agents; the namespace object is rendered only when asked for.
func TestChartFollowsHelmsConventions(t *testing.T) {
	chartMeta := struct{ Version, AppVersion string }{}
	b, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	if err == nil {
		err = sigsyaml.Unmarshal(b, &chartMeta)
	}
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"app.kubernetes.io/name":       "nr1-agent",
		"app.kubernetes.io/instance":   "ops",
		"app.kubernetes.io/version":    chartMeta.AppVersion,
		"app.kubernetes.io/part-of":    "nr1-agent",
		"app.kubernetes.io/managed-by": "Helm",
		"helm.sh/chart":                "nr1-agent-" + chartMeta.Version,
	}
	objs := objects(t, helmTemplate(t, "ops", "nr1-ops", "--set", "dra.enabled=true"))
	for key, obj := range objs {
		o := obj.(map[string]any)
		if o["kind"] == "Namespace" {
			t.Errorf("%s rendered without namespace.create", key)
		}
		labels, _ := dig(o, "metadata", "labels").(map[string]any)
		for k, v := range want {
			if labels[k] != v {
				t.Errorf("%s: label %s=%v, want %q", key, k, labels[k], v)
			}
		}
		if ns, ok := dig(o, "metadata", "namespace").(string); ok && ns != "nr1-ops" {
			t.Errorf("%s: in namespace %s, not the release's", key, ns)
		}
	}
	// Named by the release (<release>-nr1-agent), every object but the DeviceClass, whose
	// name claims ask for.
	for key := range objs {
		if name := key[strings.LastIndex(key, "/")+1:]; !strings.HasPrefix(name, "ops-nr1-agent") && key != "DeviceClass/<nil>/nr1.neureality.ai" {
			t.Errorf("%s: not named by the release", key)
		}
	}
	ds, ok := objs["DaemonSet/nr1-ops/ops-nr1-agent"].(map[string]any)
	if !ok {
		t.Fatalf("no DaemonSet ops-nr1-agent in the release's namespace: %v", keys(objs))
	}
	if sel := dig(ds, "spec", "selector", "matchLabels"); !reflect.DeepEqual(sel, map[string]any{"app.kubernetes.io/name": "nr1-agent"}) {
		t.Errorf("the DaemonSet selects %v: a selector naming the release or version could not be upgraded", sel)
	}
	podLabels, _ := dig(ds, "spec", "template", "metadata", "labels").(map[string]any)
	for k, v := range want {
		if podLabels[k] != v {
			t.Errorf("the agents' pods: label %s=%v, want %q", k, podLabels[k], v)
		}
	}
	for _, subject := range []string{"ClusterRoleBinding/<nil>/ops-nr1-agent", "ClusterRoleBinding/<nil>/ops-nr1-agent-dra"} {
		subjects, _ := dig(objs[subject], "subjects").([]any)
		if len(subjects) != 1 || dig(subjects[0], "namespace") != "nr1-ops" || dig(subjects[0], "name") != "ops-nr1-agent" {
			t.Errorf("%s binds %v, not the release's ServiceAccount", subject, subjects)
		}
	}
	if expr := fmt.Sprint(dig(objs["ValidatingAdmissionPolicy/<nil>/ops-nr1-agent-resourceslices"], "spec")); !strings.Contains(expr, "system:serviceaccount:nr1-ops:ops-nr1-agent\"") {
		t.Errorf("the ResourceSlice policy does not name the release's ServiceAccount: %s", expr)
	}
	if cm := dig(ds, "spec", "template", "spec", "volumes"); !strings.Contains(fmt.Sprint(cm), "name:ops-nr1-agent") {
		t.Errorf("the agents' configuration volume is not the release's ConfigMap: %v", cm)
	}
	// The Operator names the job after the Service unless told: the rules' job, nr1-agent,
	// is the Service's name label, the same whatever the release.
	monitored := objects(t, helmTemplate(t, "ops", "nr1-ops", "--set", "prometheus.serviceMonitor=true"))
	jobLabel, _ := dig(monitored["ServiceMonitor/nr1-ops/ops-nr1-agent"], "spec", "jobLabel").(string)
	if job := dig(monitored["Service/nr1-ops/ops-nr1-agent"], "metadata", "labels", jobLabel); jobLabel == "" || job != "nr1-agent" {
		t.Errorf("the ServiceMonitor's job: jobLabel %q, the Service's value %v; want nr1-agent, as the rules name it", jobLabel, job)
	}
	// nameOverride stands for the chart's name, fullnameOverride for the whole; the
	// release named as the chart names its objects so.
	for _, c := range []struct {
		release string
		args    []string
		want    string
	}{
		{"ops", []string{"--set", "nameOverride=nr1"}, "ops-nr1"},
		{"ops", []string{"--set", "fullnameOverride=acme-nr1"}, "acme-nr1"},
		{"nr1-agent", nil, "nr1-agent"},
		{"nr1-agent-prod", nil, "nr1-agent-prod"},
	} {
		objs := objects(t, helmTemplate(t, c.release, "nr1-ops", c.args...))
		if _, ok := objs["DaemonSet/nr1-ops/"+c.want]; !ok {
			t.Errorf("release %s %v: no DaemonSet %s: %v", c.release, c.args, c.want, keys(objs))
		}
		if _, ok := objs["ServiceAccount/nr1-ops/"+c.want]; !ok {
			t.Errorf("release %s %v: no ServiceAccount %s", c.release, c.args, c.want)
		}
	}

	// The namespace object, when asked for, is the release's, labelled for the agents'
	// privileged pods.
	ns := objects(t, helmTemplate(t, "ops", "nr1-ops", "--set", "namespace.create=true"))["Namespace/<nil>/nr1-ops"]
	if dig(ns, "metadata", "labels", "pod-security.kubernetes.io/enforce") != "privileged" {
		t.Errorf("namespace.create=true renders %v", ns)
	}

	// checksum/config follows the configuration, and only it.
	checksum := func(args ...string) any {
		o := objects(t, helmTemplate(t, "ops", "nr1-ops", args...))["DaemonSet/nr1-ops/ops-nr1-agent"]
		return dig(o, "spec", "template", "metadata", "annotations", "checksum/config")
	}
	base, again := checksum(), checksum("--set", "resources.limits.memory=300Mi")
	changed := checksum("--set", "config.sampling.interval=5s")
	if base == nil || base != again || base == changed {
		t.Errorf("checksum/config: %v by default, %v with other values, %v with another configuration", base, again, changed)
	}

	// An API server older than the chart supports is refused at install, by name.
	if out, err := runErr("helm", "template", "ops", chart, "--kube-version", "v1.29.0"); err == nil || !strings.Contains(string(out)+err.Error(), "kubeVersion") {
		t.Errorf("Kubernetes 1.29 accepted: %v %s", err, out)
	}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
