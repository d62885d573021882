// SPDX-License-Identifier: Apache-2.0

package compat32

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A 32-bit open of a file and a 32-bit mmap2 of it work from this 64-bit process, and
// an error comes back as its errno.
func TestCallsAreMadeAs32BitOnes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("nr1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Available(); err != nil {
		t.Skip(err)
	}
	low, err := Low(len(path) + 1)
	if err != nil {
		t.Fatal(err)
	}
	copy(low, path)
	name := Addr(low)
	fd, err := Syscall(SysOpen, name, unix.O_RDONLY)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer unix.Close(int(fd))
	addr, err := Syscall(SysMmap2, 0, 4096, unix.PROT_READ, unix.MAP_SHARED, fd, 0)
	if err != nil {
		t.Fatalf("mmap2: %v", err)
	}
	if addr >= 1<<32 {
		t.Fatalf("a 32-bit mapping at %#x, above 4 GiB", addr)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%08x-", addr); !strings.Contains(string(maps), want) || !strings.Contains(string(maps), path) {
		t.Fatalf("no mapping of %s at %#x in:\n%s", path, addr, maps)
	}
	if _, err := Syscall(SysOpenat, uintptr(0xffffff9c), name+1, unix.O_RDONLY); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("openat of a missing file: %v, want ENOENT", err)
	}
}
