// SPDX-License-Identifier: Apache-2.0

// Command krew writes the krew plugin manifest of a kubectl nr1 release (make dist):
// one platform per archive it is given, each archive read to check that it holds the
// plugin's files and to take its sha256, so that the manifest names only what was
// built, as it was built.
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

const (
	plugin   = "nr1"
	homepage = "https://github.com/neureality-sdk/nr1-agent"
	// bin is the plugin's executable; the completion helper is kubectl's name for it.
	bin    = "kubectl-nr1"
	helper = "kubectl_complete-nr1"
)

// files are what every archive holds, at its root, and krew installs.
var files = []string{"LICENSE", bin, helper}

// semverRE is semver.org's expression for a version, after krew's "v": a pre-release
// identifier of digits only may not start with 0, which krew's parser lets through.
var semverRE = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// Plugin is krew's plugin manifest (krew.googlecontainertools.github.com/v1alpha2),
// the fields a release sets.
type Plugin struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   Metadata `json:"metadata"`
	Spec       Spec     `json:"spec"`
}

// Metadata names the plugin: kubectl runs it as `kubectl nr1`.
type Metadata struct {
	Name string `json:"name"`
}

// Spec is what krew shows of the plugin and how it installs each platform's.
type Spec struct {
	Version          string     `json:"version"`
	Homepage         string     `json:"homepage"`
	ShortDescription string     `json:"shortDescription"`
	Description      string     `json:"description"`
	Caveats          string     `json:"caveats"`
	Platforms        []Platform `json:"platforms"`
}

// Platform is one archive: where krew downloads it, its sha256, for which os and arch.
type Platform struct {
	Selector Selector        `json:"selector"`
	URI      string          `json:"uri"`
	Sha256   string          `json:"sha256"`
	Bin      string          `json:"bin"`
	Files    []FileOperation `json:"files"`
}

// Selector is a label selector over krew's labels os and arch.
type Selector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// FileOperation copies files of the archive into the plugin's directory.
type FileOperation struct {
	From string `json:"from"`
	To   string `json:"to"`
}

func main() {
	version := flag.String("version", "", "the release's version, semver with a leading v (v0.1.0, v0.1.0-dev.1a2b3c4)")
	out := flag.String("out", "-", "where to write the manifest (- for stdout)")
	download := flag.String("download", homepage+"/releases/download/", "the URI the archives are downloaded from, the version's directory below it")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: krew -version VERSION [-out nr1.yaml] kubectl-nr1_VERSION_OS_ARCH.tar.gz...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*version, *download, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "krew:", err)
		os.Exit(1)
	}
}

func run(version, download, out string, archives []string) error {
	p, err := manifest(version, download, archives)
	if err != nil {
		return err
	}
	b, err := yaml.Marshal(p)
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	if out == "-" {
		_, err = os.Stdout.Write(b)
		return err
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	return nil
}

// manifest is the release's manifest, one platform per archive, in the order given.
func manifest(version, download string, archives []string) (*Plugin, error) {
	if !semverRE.MatchString(version) {
		return nil, fmt.Errorf("version %q: not semver with a leading v (krew wants v1.2.3 or v1.2.3-pre.1)", version)
	}
	if len(archives) == 0 {
		return nil, errors.New("no archives")
	}
	name := regexp.MustCompile(`^` + regexp.QuoteMeta(bin+"_"+version+"_") + `([a-z0-9]+)_([a-z0-9]+)\.tar\.gz$`)
	p := &Plugin{
		APIVersion: "krew.googlecontainertools.github.com/v1alpha2",
		Kind:       "Plugin",
		Metadata:   Metadata{Name: plugin},
		Spec: Spec{
			Version:          version,
			Homepage:         homepage,
			ShortDescription: "NR1 compute graphs: what they were given and hold, what nr1-agent did",
			Description:      description,
			Caveats:          strings.ReplaceAll(caveats, "VERSION", version),
		},
	}
	seen := map[string]string{}
	for _, a := range archives {
		m := name.FindStringSubmatch(filepath.Base(a))
		if m == nil {
			return nil, fmt.Errorf("archive %s: not named %s_%s_<os>_<arch>.tar.gz", a, bin, version)
		}
		goos, goarch := m[1], m[2]
		if other, ok := seen[goos+"/"+goarch]; ok {
			return nil, fmt.Errorf("archive %s: %s/%s is %s's already", a, goos, goarch, other)
		}
		seen[goos+"/"+goarch] = a
		sum, err := check(a)
		if err != nil {
			return nil, err
		}
		pl := Platform{
			Selector: Selector{MatchLabels: map[string]string{"os": goos, "arch": goarch}},
			URI:      strings.TrimSuffix(download, "/") + "/" + version + "/" + filepath.Base(a),
			Sha256:   sum,
			Bin:      bin,
		}
		for _, f := range files {
			pl.Files = append(pl.Files, FileOperation{From: f, To: "."})
		}
		p.Spec.Platforms = append(p.Spec.Platforms, pl)
	}
	return p, nil
}

// check reads the archive: its sha256, once it holds exactly the plugin's files,
// regular, the executables executable.
func check(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("archive: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("archive %s: %w", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", fmt.Errorf("archive %s: %w", path, err)
	}
	z, err := gzip.NewReader(f)
	if err != nil {
		return "", fmt.Errorf("archive %s: %w", path, err)
	}
	var held []string
	tr := tar.NewReader(z)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("archive %s: %w", path, err)
		}
		switch {
		case !slices.Contains(files, hdr.Name):
			return "", fmt.Errorf("archive %s: holds %s, which is none of %s", path, hdr.Name, strings.Join(files, ", "))
		case slices.Contains(held, hdr.Name):
			return "", fmt.Errorf("archive %s: holds %s twice", path, hdr.Name)
		case hdr.Typeflag != tar.TypeReg:
			return "", fmt.Errorf("archive %s: %s is no regular file", path, hdr.Name)
		case hdr.Name != "LICENSE" && hdr.Mode&0o111 == 0:
			return "", fmt.Errorf("archive %s: %s is not executable (mode %o)", path, hdr.Name, hdr.Mode)
		}
		held = append(held, hdr.Name)
	}
	for _, want := range files {
		if !slices.Contains(held, want) {
			return "", fmt.Errorf("archive %s: no %s", path, want)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

const description = `kubectl nr1 is for the people running NeuReality NR1 nodes: what each compute
graph (CG) was given of the NR1's resources and what it holds, and what nr1-agent,
the node agent, did about it.

  top       per node, the capacity, allocatable, allocated and used NR1 resources;
            per CG, used/allocated per resource and its largest ratio (-o wide:
            each ratio and where the CG's enforcement stands; --sort-by a column)
  explain   a CG's enforcement story: allocation, usage, the agent's Events in
            order, what happens next
  inject    a CG's pod spec given its NR1 resources from the toolchain's
            resources.yaml, for the device plugin or DRA

It reads the agents' metrics through the API server, with your kubeconfig.
`

const caveats = `kubectl nr1 needs the view ClusterRole and, in namespace nr1-system, the Role
nr1-agent-reader installed with nr1-agent (the agents' pods and their proxy). An
administrator binds it, e.g.:

  kubectl -n nr1-system create rolebinding nr1-operators --role nr1-agent-reader --group nr1-operators

For kubectl (1.26 or later) to complete kubectl nr1's arguments, copy the completion
helper onto your PATH:

  install -m 0755 "${KREW_ROOT:-$HOME/.krew}/store/nr1/VERSION/kubectl_complete-nr1" ~/.local/bin/
`
