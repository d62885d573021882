// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sigsyaml "sigs.k8s.io/yaml"
)

// operatorCRDs returns the paths of the ServiceMonitor and PrometheusRule CRDs of the
// Prometheus Operator release the stack pins (deploy/local/versions.env), downloading it
// from the Go module proxy into the module cache if needed.
func operatorCRDs(t *testing.T) []string {
	t.Helper()
	prometheusOperator := "github.com/prometheus-operator/prometheus-operator@" + stackVersions(t)["PROMETHEUS_OPERATOR_VERSION"]
	out, err := exec.Command("go", "mod", "download", "-json", prometheusOperator).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v\n%s", prometheusOperator, err, out)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s: %v %s", prometheusOperator, err, mod.Error)
	}
	dir := filepath.Join(mod.Dir, "example", "prometheus-operator-crd")
	return []string{
		filepath.Join(dir, "monitoring.coreos.com_servicemonitors.yaml"),
		filepath.Join(dir, "monitoring.coreos.com_prometheusrules.yaml"),
	}
}

// TestPrometheusOperatorObjects installs the operator's ServiceMonitor and
// PrometheusRule CRDs and applies the chart's objects server-side against them: a field
// the CRDs do not have, or a value their schemas refuse, fails here.
func TestPrometheusOperatorObjects(t *testing.T) {
	crds := operatorCRDs(t)
	for _, crd := range crds {
		run(t, "kubectl", "apply", "--server-side", "--field-manager=nr1-e2e", "-f", crd)
	}
	t.Cleanup(func() {
		for _, crd := range crds {
			_ = exec.Command("kubectl", "delete", "--ignore-not-found", "-f", crd).Run()
		}
	})
	run(t, "kubectl", "wait", "--for=condition=Established", "--timeout=60s",
		"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")

	rendered := helmTemplate(t, "nr1-agent", "nr1-system",
		"--set", "prometheus.serviceMonitor=true", "--set", "prometheus.rules=true", "--set", "prometheus.additionalLabels.release=kps",
		"--show-only", "templates/prometheus.yaml")
	path := filepath.Join(t.TempDir(), "prometheus.yaml")
	writeFile(t, path, rendered)
	run(t, "kubectl", "apply", "--server-side", "--field-manager=nr1-e2e", "--validate=strict", "-n", "nr1-system", "-f", path)
	t.Cleanup(func() {
		_ = exec.Command("kubectl", "delete", "--ignore-not-found", "-n", "nr1-system", "-f", path).Run()
	})

	// What the API server stored is what the chart meant: the endpoint on the metrics
	// port, its labels honoured, every rule of the canonical file.
	var sm struct {
		Metadata struct{ Labels map[string]string }
		Spec     struct {
			Endpoints []struct {
				Port        string
				HonorLabels bool `json:"honorLabels"`
			}
			Selector struct{ MatchLabels map[string]string }
		}
	}
	if err := json.Unmarshal(run(t, "kubectl", "get", "-n", "nr1-system", "servicemonitor", "-o", "json", "nr1-agent"), &sm); err != nil {
		t.Fatal(err)
	}
	// The CGs' namespace, pod and container labels honoured over the Operator's target
	// labels (the agent's pod).
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || !sm.Spec.Endpoints[0].HonorLabels || sm.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != "nr1-agent" {
		t.Errorf("ServiceMonitor as stored: %+v", sm.Spec)
	}
	// kube-prometheus-stack selects what carries its release's label.
	if sm.Metadata.Labels["release"] != "kps" {
		t.Errorf("ServiceMonitor labels %v, want the additional release label", sm.Metadata.Labels)
	}
	var pr struct {
		Metadata struct{ Labels map[string]string }
		Spec     struct {
			Groups []struct{ Rules []json.RawMessage }
		}
	}
	if err := json.Unmarshal(run(t, "kubectl", "get", "-n", "nr1-system", "prometheusrule", "-o", "json", "nr1-agent"), &pr); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(chart, "files", "nr1-agent.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct{ Rules []json.RawMessage }
	}
	if err := sigsyaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if pr.Metadata.Labels["release"] != "kps" {
		t.Errorf("PrometheusRule labels %v, want the additional release label", pr.Metadata.Labels)
	}
	if count(pr.Spec.Groups) != count(file.Groups) || count(file.Groups) == 0 {
		t.Errorf("PrometheusRule holds %d rules, the rules file %d", count(pr.Spec.Groups), count(file.Groups))
	}
}

func count(groups []struct{ Rules []json.RawMessage }) int {
	n := 0
	for _, g := range groups {
		n += len(g.Rules)
	}
	return n
}

// TestPlainScrapeConfig runs a real Prometheus with deploy/prometheus/scrape-config.yaml
// as shipped (only told where the API server is, since it runs outside the cluster, and
// to scrape every second): it must find the agent through Kubernetes service discovery,
// scrape it, and name the instance after the node.
func TestPlainScrapeConfig(t *testing.T) {
	c := client(t)
	node := nodeName(t, c)
	b, err := os.ReadFile(filepath.Join(repo, "deploy", "prometheus", "scrape-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := sigsyaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	jobs, _ := cfg["scrape_configs"].([]any)
	if len(jobs) == 0 {
		t.Fatal("no scrape_configs")
	}
	for _, j := range jobs {
		job := j.(map[string]any)
		job["scrape_interval"] = "1s"
		sds, _ := job["kubernetes_sd_configs"].([]any)
		for _, sd := range sds {
			sd.(map[string]any)["kubeconfig_file"] = os.Getenv("KUBECONFIG")
		}
	}
	out, err := sigsyaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	promConfig := filepath.Join(dir, "prometheus.yml")
	writeFile(t, promConfig, out)
	const prom = "127.0.0.1:19091"
	daemon(t, "prometheus", "--config.file="+promConfig, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+prom)

	eventually(t, 60*time.Second, "Prometheus scraping the agent found by the plain scrape config", func() error {
		for _, q := range []string{
			fmt.Sprintf(`up{job="nr1-agent",instance=%q} == 1`, node),
			fmt.Sprintf(`count(nr1_capacity_bytes{job="nr1-agent",instance=%q}) == 3`, node),
			fmt.Sprintf(`count(nr1_capacity_queues{job="nr1-agent",instance=%q}) == 1`, node),
		} {
			var r struct {
				Data struct{ Result []json.RawMessage } `json:"data"`
			}
			if err := getJSON("http://"+prom+"/api/v1/query?query="+url.QueryEscape(q), &r); err != nil {
				return err
			}
			if len(r.Data.Result) != 1 {
				var targets json.RawMessage
				_ = getJSON("http://"+prom+"/api/v1/targets", &targets)
				return fmt.Errorf("%s: %d results; targets: %s", q, len(r.Data.Result), strings.TrimSpace(string(targets)))
			}
		}
		return nil
	})
}

// The dashboard ships as a ConfigMap Grafana's sidecar picks up: labelled for it, holding
// the dashboard file as it is, accepted by the API server.
func TestDashboardConfigMap(t *testing.T) {
	rendered := helmTemplate(t, "nr1-agent", "nr1-system", "--set", "grafana.dashboard=true", "--set", "grafana.namespace=default",
		"--show-only", "templates/grafana.yaml")
	var cm struct {
		Metadata struct {
			Namespace string
			Labels    map[string]string
		}
		Data map[string]string
	}
	if err := sigsyaml.Unmarshal(rendered, &cm); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(chart, "files", "nr1-agent.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cm.Metadata.Namespace != "default" || cm.Metadata.Labels["grafana_dashboard"] != "1" ||
		strings.TrimSpace(cm.Data["nr1-agent.json"]) != strings.TrimSpace(string(want)) {
		t.Errorf("dashboard ConfigMap in %q labelled %v, holding the dashboard: %v", cm.Metadata.Namespace, cm.Metadata.Labels,
			strings.TrimSpace(cm.Data["nr1-agent.json"]) == strings.TrimSpace(string(want)))
	}
	path := filepath.Join(t.TempDir(), "dashboard.yaml")
	writeFile(t, path, rendered)
	run(t, "kubectl", "apply", "--dry-run=server", "--validate=strict", "-f", path)
}
