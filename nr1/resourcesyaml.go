// SPDX-License-Identifier: Apache-2.0

package nr1

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// ParseResourcesYAML reads the resources.yaml the NR1 toolchain writes beside a compute
// graph: a mapping of every resource, by its full name, to a whole number, each once.
// The YAML is read by a YAML parser (comments, quoting, any layout YAML allows); what
// it says is held to that form here. Errors name the line and the reason.
func ParseResourcesYAML(r io.Reader) (Amounts, error) {
	dec := yaml.NewDecoder(r)
	var doc, more yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return Amounts{}, fmt.Errorf("resources.yaml: %w", err)
	}
	// One document: what follows the first (a second one, or text the first's layout
	// left out) is refused, not ignored.
	switch err := dec.Decode(&more); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return Amounts{}, fmt.Errorf("resources.yaml: %w", err)
	default:
		return Amounts{}, fmt.Errorf("resources.yaml line %d: a second document", more.Line)
	}
	var (
		amounts Amounts
		seen    PerResource[int] // line of first occurrence, 0 when unseen
	)
	if len(doc.Content) > 0 {
		m := doc.Content[0]
		if m.Kind != yaml.MappingNode {
			return Amounts{}, fmt.Errorf("resources.yaml line %d: want a mapping of resource names to integers", m.Line)
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			key, value := m.Content[i], m.Content[i+1]
			res, n, err := resourceEntry(key, value)
			if err != nil {
				return Amounts{}, fmt.Errorf("resources.yaml line %d: %w", key.Line, err)
			}
			if first := seen[res]; first != 0 {
				return Amounts{}, fmt.Errorf("resources.yaml line %d: %s repeats line %d", key.Line, res.Name(), first)
			}
			seen[res] = key.Line
			amounts[res] = n
		}
	}
	for _, res := range All {
		if seen[res] == 0 {
			return Amounts{}, fmt.Errorf("resources.yaml: %s is missing", res.Name())
		}
	}
	return amounts, nil
}

// resourceEntry is one "name: integer" entry of resources.yaml.
func resourceEntry(key, value *yaml.Node) (Resource, Units, error) {
	if key.Kind != yaml.ScalarNode {
		return 0, 0, errors.New(`want "name: integer"`)
	}
	res, err := ParseResource(key.Value)
	if err != nil || res.Name() != key.Value {
		return 0, 0, fmt.Errorf("unknown resource name %q", key.Value)
	}
	if value.Kind != yaml.ScalarNode || value.Tag == "!!null" {
		return 0, 0, fmt.Errorf(`%s: want "name: integer"`, key.Value)
	}
	n, err := strconv.ParseInt(value.Value, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: value %q is not an integer", key.Value, value.Value)
	}
	if n < 0 {
		return 0, 0, fmt.Errorf("%s: value %d is negative", key.Value, n)
	}
	return res, Units(n), nil
}

// FormatResourcesYAML writes amounts in the form ParseResourcesYAML reads.
func FormatResourcesYAML(a Amounts) string {
	var b strings.Builder
	for _, r := range All {
		fmt.Fprintf(&b, "%s: %d\n", r.Name(), a[r])
	}
	return b.String()
}
