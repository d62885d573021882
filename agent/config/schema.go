// SPDX-License-Identifier: Apache-2.0

package config

import (
	"encoding/json"
	"reflect"
	"strings"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// JSONSchema is the configuration file's JSON Schema (draft-07), derived from Config as
// the agent decodes it: every object refuses fields it does not know, a per-resource
// value is an object keyed by the resources' short names, a duration a string. What the
// schema cannot say (ranges, enumerations, paths) Validate still checks at startup.
func JSONSchema() map[string]any {
	return schemaOf(reflect.TypeFor[Config]())
}

var (
	unmarshaler = reflect.TypeFor[json.Unmarshaler]()
	duration    = reflect.TypeFor[Duration]()
)

// DurationPattern is what time.ParseDuration reads: a sign, then numbers each with a
// unit, or 0.
const DurationPattern = `^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`

func schemaOf(t reflect.Type) map[string]any {
	if t == duration {
		return map[string]any{"type": "string", "pattern": DurationPattern, "description": `a duration, such as "5s" or "1m30s"`}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return schemaOf(t.Elem())
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem())}
	case reflect.Array:
		// nr1.PerResource decodes itself from an object keyed by resource.
		if t.Len() == nr1.NumResources && reflect.PointerTo(t).Implements(unmarshaler) {
			props := map[string]any{}
			for _, r := range nr1.All {
				props[r.Short()] = schemaOf(t.Elem())
			}
			return map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		}
		return map[string]any{"type": "array", "items": schemaOf(t.Elem())}
	case reflect.Struct:
		props := map[string]any{}
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			s := schemaOf(f.Type)
			if enum := f.Tag.Get("enum"); enum != "" {
				// What the agent's validation accepts, and nothing else.
				s["enum"] = strings.Split(enum, "|")
			}
			props[name] = s
		}
		return map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	default:
		return map[string]any{}
	}
}
