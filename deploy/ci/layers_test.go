// SPDX-License-Identifier: Apache-2.0

package ci

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/neureality-sdk/nr1-agent/"

// layer is one line of ARCHITECTURE.md's Layers: the packages it names (a trailing /*
// names every package below a directory), what they may import of the project, and
// what they must not link at all, even through another package.
type layer struct {
	line      int
	packages  []string
	imports   []string
	forbidden []string
}

// pkg is one package of the project as go list sees it, without its tests' imports:
// tests may read what the package itself must not link.
type pkg struct {
	path    string // relative to the module
	imports []string
	deps    []string // every package linked, the standard library's and modules' too
}

// parseLayers reads the Layers block of ARCHITECTURE.md: one line per layer, top to
// bottom, `packages → imports ! forbidden`.
func parseLayers(doc string) ([]layer, error) {
	_, after, ok := strings.Cut(doc, "\n## Layers\n")
	if !ok {
		return nil, fmt.Errorf("no Layers section")
	}
	_, block, ok := strings.Cut(after, "```\n")
	if !ok {
		return nil, fmt.Errorf("Layers: no code block")
	}
	block, _, _ = strings.Cut(block, "```")
	var layers []layer
	sc := bufio.NewScanner(strings.NewReader(block))
	for n := 1; sc.Scan(); n++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		if strings.TrimSpace(text) == "" {
			continue
		}
		names, rest, ok := strings.Cut(text, "→")
		if !ok {
			return nil, fmt.Errorf("Layers line %d: no →: %q", n, sc.Text())
		}
		allowed, forbidden, _ := strings.Cut(rest, "!")
		l := layer{line: n, packages: strings.Fields(names), imports: strings.Fields(allowed), forbidden: strings.Fields(forbidden)}
		if len(l.packages) == 0 {
			return nil, fmt.Errorf("Layers line %d: no package: %q", n, sc.Text())
		}
		layers = append(layers, l)
	}
	return layers, sc.Err()
}

// matches says whether pattern names p: the package itself, or with /* any package below.
func matches(pattern, p string) bool {
	if dir, ok := strings.CutSuffix(pattern, "/*"); ok {
		return strings.HasPrefix(p, dir+"/")
	}
	return pattern == p
}

// layerOf is the index of the layer naming p, or -1.
func layerOf(layers []layer, p string) int {
	for i, l := range layers {
		for _, name := range l.packages {
			if matches(name, p) {
				return i
			}
		}
	}
	return -1
}

// checkLayers returns every way pkgs break layers: a package no layer names, an import
// its layer does not name or of a package not strictly below it, a forbidden link.
func checkLayers(layers []layer, pkgs []pkg) []string {
	var bad []string
	for _, p := range pkgs {
		i := layerOf(layers, p.path)
		if i < 0 {
			bad = append(bad, fmt.Sprintf("%s: on no line of Layers", p.path))
			continue
		}
		l := layers[i]
		for _, imp := range p.imports {
			if !slices.ContainsFunc(l.imports, func(pattern string) bool { return matches(pattern, imp) }) {
				bad = append(bad, fmt.Sprintf("%s imports %s, which its line (%d) does not name", p.path, imp, l.line))
			}
			if j := layerOf(layers, imp); j <= i {
				bad = append(bad, fmt.Sprintf("%s imports %s, which is not below it", p.path, imp))
			}
		}
		for _, f := range l.forbidden {
			for _, d := range p.deps {
				if d == f || strings.HasPrefix(d, f+"/") {
					bad = append(bad, fmt.Sprintf("%s links %s, which its line (%d) forbids", p.path, d, l.line))
					break
				}
			}
		}
	}
	return bad
}

// projectPackages lists the module's packages with go list.
func projectPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .Deps \" \"}}", "./...")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Split(line, "|")
		p := pkg{path: strings.TrimPrefix(fields[0], module), deps: strings.Fields(fields[2])}
		for _, imp := range strings.Fields(fields[1]) {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				p.imports = append(p.imports, rel)
			}
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestLayersAsBuilt holds the project to ARCHITECTURE.md's Layers, so that neither can
// drift from the other.
func TestLayersAsBuilt(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repo, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	layers, err := parseLayers(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	pkgs := projectPackages(t)
	for _, bad := range checkLayers(layers, pkgs) {
		t.Error(bad)
	}
	// A line naming what does not exist is as false as a missing one.
	for _, l := range layers {
		for _, name := range slices.Concat(l.packages, l.imports) {
			if !slices.ContainsFunc(pkgs, func(p pkg) bool { return matches(name, p.path) }) {
				t.Errorf("Layers line %d names %s, which is no package", l.line, name)
			}
		}
	}
}

func TestLayersRefuseABackEdge(t *testing.T) {
	layers, err := parseLayers("# A\n\n## Layers\n\n```\ntop → mid\nmid → low ! example.com/kernel\nlow →\nleaf/* →\n```\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pkgs []pkg
		want string
	}{
		{"as drawn", []pkg{{path: "top", imports: []string{"mid"}}, {path: "mid", imports: []string{"low"}}, {path: "low"}, {path: "leaf/a"}}, ""},
		{"back edge", []pkg{{path: "low", imports: []string{"mid"}}}, "low imports mid, which its line (3) does not name"},
		{"named but above", []pkg{{path: "mid", imports: []string{"top"}}}, "mid imports top, which is not below it"},
		{"forbidden link", []pkg{{path: "mid", deps: []string{"example.com/kernel/sub"}}}, "mid links example.com/kernel/sub, which its line (2) forbids"},
		{"unplaced", []pkg{{path: "leaf"}}, "leaf: on no line of Layers"},
	} {
		got := checkLayers(layers, tc.pkgs)
		if tc.want == "" && len(got) > 0 || tc.want != "" && !slices.Contains(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
