// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// daemon starts a server binary (a name on PATH, or a path) for the test's lifetime.
func daemon(t *testing.T, name string, args ...string) {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: install Debian's prometheus and prometheus-alertmanager (make deps)", name)
	}
	log, err := os.Create(filepath.Join(t.TempDir(), filepath.Base(name)+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("%s log:\n%s", name, b)
		}
	})
}

// getJSON decodes what u answers into v; getJSONWith asks through c.
func getJSON(u string, v any) error {
	return getJSONWith(&http.Client{Timeout: 5 * time.Second}, u, v)
}

func getJSONWith(c *http.Client, u string, v any) error {
	resp, err := c.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// promAlert is an alert as Prometheus's API lists it.
type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// promAlerts lists the alerts of the Prometheus at prom (host:port).
func promAlerts(prom string) ([]promAlert, error) {
	var r struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	err := getJSON("http://"+prom+"/api/v1/alerts", &r)
	return r.Data.Alerts, err
}

// TestPrometheusAndAlertmanager scrapes the agent with a real Prometheus running the
// project's rules, and follows the alerts to a real Alertmanager.
func TestPrometheusAndAlertmanager(t *testing.T) {
	c := client(t)
	dir := t.TempDir()
	const am, prom = "127.0.0.1:19093", "127.0.0.1:19090"
	amConfig := filepath.Join(dir, "alertmanager.yml")
	writeFile(t, amConfig, []byte("route:\n  receiver: log\n  group_wait: 1s\n  group_interval: 1s\nreceivers:\n  - name: log\n"))
	daemon(t, "prometheus-alertmanager", "--config.file="+amConfig, "--storage.path="+filepath.Join(dir, "am"),
		"--web.listen-address="+am, "--cluster.listen-address=")

	agents, err := c.CoreV1().Pods("nr1-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=nr1-agent"})
	if err != nil || len(agents.Items) != 1 {
		t.Fatalf("agent pods: %v", err)
	}
	agent := agents.Items[0]
	rules, err := filepath.Abs(filepath.Join(repo, "deploy", "prometheus", "nr1-agent.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	promConfig := filepath.Join(dir, "prometheus.yml")
	writeFile(t, promConfig, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
alerting:
  alertmanagers:
    - static_configs:
        - targets: [%q]
scrape_configs:
  - job_name: nr1-agent
    static_configs:
      - targets: ["%s:9470"]
        labels: {instance: %q}
`, rules, am, agent.Status.PodIP, agent.Spec.NodeName)))
	daemon(t, "prometheus", "--config.file="+promConfig, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+prom)

	query := func(q string) (int, error) {
		var r struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		err := getJSON("http://"+prom+"/api/v1/query?query="+url.QueryEscape(q), &r)
		return len(r.Data.Result), err
	}
	running(t, c, createPod(t, c, podFromFile(t, "device-plugin/resnet50-cg.yaml")))
	// Amounts are in bytes and queues: the CG's 3 MB of compute DMA are 3 MiB.
	eventually(t, 60*time.Second, "Prometheus has nr1_usage_queues and nr1_allocated_bytes of the example CG", func() error {
		for _, q := range []string{`nr1_usage_queues{pod="resnet50",resource="ai_hypervisor_queue"} == 7`, `nr1_allocated_bytes{pod="resnet50",container="health-handler",resource="compute_dma_memory"} == 3 * 1024 * 1024`} {
			n, err := query(q)
			if err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
			if n != 1 {
				return fmt.Errorf("%s: %d results", q, n)
			}
		}
		return nil
	})

	// Over its allocation and exempt: the agent leaves it, the alert fires.
	labelledNamespace(t, c, "nr1-alert-exempt", map[string]string{exemptLabel: "disabled"})
	exempt := loadPod("alert-exempt", "--queues=10")
	exempt.Namespace = "nr1-alert-exempt"
	running(t, c, createPod(t, c, exempt))
	alertState := func(name string) (string, error) {
		alerts, err := promAlerts(prom)
		if err != nil {
			return "", err
		}
		for _, a := range alerts {
			if a.Labels["alertname"] == name {
				return a.State, nil
			}
		}
		return "", nil
	}
	eventually(t, 90*time.Second, "NR1CGOverAllocation firing", func() error {
		s, err := alertState("NR1CGOverAllocation")
		if err != nil {
			return err
		}
		if s != "firing" {
			return fmt.Errorf("state %q", s)
		}
		return nil
	})
	// Only the CG over its allocation: not the pods given nothing, whose images sit in
	// the docker partition too (the agent's own among them).
	alerts, err := promAlerts(prom)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if a.Labels["alertname"] == "NR1CGOverAllocation" && a.Labels["pod"] != "alert-exempt" {
			t.Errorf("NR1CGOverAllocation for %s/%s (%s)", a.Labels["namespace"], a.Labels["pod"], a.Labels["resource"])
		}
	}

	// A queue hog is killed: the kill alert reaches Alertmanager.
	running(t, c, createPod(t, c, loadPod("alert-hog", "--queues=2", "--step=3s:queues=20")))
	eventually(t, 90*time.Second, "NR1EnforcementKillOrEviction in Alertmanager", func() error {
		var alerts []struct {
			Labels map[string]string `json:"labels"`
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		}
		if err := getJSON("http://"+am+"/api/v2/alerts", &alerts); err != nil {
			return err
		}
		for _, a := range alerts {
			if a.Labels["alertname"] == "NR1EnforcementKillOrEviction" && a.Labels["action"] == "kill" && a.Status.State == "active" {
				return nil
			}
		}
		return fmt.Errorf("%d alerts, none NR1EnforcementKillOrEviction", len(alerts))
	})

	// With CGs measured, one over its allocation and one killed: every panel of the
	// dashboard shows data, and every rule evaluates without error.
	checkDashboard(t, prom, agent.Spec.NodeName)
	checkRules(t, prom, rules)
}

// dashboard is what the panels ask Prometheus, and the values of the resource variable.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// checkDashboard runs each panel's queries as Grafana would for node, for every value
// of the resource variable, and requires each panel to show some series.
func checkDashboard(t *testing.T, prom, node string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "deploy", "helm", "nr1-agent", "files", "nr1-agent.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	// The resource variable's values, as Grafana lists them: a custom variable's list, or
	// label_values of its query.
	resources := []string{""}
	for _, v := range d.Templating.List {
		if v.Name != "resource" {
			continue
		}
		q := fmt.Sprint(v.Query)
		if m, ok := v.Query.(map[string]any); ok {
			q = fmt.Sprint(m["query"])
		}
		if v.Type == "custom" {
			resources = strings.Split(q, ",")
			continue
		}
		metric, label, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(q, "label_values("), ")"), ",")
		if !ok {
			t.Fatalf("the resource variable's query %q is neither a list nor label_values(metric, label)", q)
		}
		var r struct {
			Data []string `json:"data"`
		}
		u := "http://" + prom + "/api/v1/label/" + strings.TrimSpace(label) + "/values?match[]=" + url.QueryEscape(strings.TrimSpace(metric))
		if err := getJSON(u, &r); err != nil || len(r.Data) == 0 {
			t.Fatalf("the resource variable's values (%s): %v %v", q, r.Data, err)
		}
		resources = r.Data
	}
	series := func(q string) (int, error) {
		var r struct {
			Status string `json:"status"`
			Data   struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		err := getJSON("http://"+prom+"/api/v1/query?query="+url.QueryEscape(q), &r)
		return len(r.Data.Result), err
	}
	if len(d.Panels) == 0 {
		t.Fatal("the dashboard has no panel")
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			continue // a row or a text panel
		}
		for _, res := range resources {
			err := func() error {
				var empty []string
				for _, tg := range p.Targets {
					q := strings.NewReplacer("$node", node, "$resource", res, "$__rate_interval", "1m").Replace(tg.Expr)
					n, err := series(q)
					if err != nil {
						return fmt.Errorf("%s: %w", q, err)
					}
					if n > 0 {
						return nil
					}
					empty = append(empty, q)
				}
				return fmt.Errorf("no series from %s", strings.Join(empty, "; "))
			}()
			if err != nil {
				t.Errorf("panel %q (resource %q) shows nothing: %v", p.Title, res, err)
			}
		}
	}
}

// checkRules requires Prometheus to have loaded every rule of the rules file and to have
// evaluated each without error.
func checkRules(t *testing.T, prom, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Count(string(b), "- alert:") + strings.Count(string(b), "- record:")
	var r struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name           string `json:"name"`
					Health         string `json:"health"`
					LastError      string `json:"lastError"`
					LastEvaluation string `json:"lastEvaluation"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := getJSON("http://"+prom+"/api/v1/rules", &r); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			n++
			if rule.Health != "ok" || rule.LastError != "" {
				t.Errorf("rule %s: health %q, %s", rule.Name, rule.Health, rule.LastError)
			}
		}
	}
	if n != want || n == 0 {
		t.Errorf("Prometheus evaluates %d rules, the file holds %d", n, want)
	}
}
