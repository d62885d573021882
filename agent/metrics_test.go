// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/neureality-sdk/nr1-agent/agent/act/enforce"
	"github.com/neureality-sdk/nr1-agent/agent/act/prevent"
	"github.com/neureality-sdk/nr1-agent/agent/measure/sampler"
	"github.com/neureality-sdk/nr1-agent/agent/observe/inventory"
	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime"
	"github.com/neureality-sdk/nr1-agent/agent/offer/deviceplugin"
	"github.com/neureality-sdk/nr1-agent/agent/offer/statusfit"
	"github.com/neureality-sdk/nr1-agent/metrics"
)

// exported lists every metric name the agent exports, from its collectors' descriptors.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	// Describe reads no state: the collectors need none of their sources here.
	collectors := []prometheus.Collector{
		deviceplugin.NewCollector(nil), sampler.NewCollector(nil, "bpf", "", nil), enforce.NewCollector(nil),
		(&runtime.Watcher{}).ReconnectsCounter(), (&inventory.Builder{}).MismatchesCounter(),
		metrics.NewBuildInfo("v"), metrics.NewStageCollector(nil), prevent.NewCollector(nil, false),
	}
	collectors = append(collectors, statusfit.New(nil, nil, nil).Collectors()...)
	names := map[string]bool{}
	nameRE := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, c := range collectors {
		ch := make(chan *prometheus.Desc, 32)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			names[nameRE.FindStringSubmatch(d.String())[1]] = true
		}
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		names["nr1_sample_duration_seconds"+suffix] = true
		names["nr1_sample_phase_seconds"+suffix] = true
	}
	return names
}

var metricRE = regexp.MustCompile(`\bnr1_[a-z0-9_]+`)

func checkNames(t *testing.T, where string, exprs []string, names map[string]bool) {
	t.Helper()
	if len(exprs) == 0 {
		t.Fatalf("%s: no queries found", where)
	}
	for _, e := range exprs {
		for _, m := range metricRE.FindAllString(e, -1) {
			if !names[m] {
				t.Errorf("%s uses %s, which the agent does not export (query %q)", where, m, e)
			}
		}
	}
}

func TestDashboardUsesOnlyExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("../deploy/grafana/nr1-agent.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []struct {
				Type  string
				Query any
			}
		}
		Panels []struct {
			Title       string
			FieldConfig struct{ Defaults struct{ Unit string } }
			Targets     []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var exprs []string
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(string); ok && v.Type == "query" {
			exprs = append(exprs, q)
		}
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		// A panel of amounts shows them in their unit: bytes as Grafana's IEC bytes,
		// queues as a count; never both on one axis.
		units := map[string]bool{}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			for _, m := range amountRE.FindAllStringSubmatch(tg.Expr, -1) {
				units[m[1]] = true
			}
		}
		unit := p.FieldConfig.Defaults.Unit
		switch {
		case units["bytes"] && units["queues"]:
			t.Errorf("panel %q shows bytes and queues together", p.Title)
		case units["bytes"] && unit != "bytes":
			t.Errorf("panel %q shows bytes in unit %q, not bytes", p.Title, unit)
		case units["queues"] && unit != "short" && unit != "none":
			t.Errorf("panel %q shows queues in unit %q, not a count", p.Title, unit)
		}
	}
	checkNames(t, "dashboard", exprs, exported(t))
}

// amountRE finds the NR1 amounts a query reads, by the unit their family ends with.
var amountRE = regexp.MustCompile(`\bnr1_[a-z0-9_]+_(bytes|queues)\b`)

func TestAlertRules(t *testing.T) {
	const rules = "../deploy/prometheus/nr1-agent.rules.yaml"
	b, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	checkNames(t, "alert rules", exprs, exported(t))

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install Debian's prometheus package (make deps)")
	}
	for _, args := range [][]string{{"check", "rules", rules}, {"test", "rules", "../deploy/prometheus/nr1-agent.rules.test.yaml"}} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
