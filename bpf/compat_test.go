// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/compat32"
)

// compatOrSkip skips where this process cannot make 32-bit system calls: arm64, or an
// amd64 machine whose int $0x80 faults (a kernel without ia32 emulation, or a hypervisor
// that does not pass the gate).
func compatOrSkip(t *testing.T) {
	t.Helper()
	if err := compat32.Available(); err != nil {
		t.Skip(err)
	}
}

// Every program of a probe section names 32-bit entries the loader knows, and every
// entry known is probed by some program: a program no entry reaches would leave its
// syscall unseen.
func TestEveryCompatProbeHasItsEntries(t *testing.T) {
	used := map[string]bool{}
	for _, load := range []func() (*ebpf.CollectionSpec, error){loadFootprint, loadGate} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		for name, p := range spec.Programs {
			kind, entry, _ := strings.Cut(p.SectionName, "/")
			if kind != "kprobe" && kind != "kretprobe" {
				continue
			}
			if len(compatEntries[entry]) == 0 {
				t.Errorf("program %s of section %s: no 32-bit entries known by that name", name, p.SectionName)
			}
			used[entry] = true
		}
	}
	for entry := range compatEntries {
		if !used[entry] {
			t.Errorf("32-bit entries %s: probed by no program", entry)
		}
	}
}

// A process mapping a target with a 32-bit mmap (mmap2, or the old mmap reading its
// arguments from memory) is marked a mapper and walked at the next pass, as after a
// native mmap; the mapping is reported as a change.
func TestCompatMappingsAreFollowed(t *testing.T) {
	f := loadOrSkip(t)
	compatOrSkip(t)
	followOrFail(t, f)
	c := watchOrSkip(t, f)
	changes := reader(t, c)
	path := filepath.Join(t.TempDir(), "dma")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	const dma = 7
	if err := f.SetTargets(map[TargetKey]uint32{keyOf(t, path): dma}); err != nil {
		t.Fatal(err)
	}
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	fd := file.Fd()
	self := uint32(os.Getpid())
	mappingsOf(t, f, self, dma) // the first pass walks every process

	for _, tc := range []struct {
		name string
		size uintptr
		mmap func(size uintptr) (uintptr, error)
	}{
		{"mmap2", 2 * 4096, func(size uintptr) (uintptr, error) {
			return compat32.Syscall(compat32.SysMmap2, 0, size, unix.PROT_READ, unix.MAP_SHARED, fd, 0)
		}},
		{"old mmap", 3 * 4096, func(size uintptr) (uintptr, error) {
			args := []uint32{0, uint32(size), unix.PROT_READ, unix.MAP_SHARED, uint32(fd), 0}
			low, err := compat32.Low(unsafe.Slice((*byte)(unsafe.Pointer(&args[0])), 4*len(args)))
			if err != nil {
				return 0, err
			}
			return compat32.Syscall(compat32.SysOldMmap, low)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mappingsOf(t, f, self, dma) // a mapping given up is cleared by one more walk
			if _, pass := mappersPass(t, f, self, dma); slices.Contains(pass.pids, self) {
				t.Fatalf("pass %+v walked this process, which maps nothing and did nothing since", pass)
			}
			changesWithin(changes)
			addr, err := tc.mmap(tc.size)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Syscall(unix.SYS_MUNMAP, addr, tc.size, 0)
			got, pass := mappersPass(t, f, self, dma)
			if !slices.Contains(pass.pids, self) || len(got) != 1 || got[0].Size != uint64(tc.size) {
				t.Fatalf("pass %+v: mappings %+v, want this process walked and its mapping of %d bytes", pass, got, tc.size)
			}
			want := Change{CgroupId: currentCgroupID(t), Pid: self, Target: dma}
			if ch := changesWithin(changes); len(ch) != 1 || ch[0] != want {
				t.Fatalf("changes %+v, want the mapping's, %+v", ch, want)
			}
		})
	}
}

// A target opened with a 32-bit open or openat is reported as a change, as after a
// native open.
func TestCompatOpensAreReported(t *testing.T) {
	f := loadOrSkip(t)
	compatOrSkip(t)
	c := watchOrSkip(t, f)
	changes := reader(t, c)
	path := filepath.Join(t.TempDir(), "queue")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.SetTargets(map[TargetKey]uint32{keyOf(t, path): 3}); err != nil {
		t.Fatal(err)
	}
	name, err := compat32.Low(append([]byte(path), 0))
	if err != nil {
		t.Fatal(err)
	}
	const atFDCWD = 0xffffff9c // -100 in 32 bits
	for _, tc := range []struct {
		name string
		nr   uintptr
		args []uintptr
	}{
		{"open", compat32.SysOpen, []uintptr{name, unix.O_RDWR}},
		{"openat", compat32.SysOpenat, []uintptr{atFDCWD, name, unix.O_RDWR}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changesWithin(changes)
			fd, err := compat32.Syscall(tc.nr, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(int(fd))
			want := Change{CgroupId: currentCgroupID(t), Pid: uint32(os.Getpid()), Target: 3}
			if ch := changesWithin(changes); len(ch) != 1 || ch[0] != want {
				t.Fatalf("changes %+v, want the open's, %+v", ch, want)
			}
		})
	}
}
