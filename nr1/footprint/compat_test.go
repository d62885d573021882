// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/sim"
)

// nr1Load32OrSkip is nr1-load built for the 32-bit sibling of this machine (i386 beside
// amd64, 32-bit ARM beside arm64): $NR1_LOAD32 (a kernel's guest brings it, having no
// toolchain), else built here. It skips where the kernel runs no 32-bit program.
func nr1Load32OrSkip(t *testing.T) string {
	t.Helper()
	load := os.Getenv("NR1_LOAD32")
	if load == "" {
		arch := map[string]string{"amd64": "386", "arm64": "arm"}[runtime.GOARCH]
		if arch == "" {
			t.Skipf("%s has no 32-bit sibling", runtime.GOARCH)
		}
		load = filepath.Join(t.TempDir(), "nr1-load-"+arch)
		build := exec.Command("go", "build", "-o", load, "../../cmd/nr1-load")
		build.Env = append(os.Environ(), "GOARCH="+arch, "GOARM=7", "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building nr1-load for %s: %v\n%s", arch, err, out)
		}
	}
	err := exec.Command(load, "-h").Run()
	switch {
	case errors.Is(err, syscall.ENOEXEC) && os.Getenv("NR1_LOAD32") != "":
		// A kernel's guest is there to run it.
		t.Fatalf("the guest's kernel runs no 32-bit program: %v", err)
	case errors.Is(err, syscall.ENOEXEC):
		t.Skipf("this kernel runs no 32-bit program (IA32 emulation or AArch32 off): %v", err)
	}
	// A binfmt_misc handler would run it in an emulator, whose system calls are 64-bit.
	for _, h := range []string{"qemu-i386", "qemu-arm"} {
		if b, err := os.ReadFile("/proc/sys/fs/binfmt_misc/" + h); err == nil && strings.HasPrefix(string(b), "enabled") {
			t.Skipf("32-bit programs run under %s here, with 64-bit system calls", h)
		}
	}
	return load
}

// A 32-bit CG is measured as a 64-bit one is: its system calls enter the kernel through
// its compat entries, which the syscall tracepoints do not see, so its DMA mapping
// (mmap2), its queues (openat) and the queue it put in flight (socketcall on i386,
// sendmsg on ARM) are each counted, by a scan that walks the mappings of the processes
// that may map a target only, as the agent's do.
func TestA32BitCGIsMeasured(t *testing.T) {
	load := nr1Load32OrSkip(t)
	p, dir := newCgroups(t, 1)
	b := newBPFOrSkip(t, p)
	if err := b.FollowMappers(); err != nil {
		t.Fatalf("following mappers: %v", err)
	}
	ctx := context.Background()
	if _, err := b.Scan(ctx); err != nil { // the full pass over every process's mappings
		t.Fatal(err)
	}
	p.start(t, 0, exec.Command(load, "--compute-dma-file", p.sim.File(sim.ComputeDMA), "--cpu-dma-file", p.sim.File(sim.CPUDMA),
		"--queue-file", p.sim.File(sim.HypervisorQ), "--write-file", filepath.Join(dir, "blob"), "--status-file", filepath.Join(dir, "status"),
		"--compute-dma-mb", "3", "--queues", "2", "--inflight-queues", "1"))
	want := nr1.Usage{}
	want[nr1.ComputeDMAMemory] = 3 << 20
	want[nr1.HypervisorQueue] = 3
	var got nr1.Usage
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		s, err := b.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got = byCgroup(s, p.targets)[p.ids[0]]; got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a 32-bit CG holding 3 MB of compute DMA and 3 queues (one in flight) measured %v, want %v", got, want)
		}
	}
}
