// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command an operator can run or list shows an example in its help: the root,
// those without a command of their own (completion), cobra's (help, the completion
// shells); and each example runs kubectl nr1 or kubectl-nr1, the name it is run by.
func TestEveryCommandHasAnExample(t *testing.T) {
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return // cobra's __complete, for the shells
		}
		n++
		switch {
		case strings.TrimSpace(c.Example) == "":
			t.Errorf("%s: no Example", c.CommandPath())
		case !strings.Contains(c.Example, "kubectl nr1 ") && !strings.Contains(c.Example, "kubectl-nr1 ") && !strings.Contains(c.Example, "kubectl_complete-nr1"):
			t.Errorf("%s: its Example runs neither kubectl nr1 nor kubectl-nr1:\n%s", c.CommandPath(), c.Example)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(nil, &bytes.Buffer{}, &bytes.Buffer{}))
	// root, top, inject, explain, version, help, completion and its four shells.
	if n != 11 {
		t.Errorf("%d commands walked", n)
	}
}

// The examples are in the help an operator reads.
func TestHelpShowsExamples(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"top", "--help"}, {"completion", "--help"}, {"version", "--help"}} {
		var out bytes.Buffer
		root := newRoot(nil, &out, &out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "\nExamples:\n") {
			t.Errorf("kubectl nr1 %s: no examples in\n%s", strings.Join(args, " "), out.String())
		}
	}
}

// version prints the version alone; --version as cobra says it.
func TestVersion(t *testing.T) {
	defer func(v string) { version = v }(version)
	version = "v0.1.0-dev.1a2b3c4"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"version"}, "v0.1.0-dev.1a2b3c4\n"},
		{[]string{"--version"}, "kubectl nr1 version v0.1.0-dev.1a2b3c4\n"},
	} {
		var out bytes.Buffer
		root := newRoot(nil, &out, &out)
		root.SetArgs(tc.args)
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		if out.String() != tc.want {
			t.Errorf("%v: %q, want %q", tc.args, out.String(), tc.want)
		}
	}
}
