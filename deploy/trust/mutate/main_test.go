// SPDX-License-Identifier: Apache-2.0

package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every mutant applies to the tree as it is, and the mutated agent still builds: a
// mutant the code moved away from, or one that no longer compiles, fails here, in make
// test, not in make trust-mutants.
func TestMutantsApplyAndBuild(t *testing.T) {
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	// The go tool builds and runs the generators (bpf2go) for the machine it runs on:
	// a GOARCH this test was built with (make test-arm64) would have them built for a
	// machine that is only emulated here.
	t.Setenv("GOARCH", "")
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			if slices.ContainsFunc(m.changes, func(c change) bool { return strings.HasSuffix(c.file, ".bpf.c") }) {
				buildsWhole(t, repo, m.name)
				return
			}
			dir := t.TempDir()
			for _, c := range m.changes {
				b, err := os.ReadFile(filepath.Join(repo, c.file))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(c.file)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, c.file), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := apply(m.name, dir); err != nil {
				t.Fatal(err)
			}
			// The mutated files built in place of the real ones, in the module: an overlay.
			overlay := map[string]string{}
			for _, c := range m.changes {
				overlay[filepath.Join(repo, c.file)] = filepath.Join(dir, c.file)
			}
			var b strings.Builder
			b.WriteString(`{"Replace":{`)
			first := true
			for from, to := range overlay {
				if !first {
					b.WriteString(",")
				}
				first = false
				b.WriteString(`"` + from + `":"` + to + `"`)
			}
			b.WriteString("}}")
			ov := filepath.Join(dir, "overlay.json")
			if err := os.WriteFile(ov, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("go", "build", "-overlay", ov, "-o", os.DevNull, "./cmd/nr1-agent")
			cmd.Dir = repo
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("the %s agent does not build: %v\n%s", m.name, err, out)
			}
		})
	}
	if err := apply("no-such-mutant", t.TempDir()); err == nil {
		t.Error("an unknown mutant applied")
	}
}

// buildsWhole applies a mutant of the BPF programs' C to a copy of the tree (without
// its build outputs), as make trust-mutants does (apply generates the objects from the C,
// with clang), and builds the agent there: the objects are embedded, which no overlay
// replaces.
func buildsWhole(t *testing.T, repo, name string) {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repo, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel == ".git" || rel == "_output" || rel == "bin" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(name, dir); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", os.DevNull, "./cmd/nr1-agent")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the %s agent does not build: %v\n%s", name, err, out)
	}
}
