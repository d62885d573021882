// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const version = "v0.1.0-dev.1a2b3c4"

// entry is one file of a test archive.
type entry struct {
	name string
	mode int64
	typ  byte
}

var plugin3 = []entry{{"LICENSE", 0o644, tar.TypeReg}, {"kubectl-nr1", 0o755, tar.TypeReg}, {"kubectl_complete-nr1", 0o755, tar.TypeReg}}

// archive writes an archive named for os and arch holding entries, as make dist does.
func archive(t *testing.T, dir, goos, goarch string, entries []entry) string {
	t.Helper()
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	tw := tar.NewWriter(z)
	for _, e := range entries {
		body := []byte("the content of " + e.name + " for " + goos + "/" + goarch)
		if e.typ != tar.TypeReg {
			body = nil
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: e.mode, Typeflag: e.typ, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "kubectl-nr1_"+version+"_"+goos+"_"+goarch+".tar.gz")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func release(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	var out []string
	for _, p := range [][2]string{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}} {
		out = append(out, archive(t, dir, p[0], p[1], plugin3))
	}
	return out
}

// The manifest as written and read back: one platform per archive with its sha256,
// the release's URI, the plugin's files; and within krew's rules.
func TestManifest(t *testing.T) {
	archives := release(t)
	out := filepath.Join(t.TempDir(), "nr1.yaml")
	if err := run(version, "https://github.com/neureality-sdk/nr1-agent/releases/download", out, archives); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var p Plugin
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	if err := krewRules(out, &p); err != nil {
		t.Errorf("%v:\n%s", err, b)
	}
	if p.Spec.Version != version || p.Metadata.Name != "nr1" || p.Spec.Homepage != "https://github.com/neureality-sdk/nr1-agent" {
		t.Errorf("version %q, name %q, homepage %q", p.Spec.Version, p.Metadata.Name, p.Spec.Homepage)
	}
	if !strings.Contains(p.Spec.Caveats, "nr1-agent-reader") || !strings.Contains(p.Spec.Caveats, "/store/nr1/"+version+"/kubectl_complete-nr1") {
		t.Errorf("caveats:\n%s", p.Spec.Caveats)
	}
	if len(p.Spec.Platforms) != len(archives) {
		t.Fatalf("%d platforms for %d archives", len(p.Spec.Platforms), len(archives))
	}
	for i, pl := range p.Spec.Platforms {
		data, err := os.ReadFile(archives[i])
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		name := filepath.Base(archives[i])
		want := Platform{
			Selector: Selector{MatchLabels: map[string]string{"os": strings.Split(name, "_")[2], "arch": strings.TrimSuffix(strings.Split(name, "_")[3], ".tar.gz")}},
			URI:      "https://github.com/neureality-sdk/nr1-agent/releases/download/" + version + "/" + name,
			Sha256:   hex.EncodeToString(sum[:]),
			Bin:      "kubectl-nr1",
			Files:    []FileOperation{{"LICENSE", "."}, {"kubectl-nr1", "."}, {"kubectl_complete-nr1", "."}},
		}
		if !reflect.DeepEqual(pl, want) {
			t.Errorf("platform %d: %+v, want %+v", i, pl, want)
		}
	}
}

// krewRules are the rules krew's validator (v0.4.3, validate-krew-manifest, which CI
// runs on the release's manifest) applies to a manifest's fields, as documented: the
// file named for the plugin, apiVersion and kind, a safe name, a one-line short
// description, a version parsing as semver with its v, every platform with a URI, a
// sha256 of 64 lowercase hexadecimal digits, a bin, files with from and to, a non-empty
// selector on os and arch only; and no two platforms selecting one os and arch.
func krewRules(path string, p *Plugin) error {
	type rule struct {
		ok   bool
		what string
	}
	rules := []rule{
		{filepath.Base(path) == p.Metadata.Name+".yaml", "file named for the plugin"},
		{p.APIVersion == "krew.googlecontainertools.github.com/v1alpha2", "apiVersion"},
		{p.Kind == "Plugin", "kind"},
		{regexp.MustCompile(`^[\w-]+$`).MatchString(p.Metadata.Name), "safe name"},
		{p.Spec.ShortDescription != "" && !strings.ContainsAny(p.Spec.ShortDescription, "\r\n"), "one-line short description"},
		{semverRE.MatchString(p.Spec.Version), "semver version with v"},
		{len(p.Spec.Platforms) > 0, "a platform"},
	}
	selected := map[string]bool{}
	for _, pl := range p.Spec.Platforms {
		rules = append(rules,
			rule{pl.URI != "", "uri"},
			rule{regexp.MustCompile(`^[a-f0-9]{64}$`).MatchString(pl.Sha256), "sha256"},
			rule{pl.Bin != "", "bin"},
			rule{len(pl.Selector.MatchLabels) > 0, "a selector"})
		for _, f := range pl.Files {
			rules = append(rules, rule{f.From != "" && f.To != "", "files' from and to"})
		}
		for k := range pl.Selector.MatchLabels {
			rules = append(rules, rule{k == "os" || k == "arch", "selector on os and arch only"})
		}
		key := pl.Selector.MatchLabels["os"] + "/" + pl.Selector.MatchLabels["arch"]
		rules = append(rules, rule{!selected[key], "one platform per os and arch"})
		selected[key] = true
	}
	for _, r := range rules {
		if !r.ok {
			return errors.New("krew's rule broken: " + r.what)
		}
	}
	return nil
}

// What krew would take, or install wrong, is refused, naming the archive or version.
func TestRefuses(t *testing.T) {
	dir := t.TempDir()
	good := archive(t, dir, "linux", "amd64", plugin3)
	for _, tc := range []struct {
		name     string
		version  string
		archives []string
		want     string
	}{
		{"no v", "0.1.0", []string{good}, `version "0.1.0": not semver`},
		{"no patch", "v0.1", []string{good}, `version "v0.1": not semver`},
		{"a numeric pre-release with a leading 0", "v0.1.0-dev.0123456", []string{good}, `version "v0.1.0-dev.0123456": not semver`},
		{"no archive", version, nil, "no archives"},
		{"another version's archive", "v0.2.0", []string{good}, "not named kubectl-nr1_v0.2.0_<os>_<arch>.tar.gz"},
		{"a platform twice", version, []string{good, good}, "linux/amd64 is " + good + "'s already"},
		{"no completion helper", version, []string{archive(t, t.TempDir(), "linux", "amd64", plugin3[:2])}, "no kubectl_complete-nr1"},
		{"a file more", version, []string{archive(t, t.TempDir(), "linux", "amd64", append(slices.Clone(plugin3), entry{"README.md", 0o644, tar.TypeReg}))}, "holds README.md, which is none of LICENSE, kubectl-nr1, kubectl_complete-nr1"},
		{"a plugin not executable", version, []string{archive(t, t.TempDir(), "linux", "amd64", []entry{plugin3[0], {"kubectl-nr1", 0o644, tar.TypeReg}, plugin3[2]})}, "kubectl-nr1 is not executable (mode 644)"},
		{"a link", version, []string{archive(t, t.TempDir(), "linux", "amd64", []entry{plugin3[0], plugin3[1], {"kubectl_complete-nr1", 0o777, tar.TypeSymlink}})}, "kubectl_complete-nr1 is no regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := manifest(tc.version, "https://example.invalid", tc.archives)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want %q", err, tc.want)
			}
		})
	}
	// A corrupt archive is refused too.
	bad := filepath.Join(t.TempDir(), "kubectl-nr1_"+version+"_linux_amd64.tar.gz")
	if err := os.WriteFile(bad, []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := manifest(version, "https://example.invalid", []string{bad}); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("corrupt archive: %v", err)
	}
}

// The versions make builds are semver, as krew requires; the odd ones are not.
func TestSemver(t *testing.T) {
	for v, want := range map[string]bool{
		"v0.1.0": true, "v0.1.0-dev.1a2b3c4": true, "v0.1.0-dev.1a2b3c4.dirty": true, "v0.1.0-dev.g0123456": true,
		"v0.1.0-dev.1234567": true, "v1.2.3+build.5": true,
		"0.1.0": false, "v0.1": false, "v01.1.0": false, "v0.1.0-": false, "v0.1.0-dev.0123456": false, "v0.1.0-dev..x": false, "v0.1.0-dev_x": false,
	} {
		if got := semverRE.MatchString(v); got != want {
			t.Errorf("semver(%q) = %v, want %v", v, got, want)
		}
	}
}
