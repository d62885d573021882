// SPDX-License-Identifier: Apache-2.0

// Package ci checks what the README tells a newcomer to type: every make target and
// variable it names exists, and every subcommand of the local stack it names. The
// commands themselves run in CI as written (.ci/run, deploy/ci/quickstart.sh).
package ci

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const repo = "../.."

// command is one command of the README's code: a program and its words.
type command struct {
	program string
	args    []string
}

var (
	fence      = regexp.MustCompile("(?s)```[a-z]*\n(.*?)```")
	inlineCode = regexp.MustCompile("`([^`\n]+)`")
	target     = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	variable   = regexp.MustCompile(`^([A-Z][A-Z0-9_]*)=`)
)

// commands returns the README's commands run by one of programs: in fenced blocks and
// inline code, each with the words that follow it up to a shell operator.
func commands(readme string, programs ...string) []command {
	var code []string
	for _, m := range fence.FindAllStringSubmatch(readme, -1) {
		code = append(code, strings.Split(m[1], "\n")...)
	}
	for _, m := range inlineCode.FindAllStringSubmatch(fence.ReplaceAllString(readme, ""), -1) {
		code = append(code, m[1])
	}
	var out []command
	for _, line := range code {
		words := strings.Fields(strings.NewReplacer(";", " ; ", "&&", " && ", "|", " | ", "(", " ( ", ")", " ) ").Replace(line))
		for i, w := range words {
			if !slices.Contains(programs, filepath.Base(w)) {
				continue
			}
			c := command{program: filepath.Base(w)}
			for _, a := range words[i+1:] {
				if strings.ContainsAny(a, ";&|()#") {
					break
				}
				c.args = append(c.args, a)
			}
			out = append(out, c)
		}
	}
	return out
}

// makeTargets splits a make command's words into its targets and variables; a word
// that is neither (prose after the command) ends it.
func makeTargets(c command) (targets, vars []string) {
	for _, a := range c.args {
		switch {
		case variable.MatchString(a):
			vars = append(vars, variable.FindStringSubmatch(a)[1])
		case target.MatchString(a):
			targets = append(targets, a)
		default:
			return targets, vars
		}
	}
	return targets, vars
}

// checkTarget asks make itself whether the Makefile in dir has a rule for target:
// a dry run prints the commands and runs none.
func checkTarget(dir, target string) error {
	cmd := exec.Command("make", "--dry-run", "--no-print-directory", "-C", dir, target)
	cmd.Env = append(os.Environ(), "MAKEFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("make %s: %w: %s", target, err, lastLine(out))
	}
	return nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// checkVariable says whether the Makefile sets name (a default the command line overrides).
func checkVariable(makefile, name string) error {
	if !regexp.MustCompile(`(?m)^` + name + `\s*(\?|:)?=`).MatchString(makefile) {
		return fmt.Errorf("make variable %s is not set in the Makefile", name)
	}
	return nil
}

// checkStackCommand says whether deploy/local/stack.sh dispatches sub.
func checkStackCommand(script, sub string) error {
	if !strings.Contains(script, "\n  "+sub+") ") {
		return fmt.Errorf("stack.sh has no subcommand %q", sub)
	}
	return nil
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReadmeMakeCommandsExist(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make: %v", err)
	}
	readme, makefile := read(t, "README.md"), read(t, "Makefile")
	seen := map[string]bool{}
	for _, c := range commands(readme, "make") {
		targets, vars := makeTargets(c)
		for _, tg := range targets {
			if seen[tg] {
				continue
			}
			seen[tg] = true
			if err := checkTarget(repo, tg); err != nil {
				t.Errorf("the README names %v", err)
			}
		}
		for _, v := range vars {
			if err := checkVariable(makefile, v); err != nil {
				t.Errorf("the README's make %s: %v", strings.Join(c.args, " "), err)
			}
		}
	}
	// The quick start and the commands a newcomer types next.
	for _, want := range []string{"run", "test", "down", "e2e"} {
		if !seen[want] {
			t.Errorf("the README does not name make %s", want)
		}
	}
	t.Logf("make targets named by the README: %d", len(seen))
}

func TestReadmeStackCommandsExist(t *testing.T) {
	readme, script := read(t, "README.md"), read(t, "deploy/local/stack.sh")
	n := 0
	for _, c := range commands(readme, "stack.sh") {
		if len(c.args) == 0 {
			continue
		}
		n++
		if err := checkStackCommand(script, c.args[0]); err != nil {
			t.Errorf("the README names %v", err)
		}
	}
	if n == 0 {
		t.Error("the README names no stack.sh command")
	}
}

// What readme-commands.sh and the release's check (deploy/dist/check.sh) type is what
// the README says: each of their steps names a command the README writes, word for word.
func TestReadmeCommandsAreTheOnesCIRuns(t *testing.T) {
	readme := read(t, "README.md")
	// A step's $(…) is the README's, escaped in the script's double quotes.
	vars := strings.NewReplacer("$mod", "github.com/neureality-sdk/nr1-agent", `\$`, "$")
	for _, s := range []struct {
		script string
		least  int
	}{{"deploy/ci/readme-commands.sh", 5}, {"deploy/dist/check.sh", 1}} {
		steps := regexp.MustCompile(`(?m)^\s*step "([^"]+)"$`).FindAllStringSubmatch(read(t, s.script), -1)
		if len(steps) < s.least {
			t.Errorf("%s has %d steps", s.script, len(steps))
		}
		for _, st := range steps {
			if cmd := vars.Replace(st[1]); !strings.Contains(readme, cmd) {
				t.Errorf("CI runs %q (%s), which the README does not write", cmd, s.script)
			}
		}
	}
}

// The checks refuse what does not exist; without this, a check that always passed
// would pass the README too.
func TestReadmeChecksRefuseWhatIsMissing(t *testing.T) {
	readme := "Run `make run MODE=dra` or `make nosuch-target`, then:\n\n```sh\nmake down; eval $(deploy/local/stack.sh nosuch)\n```\n"
	var got []string
	for _, c := range commands(readme, "make") {
		targets, vars := makeTargets(c)
		got = append(got, strings.Join(append(targets, vars...), ","))
	}
	if want := []string{"down", "run,MODE", "nosuch-target"}; !slices.Equal(got, want) {
		t.Errorf("make commands of the sample: got %q, want %q", got, want)
	}
	if err := checkTarget(repo, "nosuch-target"); err == nil || !strings.Contains(err.Error(), "No rule to make target") {
		t.Errorf("checkTarget(nosuch-target) = %v, want make's refusal", err)
	}
	if err := checkTarget(repo, "test"); err != nil {
		t.Errorf("checkTarget(test): %v", err)
	}
	if err := checkVariable(read(t, "Makefile"), "NOSUCH"); err == nil {
		t.Error("checkVariable(NOSUCH) passed")
	}
	if st := commands(readme, "stack.sh"); len(st) != 1 || !slices.Equal(st[0].args, []string{"nosuch"}) {
		t.Errorf("stack.sh commands of the sample: %v", st)
	}
	script := read(t, "deploy/local/stack.sh")
	if err := checkStackCommand(script, "nosuch"); err == nil {
		t.Error("checkStackCommand(nosuch) passed")
	}
	if err := checkStackCommand(script, "down"); err != nil {
		t.Error(err)
	}
}
