// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
	"github.com/grafana/grafana-foundation-sdk/go/units"
)

// datasource is the dashboard's own variable, so that one dashboard serves whichever
// Prometheus the user picks.
var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// query is one series of a panel: its PromQL and the name each series is shown by.
type query struct{ expr, legend string }

// panel is one time series panel at its place on the grid (24 columns wide).
type panel struct {
	id          uint32
	title, unit string
	x, y, w, h  uint32
	queries     []query
}

// The panels in the order the dashboard has always listed them; their ids stay the
// same so that links to a panel (viewPanel=ID) keep working.
var panels = []panel{
	{id: 1, title: "Node: capacity, allocated, used ($resource)", unit: units.BytesIEC, x: 0, y: 0, w: 12, h: 8, queries: []query{
		{`sum by (instance) (nr1_capacity_bytes{instance=~"$node", resource="$resource"})`, "{{instance}} capacity"},
		{`sum by (instance) (nr1_allocatable_bytes{instance=~"$node", resource="$resource"})`, "{{instance}} allocatable"},
		{`sum by (instance) (nr1_cg_allocated_bytes{instance=~"$node", resource="$resource"})`, "{{instance}} allocated"},
		{`sum by (instance) (nr1_cg_usage_bytes{instance=~"$node", resource="$resource"}) + sum by (instance) (nr1_unattributed_usage_bytes{instance=~"$node", resource="$resource"})`, "{{instance}} used"},
	}},
	{id: 2, title: "Per CG: usage against allocation ($resource)", unit: units.BytesIEC, x: 12, y: 0, w: 12, h: 8, queries: []query{
		{`sum by (namespace, pod) (nr1_cg_usage_bytes{instance=~"$node", resource="$resource"})`, "{{namespace}}/{{pod}} used"},
		{`sum by (namespace, pod) (nr1_cg_allocated_bytes{instance=~"$node", resource="$resource"})`, "{{namespace}}/{{pod}} allocated"},
	}},
	{id: 8, title: "Node: capacity, allocated, used (queues)", unit: units.Short, x: 0, y: 8, w: 12, h: 8, queries: []query{
		{`sum by (instance) (nr1_capacity_queues{instance=~"$node"})`, "{{instance}} capacity"},
		{`sum by (instance) (nr1_allocatable_queues{instance=~"$node"})`, "{{instance}} allocatable"},
		{`sum by (instance) (nr1_cg_allocated_queues{instance=~"$node"})`, "{{instance}} allocated"},
		{`sum by (instance) (nr1_cg_usage_queues{instance=~"$node"}) + sum by (instance) (nr1_unattributed_usage_queues{instance=~"$node"})`, "{{instance}} used"},
	}},
	{id: 9, title: "Per CG: usage against allocation (queues)", unit: units.Short, x: 12, y: 8, w: 12, h: 8, queries: []query{
		{`sum by (namespace, pod) (nr1_cg_usage_queues{instance=~"$node"})`, "{{namespace}}/{{pod}} used"},
		{`sum by (namespace, pod) (nr1_cg_allocated_queues{instance=~"$node"})`, "{{namespace}}/{{pod}} allocated"},
	}},
	{id: 3, title: "CGs over their allocation", unit: units.PercentUnit, x: 0, y: 16, w: 12, h: 8, queries: []query{
		{`sort_desc(nr1_usage_ratio{instance=~"$node"} > 1)`, "{{namespace}}/{{pod}} {{resource}}"},
	}},
	{id: 4, title: "Enforcement actions", unit: units.Short, x: 12, y: 16, w: 12, h: 8, queries: []query{
		{`sum by (action, dry_run) (increase(nr1_enforcement_actions_total{instance=~"$node"}[$__rate_interval]))`, "{{action}} (dry-run {{dry_run}})"},
		{`sum by (action) (increase(nr1_enforcement_failures_total{instance=~"$node"}[$__rate_interval]))`, "{{action}} failed"},
		{`sum by (resource) (increase(nr1_limit_breaches_total{instance=~"$node"}[$__rate_interval]))`, "{{resource}} breaches"},
	}},
	{id: 5, title: "Unattributed usage (bytes)", unit: units.BytesIEC, x: 0, y: 24, w: 6, h: 8, queries: []query{
		{`nr1_unattributed_usage_bytes{instance=~"$node"}`, "{{instance}} {{resource}}"},
	}},
	{id: 10, title: "Unattributed usage (queues)", unit: units.Short, x: 6, y: 24, w: 6, h: 8, queries: []query{
		{`nr1_unattributed_usage_queues{instance=~"$node"}`, "{{instance}} {{resource}}"},
	}},
	{id: 6, title: "Agent: scan time (p50, p99)", unit: units.Seconds, x: 12, y: 24, w: 6, h: 8, queries: []query{
		{`histogram_quantile(0.5, sum by (le, instance) (rate(nr1_sample_duration_seconds_bucket{instance=~"$node"}[$__rate_interval])))`, "{{instance}} p50"},
		{`histogram_quantile(0.99, sum by (le, instance) (rate(nr1_sample_duration_seconds_bucket{instance=~"$node"}[$__rate_interval])))`, "{{instance}} p99"},
	}},
	{id: 7, title: "Agent: health", unit: units.Short, x: 18, y: 24, w: 6, h: 8, queries: []query{
		{`min by (instance) (nr1_device_healthy{instance=~"$node"})`, "{{instance}} NR1 healthy"},
		{`min by (instance) (nr1_device_plugin_registered{instance=~"$node"})`, "{{instance}} plugins registered"},
		{`nr1_footprint_source{instance=~"$node"}`, "{{instance}} source {{source}}"},
		{`increase(nr1_runtime_reconnects_total{instance=~"$node"}[$__rate_interval])`, "{{instance}} runtime reconnects"},
		{`nr1_build_info{instance=~"$node"}`, "{{instance}} {{version}}"},
	}},
	{id: 11, title: "Prevention: the budget gate", unit: units.Short, x: 0, y: 32, w: 24, h: 8, queries: []query{
		{`sum by (namespace, pod) (increase(nr1_gate_refused_total{instance=~"$node"}[$__rate_interval]))`, "{{namespace}}/{{pod}} opens refused"},
		{`sum by (instance) (increase(nr1_gate_false_refusals_total{instance=~"$node"}[$__rate_interval]))`, "{{instance}} refused within the booking"},
		{`sum by (instance, outcome) (increase(nr1_gate_unknown_opens_total{instance=~"$node"}[$__rate_interval]))`, "{{instance}} booking not known yet: {{outcome}}"},
		{`nr1_gate_mismatch{instance=~"$node"} != 0`, "{{namespace}}/{{pod}} count − measured"},
		{`nr1_gate_enabled{instance=~"$node"}`, "{{instance}} gate loaded (prevention configured {{configured}})"},
	}},
}

// resources are the NR1 amounts measured in bytes, which the panels of bytes show one
// at a time; the queues have panels of their own, in another unit.
const resources = "compute_dma_memory,cpu_dma_memory,docker_partition"

// build uses the classic dashboard model, which the SDK marks deprecated in favour of
// the v2 schema: the classic JSON is what Grafana imports and provisions from a file or
// the dashboard sidecar's ConfigMap in every version, the v2 resource only recent ones.
func build() (dashboard.Dashboard, error) { //nolint:staticcheck // the classic model, as above
	d := dashboard.NewDashboardBuilder("NR1 resources") //nolint:staticcheck // the classic model, as above
	d.Uid("nr1-agent").
		Tags([]string{"nr1", "neureality"}).
		Version(1).
		Editable().
		// Empty: each viewer's own time zone preference, rather than the SDK's
		// "browser", which would override it.
		Timezone("").
		Time("now-1h", "now").
		Refresh("10s").
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").
			Label("Data source").
			Type("prometheus")).
		WithVariable(dashboard.NewQueryVariableBuilder("node").
			Label("Node").
			Datasource(datasource).
			Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(nr1_capacity_bytes, instance)")}).
			IncludeAll(true).
			Multi(true)).
		WithVariable(dashboard.NewCustomVariableBuilder("resource").
			Label("Resource (bytes)").
			Values(dashboard.StringOrMap{String: cog.ToPtr(resources)}).
			Current(dashboard.VariableOption{
				Text:  dashboard.StringOrArrayOfString{String: cog.ToPtr("compute_dma_memory")},
				Value: dashboard.StringOrArrayOfString{String: cog.ToPtr("compute_dma_memory")},
			}))
	for _, p := range panels {
		d.WithPanel(p.builder())
	}
	return d.Build()
}

func (p panel) builder() *timeseries.PanelBuilder {
	b := timeseries.NewPanelBuilder().
		Id(p.id).
		Title(p.title).
		Datasource(datasource).
		GridPos(dashboard.GridPos{X: p.x, Y: p.y, W: p.w, H: p.h}).
		Unit(p.unit).
		// Grafana's own defaults for a panel that names none; the SDK's would hide the
		// legend, which names each series.
		Legend(common.NewVizLegendOptionsBuilder().
			DisplayMode(common.LegendDisplayModeList).
			Placement(common.LegendPlacementBottom).
			ShowLegend(true).
			Calcs([]string{})).
		Tooltip(common.NewVizTooltipOptionsBuilder().
			Mode(common.TooltipDisplayModeSingle).
			Sort(common.SortOrderNone))
	for i, q := range p.queries {
		b.WithTarget(prometheus.NewDataqueryBuilder().
			RefId(string(rune('A' + i))).
			Expr(q.expr).
			LegendFormat(q.legend).
			Datasource(datasource))
	}
	return b
}

// render is the dashboard as the chart ships it.
func render() ([]byte, error) {
	d, err := build()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return unescapeHTML(buf.Bytes()), nil
}

// unescapeHTML turns the \u003c, \u003e and \u0026 escapes back into <, > and &: the
// SDK's own MarshalJSON methods escape them whatever the encoder is told, and a query
// (`nr1_usage_ratio > 1`) reads better as written. Every backslash in JSON starts an
// escape inside a string, so taking escapes whole leaves an escaped backslash followed
// by "u003e" as it is.
func unescapeHTML(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 == len(b) {
			out = append(out, b[i])
			continue
		}
		if i+6 <= len(b) {
			switch string(b[i : i+6]) {
			case `\u003c`:
				out, i = append(out, '<'), i+5
				continue
			case `\u003e`:
				out, i = append(out, '>'), i+5
				continue
			case `\u0026`:
				out, i = append(out, '&'), i+5
				continue
			}
		}
		out, i = append(out, b[i], b[i+1]), i+1
	}
	return out
}
