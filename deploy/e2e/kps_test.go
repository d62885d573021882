// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// stackVersions are the local stack's pinned versions (deploy/local/versions.env).
func stackVersions(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(repo, "deploy", "local", "versions.env"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v := map[string]string{}
	for s := bufio.NewScanner(f); s.Scan(); {
		if k, val, ok := strings.Cut(s.Text(), "="); ok && !strings.HasPrefix(k, "#") {
			v[k] = val
		}
	}
	return v
}

// pushImage makes an image of one static binary (bin/ociimage, this machine's platform)
// and pushes it to the stack's registry as ref.
func pushImage(t *testing.T, binary, entrypoint, ref string) {
	t.Helper()
	dir := t.TempDir()
	run(t, filepath.Join(repo, "bin", "ociimage"), "--entrypoint", entrypoint, "--name", ref,
		"--file", runtime.GOARCH+"="+binary+":"+entrypoint, "--out", filepath.Join(dir, "image.tar"))
	layout := filepath.Join(dir, "layout")
	if err := os.Mkdir(layout, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "tar", "-xf", filepath.Join(dir, "image.tar"), "-C", layout)
	push := exec.Command("crane", "push", layout, ref)
	push.Env = append(os.Environ(), "SSL_CERT_FILE="+os.Getenv("NR1_REGISTRY_CA"))
	if out, err := push.CombinedOutput(); err != nil {
		t.Fatalf("crane push %s: %v\n%s", ref, err, out)
	}
}

// kpsObjects are what kube-prometheus-stack would have made: Prometheus's service
// account, allowed to discover the agents, and a Prometheus selecting the chart's
// ServiceMonitor and PrometheusRule by kube-prometheus-stack's release label. The local
// stack runs no kube-proxy and no DNS: Prometheus reaches the API server on its node's
// address.
const kpsObjects = `apiVersion: v1
kind: ServiceAccount
metadata: {name: prometheus-kps, namespace: monitoring}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: nr1-e2e-prometheus-kps}
rules:
  - apiGroups: [""]
    resources: [services, endpoints, pods]
    verbs: [get, list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: nr1-e2e-prometheus-kps}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: nr1-e2e-prometheus-kps}
subjects: [{kind: ServiceAccount, name: prometheus-kps, namespace: monitoring}]
---
apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {name: kps, namespace: monitoring}
spec:
  image: %s
  version: %s
  replicas: 1
  serviceAccountName: prometheus-kps
  serviceMonitorSelector: {matchLabels: {release: kps}}
  serviceMonitorNamespaceSelector: {}
  ruleSelector: {matchLabels: {release: kps}}
  ruleNamespaceSelector: {}
  scrapeInterval: 2s
  evaluationInterval: 2s
  containers:
    - name: prometheus
      env:
        - name: KUBERNETES_SERVICE_HOST
          valueFrom: {fieldRef: {fieldPath: status.hostIP}}
        - {name: KUBERNETES_SERVICE_PORT, value: "6443"}
`

// kubePrometheusStack runs the Prometheus Operator beside the stack as kube-prometheus-stack
// runs it: its CRDs, the operator itself (from its Go module), and a Prometheus in the
// cluster (static, its image and the config reloader's pushed to the stack's registry)
// selecting ServiceMonitors and PrometheusRules by the release label kps. It returns that
// Prometheus's address (host:port).
func kubePrometheusStack(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	registry := os.Getenv("NR1_REGISTRY")
	if registry == "" {
		t.Fatal("NR1_REGISTRY unset: run under make e2e, or after eval $(deploy/local/stack.sh env)")
	}
	v := stackVersions(t)
	cache := os.Getenv("NR1_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "nr1-agent")
	}
	opDir := filepath.Join(cache, "bin", "prometheus-operator-"+v["PROMETHEUS_OPERATOR_VERSION"])
	promBin := filepath.Join(cache, "bin", "prometheus-static-"+v["PROMETHEUS_VERSION"], "prometheus")
	for _, b := range []string{filepath.Join(opDir, "operator"), filepath.Join(opDir, "prometheus-config-reloader"), promBin} {
		if _, err := os.Stat(b); err != nil {
			t.Fatalf("%v: run deploy/local/build.sh tools", err)
		}
	}
	// Prometheus's module v0.X.Y is Prometheus 3.X.Y.
	var minor, patch int
	if _, err := fmt.Sscanf(v["PROMETHEUS_VERSION"], "v0.%d.%d", &minor, &patch); err != nil {
		t.Fatalf("PROMETHEUS_VERSION %q: %v", v["PROMETHEUS_VERSION"], err)
	}
	promVersion := fmt.Sprintf("v%d.%d.%d", minor/100, minor%100, patch)
	promImage := registry + "/prometheus:" + promVersion
	reloader := registry + "/prometheus-config-reloader:" + v["PROMETHEUS_OPERATOR_VERSION"]
	pushImage(t, promBin, "/bin/prometheus", promImage)
	pushImage(t, filepath.Join(opDir, "prometheus-config-reloader"), "/bin/prometheus-config-reloader", reloader)

	crds, err := filepath.Glob(filepath.Join(filepath.Dir(operatorCRDs(t)[0]), "monitoring.coreos.com_*.yaml"))
	if err != nil || len(crds) < 2 {
		t.Fatalf("the operator's CRDs: %v %v", crds, err)
	}
	for _, crd := range crds {
		run(t, "kubectl", "apply", "--server-side", "--field-manager=nr1-e2e", "-f", crd)
	}
	t.Cleanup(func() {
		for _, crd := range crds {
			_ = exec.Command("kubectl", "delete", "--ignore-not-found", "-f", crd).Run()
		}
	})
	run(t, "kubectl", "wait", "--for=condition=Established", "--timeout=60s", "crd/prometheuses.monitoring.coreos.com",
		"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")

	pki := filepath.Dir(os.Getenv("KUBECONFIG"))
	daemon(t, filepath.Join(opDir, "operator"), "--apiserver=https://127.0.0.1:6443", "--ca-file="+filepath.Join(pki, "ca.crt"),
		"--cert-file="+filepath.Join(pki, "admin.crt"), "--key-file="+filepath.Join(pki, "admin.key"),
		"--web.listen-address=127.0.0.1:18080", "--prometheus-config-reloader="+reloader)

	labelledNamespace(t, c, "monitoring", nil)
	objects := filepath.Join(t.TempDir(), "kps.yaml")
	writeFile(t, objects, fmt.Appendf(nil, kpsObjects, promImage, promVersion))
	run(t, "kubectl", "apply", "-f", objects)
	t.Cleanup(func() { _ = exec.Command("kubectl", "delete", "--ignore-not-found", "--wait", "-f", objects).Run() })

	var prom string
	eventually(t, 4*time.Minute, "the operator's Prometheus ready", func() error {
		p, err := c.CoreV1().Pods("monitoring").Get(context.Background(), "prometheus-kps-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				prom = p.Status.PodIP + ":9090"
				return nil
			}
		}
		return fmt.Errorf("prometheus-kps-0 %s: %v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	return prom
}

// promQuery is the label sets of the series the Prometheus at prom answers q with.
func promQuery(prom, q string) ([]map[string]string, error) {
	var r struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		} `json:"data"`
	}
	err := getJSON("http://"+prom+"/api/v1/query?query="+url.QueryEscape(q), &r)
	var out []map[string]string
	for _, s := range r.Data.Result {
		out = append(out, s.Metric)
	}
	return out, err
}
