// SPDX-License-Identifier: Apache-2.0

// Command dashboard writes the Grafana dashboard the chart ships
// (deploy/helm/nr1-agent/files/nr1-agent.json) from the definition in dashboard.go. The
// definition is built with Grafana's Foundation SDK, whose types follow Grafana's
// dashboard schema, so a panel, query or field Grafana does not know cannot be written.
// `make generate` runs it; a test in `make test` fails when the committed file is stale.
package main

import (
	"flag"
	"fmt"
	"os"
)

//go:generate go run . --out ../../helm/nr1-agent/files/nr1-agent.json

func main() {
	out := flag.String("out", "", "file to write (default: standard output)")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintf(os.Stderr, "dashboard: %v\n", err)
		os.Exit(1)
	}
}

func run(out string) error {
	b, err := render()
	if err != nil {
		return err
	}
	if out == "" {
		_, err = os.Stdout.Write(b)
		return err
	}
	return os.WriteFile(out, b, 0o644)
}
