package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/manifest"
)

// runClaim is `nr1-agent claim [--name N] [--namespace NS] resources.yaml`: the
// ResourceClaimTemplate of the CG whose needs the NR1 toolchain wrote to resources.yaml,
// for a node in DRA mode, so that no one writes capacity names by hand.
func runClaim(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nr1-agent claim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "the template's name (default: the CG's directory name, or \"nr1\")")
	namespace := fs.String("namespace", "", "the template's namespace (default: none, kubectl's)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: nr1-agent claim [--name N] [--namespace NS] resources.yaml")
		fmt.Fprintln(stderr, "Writes the ResourceClaimTemplate of the CG whose resources.yaml is given (- reads stdin).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	path := fs.Arg(0)
	in := io.Reader(os.Stdin)
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(stderr, "nr1-agent claim: %v\n", err)
			return 1
		}
		defer f.Close()
		in = f
	}
	a, err := nr1.ParseResourcesYAML(in)
	if err != nil {
		fmt.Fprintf(stderr, "nr1-agent claim: %s: %v\n", path, err)
		return 1
	}
	if *name == "" {
		*name = "nr1"
		if dir := filepath.Base(filepath.Dir(path)); path != "-" && dir != "." && dir != "/" {
			*name = strings.ToLower(dir)
		}
	}
	out, err := yaml.Marshal(manifest.ClaimTemplate(*namespace, *name, a))
	if err != nil {
		fmt.Fprintf(stderr, "nr1-agent claim: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "# From %s: %s\n%s", path, a.String(), out)
	return 0
}
