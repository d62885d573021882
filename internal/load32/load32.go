// SPDX-License-Identifier: Apache-2.0

// Package load32 gives tests nr1-load built for the 32-bit sibling of the machine's
// architecture (i386 beside amd64, 32-bit ARM beside arm64): a CG whose system calls
// enter the kernel through its compat entries.
package load32

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// OrSkip is its path: $NR1_LOAD32 (a kernel's guest brings it, having no toolchain),
// else built here into a directory of the test's. It skips where the kernel runs no
// 32-bit program, and fails in a guest that is there to run it and cannot.
func OrSkip(tb testing.TB) string {
	tb.Helper()
	load := os.Getenv("NR1_LOAD32")
	if load == "" {
		arch := map[string]string{"amd64": "386", "arm64": "arm"}[runtime.GOARCH]
		if arch == "" {
			tb.Skipf("%s has no 32-bit sibling", runtime.GOARCH)
		}
		mod, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			tb.Fatalf("finding the module: %v", err)
		}
		load = filepath.Join(tb.TempDir(), "nr1-load-"+arch)
		build := exec.Command("go", "build", "-o", load, "./cmd/nr1-load")
		build.Dir = filepath.Dir(strings.TrimSpace(string(mod)))
		build.Env = append(os.Environ(), "GOARCH="+arch, "GOARM=7", "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			tb.Fatalf("building nr1-load for %s: %v\n%s", arch, err, out)
		}
	}
	err := exec.Command(load, "-h").Run() //nolint:gosec // the test's own build, or the one its guest brings
	switch {
	case errors.Is(err, syscall.ENOEXEC) && os.Getenv("NR1_LOAD32") != "":
		tb.Fatalf("the guest's kernel runs no 32-bit program: %v", err)
	case errors.Is(err, syscall.ENOEXEC):
		tb.Skipf("this kernel runs no 32-bit program (IA32 emulation or AArch32 off): %v", err)
	}
	// A binfmt_misc handler would run it in an emulator, whose system calls are 64-bit.
	for _, h := range []string{"qemu-i386", "qemu-arm"} {
		if b, err := os.ReadFile("/proc/sys/fs/binfmt_misc/" + h); err == nil && strings.HasPrefix(string(b), "enabled") {
			tb.Skipf("32-bit programs run under %s here, with 64-bit system calls", h)
		}
	}
	return load
}
