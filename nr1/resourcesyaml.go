// SPDX-License-Identifier: Apache-2.0

package nr1

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ParseResourcesYAML reads the resources.yaml the NR1 toolchain writes beside a compute
// graph: one "name: integer" line per resource, names in full form, every resource once.
// Comments (#) and blank lines are allowed; keys and values may be quoted. Errors name
// the line and the reason.
func ParseResourcesYAML(r io.Reader) (Amounts, error) {
	var (
		amounts Amounts
		seen    PerResource[int] // line of first occurrence, 0 when unseen
	)
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := stripComment(sc.Text())
		if strings.TrimSpace(text) == "" {
			continue
		}
		res, n, err := parseResourceLine(text)
		if err != nil {
			return Amounts{}, fmt.Errorf("resources.yaml line %d: %w", line, err)
		}
		if first := seen[res]; first != 0 {
			return Amounts{}, fmt.Errorf("resources.yaml line %d: %s repeats line %d", line, res.Name(), first)
		}
		seen[res] = line
		amounts[res] = n
	}
	if err := sc.Err(); err != nil {
		return Amounts{}, fmt.Errorf("resources.yaml: %w", err)
	}
	for _, res := range All {
		if seen[res] == 0 {
			return Amounts{}, fmt.Errorf("resources.yaml: %s is missing", res.Name())
		}
	}
	return amounts, nil
}

func parseResourceLine(text string) (Resource, Units, error) {
	if text != strings.TrimLeft(text, " \t") {
		return 0, 0, fmt.Errorf("unexpected indentation: want top-level \"name: integer\"")
	}
	key, value, ok := strings.Cut(text, ": ")
	if !ok {
		key, value, ok = strings.Cut(text, ":")
		if !ok || strings.TrimSpace(value) == "" {
			return 0, 0, fmt.Errorf("want \"name: integer\", got %q", text)
		}
	}
	key, value = unquote(strings.TrimSpace(key)), unquote(strings.TrimSpace(value))
	res, err := ParseResource(key)
	if err != nil || res.Name() != key {
		return 0, 0, fmt.Errorf("unknown resource name %q", key)
	}
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: value %q is not an integer", key, value)
	}
	if n < 0 {
		return 0, 0, fmt.Errorf("%s: value %d is negative", key, n)
	}
	return res, Units(n), nil
}

// stripComment removes a YAML comment: a # at the start or after white space.
func stripComment(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t') {
			return strings.TrimRight(s[:i], " \t")
		}
	}
	return strings.TrimRight(s, " \t\r")
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"' || s[0] == '\'' && s[len(s)-1] == '\'') {
		return s[1 : len(s)-1]
	}
	return s
}

// FormatResourcesYAML writes amounts in the form ParseResourcesYAML reads.
func FormatResourcesYAML(a Amounts) string {
	var b strings.Builder
	for _, r := range All {
		fmt.Fprintf(&b, "%s: %d\n", r.Name(), a[r])
	}
	return b.String()
}
