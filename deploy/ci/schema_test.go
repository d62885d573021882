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
		"properties": map[string]any{"config": cfg},
	}
	b, err := json.MarshalIndent(schema, "", "  ")
	return append(b, '\n'), err
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
