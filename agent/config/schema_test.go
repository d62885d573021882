// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"
)

// The schema's enums are exactly what the agent's validation accepts: each value of an
// enum passes, a value beside them is refused, so that helm refuses what every node's
// agent would refuse at startup, and nothing it would accept.
func TestSchemaEnumsAreWhatTheAgentAccepts(t *testing.T) {
	schema := JSONSchema()
	for _, c := range []struct {
		path []string // in the schema, "[]" for an array's items
		doc  string   // the configuration with the value at %q
	}{
		{[]string{"mode"}, `{"mode":%q}`},
		{[]string{"log", "level"}, `{"log":{"level":%q}}`},
		{[]string{"log", "format"}, `{"log":{"format":%q}}`},
		{[]string{"sampling", "source"}, `{"sampling":{"source":%q}}`},
		{[]string{"enforcement", "mode"}, `{"enforcement":{"mode":%q}}`},
		{[]string{"enforcement", "noAllocation"}, `{"enforcement":{"noAllocation":%q}}`},
		{[]string{"enforcement", "killScope"}, `{"enforcement":{"killScope":%q}}`},
		{[]string{"enforcement", "resources", "compute_dma_memory", "ladder", "[]", "action"}, `{"enforcement":{"resources":{"compute_dma_memory":{"ladder":[{"action":%q,"after":"0s"}]}}}}`},
		{[]string{"enforcement", "selfUncertain", "ladder", "[]", "action"}, `{"enforcement":{"selfUncertain":{"ladder":[{"action":%q,"after":"0s"}]}}}`},
	} {
		s := schema
		for _, p := range c.path {
			if p == "[]" {
				s = s["items"].(map[string]any) //nolint:forcetypeassert // the schema's own shape
				continue
			}
			s = s["properties"].(map[string]any)[p].(map[string]any) //nolint:forcetypeassert // the schema's own shape
		}
		enum, _ := s["enum"].([]string)
		if len(enum) == 0 {
			t.Errorf("%v: no enum in the schema", c.path)
			continue
		}
		for _, v := range append(slices.Clone(enum), "x"+enum[0], "") {
			cfg := Default()
			err := cfg.decodeStrict([]byte(fmt.Sprintf(c.doc, v)))
			if err == nil {
				err = cfg.Validate()
			}
			if accepted := err == nil; accepted != slices.Contains(enum, v) {
				t.Errorf("%v = %q: the agent says %v, the schema's enum %v", c.path, v, err, enum)
			}
		}
	}
}

// The schema's duration pattern matches what the agent parses, and nothing else.
func TestSchemaDurationPattern(t *testing.T) {
	re := regexp.MustCompile(DurationPattern)
	for _, d := range []string{"5s", "1m30s", "0", "1.5h", "-3ms", ".5s", "2h45m0.5s", "1µs", "+4us", "100ns",
		"5", "5parsecs", "1d", "", "s", "1.s", "0s", "--1s", "1h-5m", " 5s", "5s "} {
		_, err := time.ParseDuration(d)
		if parsed := err == nil; parsed != re.MatchString(d) {
			t.Errorf("%q: parsed %v (%v), the pattern matches %v", d, parsed, err, !parsed)
		}
	}
}
