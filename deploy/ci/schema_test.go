// SPDX-License-Identifier: Apache-2.0

package ci

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/internal/golden"
)

// chartSchema is the chart's values.schema.json: its config value is the agent's
// configuration file, held to the schema of the type the agent decodes it into, so that
// a misspelt key fails helm install, not every node's agent at startup.
func chartSchema() ([]byte, error) {
	cfg := config.JSONSchema()
	cfg["description"] = "The agent's configuration file (README, Configuration); every key is the agent's own."
	schema := map[string]any{
		"$schema":    "http://json-schema.org/draft-07/schema#",
		"title":      "nr1-agent chart values",
		"type":       "object",
		"properties": map[string]any{"config": cfg, "nodeFeatureRule": nodeFeatureRuleSchema()},
	}
	b, err := json.MarshalIndent(schema, "", "  ")
	return append(b, '\n'), err
}

// nodeFeatureRuleSchema holds the NR1's PCI IDs to what NFD compares them with: four
// lower-case hexadecimal digits, as sysfs writes them without their 0x.
func nodeFeatureRuleSchema() map[string]any {
	id := map[string]any{"type": "string", "pattern": "^[0-9a-f]{4}$"}
	return map[string]any{
		"type":                 "object",
		"additionalProperties": false,
		"properties": map[string]any{
			"enabled": map[string]any{"type": "boolean"},
			"pci": map[string]any{
				"type":                 "object",
				"additionalProperties": false,
				"properties": map[string]any{
					"vendor":  map[string]any{"anyOf": []any{id, map[string]any{"const": ""}}},
					"devices": map[string]any{"type": "array", "items": id},
				},
			},
		},
	}
}

// TestChartSchemaIsTheConfigurations: the committed values.schema.json is what the
// configuration type gives (go test -run TestChartSchemaIsTheConfigurations -update
// rewrites it).
func TestChartSchemaIsTheConfigurations(t *testing.T) {
	got, err := chartSchema()
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join(repo, "deploy", "helm", "nr1-agent", "values.schema.json"), got)
}
