// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// versionRepo is a git repository holding the VERSION file and version.sh, at a first
// commit; git runs a command in it, version runs version.sh.
type versionRepo struct {
	t   *testing.T
	dir string
}

func newVersionRepo(t *testing.T) *versionRepo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("git: %v", err)
	}
	script, err := os.ReadFile("../version.sh")
	if err != nil {
		t.Fatal(err)
	}
	r := &versionRepo{t: t, dir: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(r.dir, "deploy/dist"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "deploy/dist/version.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	r.write("VERSION", "0.1.0\n")
	r.git("init", "-q")
	r.git("add", ".")
	r.git("commit", "-q", "-m", "first")
	return r
}

func (r *versionRepo) write(name, content string) {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.dir, name), []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *versionRepo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.dir
	// Commits of fixed authors and times, whatever the machine's configuration: the
	// same commits, so the same shas, every run.
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+r.dir,
		"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.invalid", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.invalid",
		"GIT_AUTHOR_DATE=2025-12-01T12:00:00Z", "GIT_COMMITTER_DATE=2025-12-01T12:00:00Z")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (r *versionRepo) version() string {
	r.t.Helper()
	out, err := exec.Command(filepath.Join(r.dir, "deploy/dist/version.sh")).Output()
	if err != nil {
		r.t.Fatalf("version.sh: %v", err)
	}
	v := strings.TrimSpace(string(out))
	if !semverRE.MatchString(v) {
		r.t.Errorf("version.sh printed %q, which the manifest refuses", v)
	}
	return v
}

// version.sh: the release at its tag on a clean tree; else a pre-release naming the
// commit, dirty when a tracked file is.
func TestVersionScript(t *testing.T) {
	r := newVersionRepo(t)
	sha := r.git("rev-parse", "--short=7", "HEAD")
	pre := "v0.1.0-dev." + sha
	if regexp.MustCompile(`^[0-9]+$`).MatchString(sha) {
		pre = "v0.1.0-dev.g" + sha
	}
	if got := r.version(); got != pre {
		t.Errorf("untagged: %q, want %q", got, pre)
	}
	r.write("notes.txt", "untracked\n")
	if got := r.version(); got != pre {
		t.Errorf("an untracked file: %q, want %q", got, pre)
	}
	r.git("tag", "v0.0.9")
	if got := r.version(); got != pre {
		t.Errorf("tagged with another version: %q, want %q", got, pre)
	}
	r.git("tag", "-a", "-m", "release", "v0.1.0")
	if got := r.version(); got != "v0.1.0" {
		t.Errorf("tagged v0.1.0: %q, want v0.1.0", got)
	}
	r.write("VERSION", "0.1.0\n\n")
	if got := r.version(); got != pre+".dirty" {
		t.Errorf("tagged, a tracked file changed: %q, want %q", got, pre+".dirty")
	}
	r.git("commit", "-q", "-am", "second")
	if got := r.version(); got == "v0.1.0" || !strings.HasPrefix(got, "v0.1.0-dev.") || strings.HasSuffix(got, ".dirty") {
		t.Errorf("a commit after the tag: %q", got)
	}
}

// A short sha of digits only would be a numeric identifier, maybe with a leading 0,
// which semver refuses: version.sh writes it after a g. Commits are made until one's
// sha is such (about one in 27; the same commits every run).
func TestVersionScriptNumericSha(t *testing.T) {
	r := newVersionRepo(t)
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatal("no sha of digits only in 1000 commits")
		}
		r.git("commit", "-q", "--allow-empty", "-m", "commit "+strconv.Itoa(i))
		if sha := r.git("rev-parse", "--short=7", "HEAD"); regexp.MustCompile(`^[0-9]+$`).MatchString(sha) {
			if got, want := r.version(), "v0.1.0-dev.g"+sha; got != want {
				t.Errorf("sha %s: %q, want %q", sha, got, want)
			}
			return
		}
	}
}
