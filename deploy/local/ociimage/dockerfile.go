// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// stage is what the image takes from a final Dockerfile stage.
type stage struct {
	copies []string // destinations of COPY
	labels map[string]string
	// args are the stage's ARGs, with their defaults ("" for none), which its LABELs
	// may name as ${NAME}.
	args       map[string]string
	user       string
	entrypoint []string
}

// parseStage reads the named stage of a Dockerfile: its COPY destinations, ARGs, LABELs
// (key="value"), USER and exec-form ENTRYPOINT. Anything else in the stage is refused, so the offline image can
// never silently differ from the Dockerfile's.
func parseStage(r io.Reader, target string) (stage, error) {
	var (
		st    stage
		in    bool
		found bool
	)
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		word, rest, _ := strings.Cut(line, " ")
		word = strings.ToUpper(word)
		if word == "FROM" {
			f := strings.Fields(rest)
			in = len(f) == 3 && strings.EqualFold(f[1], "AS") && f[2] == target
			if in {
				if f[0] != "scratch" {
					return st, fmt.Errorf("line %d: stage %s must be FROM scratch, got %s", n, target, f[0])
				}
				found = true
			}
			continue
		}
		if !in {
			continue
		}
		switch word {
		case "COPY":
			f := strings.Fields(rest)
			if len(f) < 2 {
				return st, fmt.Errorf("line %d: COPY wants a source and a destination", n)
			}
			st.copies = append(st.copies, f[len(f)-1])
		case "ARG":
			name, def, _ := strings.Cut(strings.TrimSpace(rest), "=")
			if name == "" || strings.ContainsAny(name, " \t\"$") || strings.ContainsAny(def, " \t\"$") {
				return st, fmt.Errorf("line %d: ARG wants NAME or NAME=default, got %s", n, rest)
			}
			if st.args == nil {
				st.args = map[string]string{}
			}
			st.args[name] = def
		case "LABEL":
			if err := parseLabels(rest, &st); err != nil {
				return st, fmt.Errorf("line %d: %w", n, err)
			}
		case "USER":
			st.user = strings.TrimSpace(rest)
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &st.entrypoint); err != nil || len(st.entrypoint) == 0 {
				return st, fmt.Errorf("line %d: ENTRYPOINT must be in exec form, got %s", n, rest)
			}
		default:
			return st, fmt.Errorf("line %d: %s in stage %s is not reproduced by the offline image", n, word, target)
		}
	}
	if err := sc.Err(); err != nil {
		return st, err
	}
	if !found {
		return st, fmt.Errorf("no stage %q", target)
	}
	if len(st.entrypoint) == 0 {
		return st, fmt.Errorf("stage %s has no ENTRYPOINT", target)
	}
	return st, nil
}

// parseLabels reads LABEL's key="value" pairs; a value must be quoted (JSON string
// escapes), so that what the image says is exactly what the Dockerfile says.
func parseLabels(rest string, st *stage) error {
	rest = strings.TrimSpace(rest)
	for rest != "" {
		key, after, ok := strings.Cut(rest, "=")
		if !ok || key == "" || strings.ContainsAny(key, " \t\"") || !strings.HasPrefix(after, `"`) {
			return fmt.Errorf("LABEL wants key=\"value\" pairs, got %s", rest)
		}
		dec := json.NewDecoder(strings.NewReader(after))
		var value string
		if err := dec.Decode(&value); err != nil {
			return fmt.Errorf("LABEL %s: %w", key, err)
		}
		if st.labels == nil {
			st.labels = map[string]string{}
		}
		st.labels[key] = value
		rest = strings.TrimSpace(after[dec.InputOffset():])
	}
	return nil
}

// argRef is a build argument named in a LABEL's value.
var argRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// resolvedLabels are the stage's LABELs with each ${NAME} replaced, as docker build does,
// by the build argument given or else the ARG's default. A name the stage does not
// declare, or declares without a default and is not given, is an error: the label
// would otherwise say something no build meant.
func (st stage) resolvedLabels(buildArgs map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(st.labels))
	var errs []string
	for k, v := range st.labels {
		out[k] = argRef.ReplaceAllStringFunc(v, func(ref string) string {
			name := argRef.FindStringSubmatch(ref)[1]
			def, declared := st.args[name]
			given, ok := buildArgs[name]
			switch {
			case !declared:
				errs = append(errs, fmt.Sprintf("LABEL %s names ${%s}, which the stage declares with no ARG", k, name))
			case ok:
				return given
			case def == "":
				errs = append(errs, fmt.Sprintf("LABEL %s names ${%s}, which has no default and no --build-arg", k, name))
			}
			return def
		})
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return nil, errors.New(strings.Join(errs, "; "))
	}
	return out, nil
}
