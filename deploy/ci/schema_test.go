// SPDX-License-Identifier: Apache-2.0

package ci

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/internal/golden"
)

// chartSchema is the chart's values.schema.json: every value the chart reads, and no
// other (a misspelt key anywhere fails helm install, not silently); its config value is
// the agent's configuration file, held to the schema of the type the agent decodes it
// into, with the values the agent's validation accepts, so that a mistake fails helm
// install, not every node's agent at startup; and what one value needs of another.
func chartSchema() ([]byte, error) {
	cfg := config.JSONSchema()
	cfg["description"] = "The agent's configuration file (README, Configuration); every key is the agent's own."
	str := obj("type", "string")
	boolean := obj("type", "boolean")
	stringMap := obj("type", "object", "additionalProperties", str)
	quantity := obj("anyOf", []any{
		obj("type", "string", "pattern", `^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?[0-9]+)?$`),
		obj("type", "number"),
	}, "description", `a Kubernetes quantity, such as "50m", "64Mi" or 1`)
	// A standard resource's name, or an extended one's (a domain, then a name).
	resourceName := obj("pattern", `^(cpu|memory|ephemeral-storage|hugepages-[0-9]+[KMG]i|[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?)$`)
	resources := obj("type", "object", "additionalProperties", quantity, "propertyNames", resourceName)
	schema := map[string]any{
		"$schema":              "http://json-schema.org/draft-07/schema#",
		"title":                "nr1-agent chart values",
		"type":                 "object",
		"additionalProperties": false,
		"properties": map[string]any{
			"namespace": closed(map[string]any{"create": boolean}),
			"image": closed(map[string]any{
				"repository": obj("type", "string", "minLength", 1),
				"tag":        str,
				"pullPolicy": obj("enum", []string{"Always", "IfNotPresent", "Never"}),
			}),
			"config":          cfg,
			"dra":             closed(map[string]any{"enabled": boolean}),
			"admissionPolicy": boolean,
			"networkPolicy": closed(map[string]any{
				"enabled":             boolean,
				"monitoringNamespace": obj("type", "string", "pattern", `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`),
				"apiServerCIDRs":      obj("type", "array", "items", obj("type", "string", "pattern", `^[0-9a-fA-F.:]+/[0-9]{1,3}$`)),
			}),
			"imagePullSecrets": obj("type", "array", "items", obj("type", "object", "required", []string{"name"},
				"properties", map[string]any{"name": obj("type", "string", "minLength", 1)}, "additionalProperties", false)),
			"affinity": obj("type", "object", "description", "a pod's affinity (nodeAffinity, podAffinity, podAntiAffinity)", "additionalProperties", false,
				"properties", map[string]any{"nodeAffinity": obj("type", "object"), "podAffinity": obj("type", "object"), "podAntiAffinity": obj("type", "object")}),
			"podAnnotations": stringMap,
			"updateStrategy": obj("type", "object", "additionalProperties", false, "properties", map[string]any{
				"type":          obj("enum", []string{"RollingUpdate", "OnDelete"}),
				"rollingUpdate": closed(map[string]any{"maxUnavailable": obj("type", []string{"integer", "string"}), "maxSurge": obj("type", []string{"integer", "string"})}),
			}),
			"nodeFeatureRule": nodeFeatureRuleSchema(),
			"nodeSelector":    stringMap,
			"tolerations": obj("type", "array", "items", closed(map[string]any{
				"key":               str,
				"operator":          obj("enum", []string{"Exists", "Equal"}),
				"value":             str,
				"effect":            obj("enum", []string{"", "NoSchedule", "PreferNoSchedule", "NoExecute"}),
				"tolerationSeconds": obj("type", "integer"),
			})),
			"resources":         closed(map[string]any{"requests": resources, "limits": resources}),
			"priorityClassName": str,
			"nameOverride":      obj("type", "string", "pattern", `^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$`, "maxLength", 40),
			"fullnameOverride":  obj("type", "string", "pattern", `^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$`, "maxLength", 40),
			"extraEnv": obj("type", "array", "items", obj("type", "object", "required", []string{"name"},
				"properties", map[string]any{"name": obj("type", "string", "minLength", 1), "value": str, "valueFrom": obj("type", "object")},
				"additionalProperties", false)),
			"extraHostPaths": obj("type", "array", "items", obj("type", "object", "required", []string{"name", "path"},
				"properties", map[string]any{"name": obj("type", "string", "pattern", `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`), "path": obj("type", "string", "pattern", "^/")},
				"additionalProperties", false)),
			"dnsPolicy": obj("enum", []string{"", "ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"}),
			"prometheus": closed(map[string]any{
				"serviceMonitor":   boolean,
				"rules":            boolean,
				"additionalLabels": stringMap,
			}),
			"grafana": closed(map[string]any{
				"dashboard": boolean,
				"namespace": str,
				"labels":    stringMap,
			}),
		},
		// DRA mode needs the chart's DRA objects (DeviceClass, RBAC, admission policy).
		"if":   obj("required", []string{"config"}, "properties", map[string]any{"config": obj("required", []string{"mode"}, "properties", map[string]any{"mode": obj("const", "dra")})}),
		"then": obj("required", []string{"dra"}, "properties", map[string]any{"dra": obj("required", []string{"enabled"}, "properties", map[string]any{"enabled": obj("const", true, "description", "config.mode dra needs dra.enabled: true (the NR1's DeviceClass and the DRA driver's RBAC)")})}),
	}
	b, err := json.MarshalIndent(schema, "", "  ")
	return append(b, '\n'), err
}

// obj is a schema of key, value pairs.
func obj(kv ...any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1] //nolint:forcetypeassert // keys are the literals above
	}
	return m
}

// closed is an object of these properties and no other.
func closed(props map[string]any) map[string]any {
	return obj("type", "object", "properties", props, "additionalProperties", false)
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
