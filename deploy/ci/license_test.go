// SPDX-License-Identifier: Apache-2.0

package ci

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The project's licenses: Apache-2.0 for everything but the BPF programs, which the
// kernel loads only under a GPL-compatible license, and so are dual-licensed.
// REUSE-IgnoreStart: the lines below are what files must hold, not this file's licence.
const (
	spdxApache = "SPDX-License-Identifier: Apache-2.0"
	spdxBPF    = "SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)"
	// kernelBPF is what the BPF programs declare to the kernel for spdxBPF.
	kernelBPF = `char LICENSE[] SEC("license") = "Dual BSD/GPL";`
)

// REUSE-IgnoreEnd

// generated marks a file written by a tool from sources that carry their own license.
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// TestEverySourceFileDeclaresItsLicense: each source file says its license in its first
// lines, the BPF programs the one they declare to the kernel, and the license texts are
// in the tree.
func TestEverySourceFileDeclaresItsLicense(t *testing.T) {
	cmd := exec.Command("git", "ls-files")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	checked := 0
	for _, f := range strings.Fields(string(out)) {
		base := filepath.Base(f)
		want := spdxApache
		switch {
		case strings.HasSuffix(f, ".c"), strings.HasSuffix(f, ".h"):
			want = spdxBPF
		case strings.HasSuffix(f, ".go"), strings.HasSuffix(f, ".sh"), base == "Makefile", base == "Dockerfile":
		default:
			continue
		}
		data, err := os.ReadFile(filepath.Join(repo, f))
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".go") && generated.Match(data) {
			continue
		}
		checked++
		lines := strings.SplitN(string(data), "\n", 4)
		head := strings.Join(lines[:min(3, len(lines))], "\n")
		if !strings.Contains(head, want) {
			t.Errorf("%s: no %q in its first lines", f, want)
		}
		if strings.HasSuffix(f, ".bpf.c") && !strings.Contains(string(data), kernelBPF) {
			t.Errorf("%s: the program does not declare %s to the kernel", f, kernelBPF)
		}
	}
	if checked < 100 {
		t.Errorf("only %d source files checked", checked)
	}
	for _, f := range []string{"LICENSE", "LICENSES/Apache-2.0.txt", "LICENSES/GPL-2.0-only.txt", "LICENSES/BSD-2-Clause.txt"} {
		if _, err := os.Stat(filepath.Join(repo, f)); err != nil {
			t.Error(err)
		}
	}
}
