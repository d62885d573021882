// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseMapsFixture(t *testing.T) {
	f, err := os.Open("testdata/proc/4242/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []mapsLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m, err := parseMapsLine(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	want := []mapsLine{
		{0x55d4c8a00000, 0x55d4c8a02000, 0, 0xfd, 0, 1312},
		{0x7f1c2a000000, 0x7f1c2a300000, 0, 0, 0x1f, 77},
		{0x7f1c2a400000, 0x7f1c2a500000, 0x300000, 0, 0x1f, 77},
		{0x7f1c2b000000, 0x7f1c2b100000, 0, 0, 0x1f, 78},
		{0x7ffd1c3f0000, 0x7ffd1c411000, 0, 0, 0, 0},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines", len(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"", "x-y r--p 0 00:00 0", "1000-0fff r--p 0 00:00 0", "1000-2000 r--p 0 0000 0", "1000-2000 r--p 0 00:00 -1"} {
		if _, err := parseMapsLine([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestFdinfoFixture(t *testing.T) {
	b, err := os.ReadFile("testdata/proc/4242/fdinfo/5")
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int64{"drm-memory-dma": 3072 << 10, "drm-engine-queue": 7, "drm-client-id": 7} {
		v, found, err := fdinfoValue(b, key)
		if err != nil || !found || v != want {
			t.Errorf("%s = %d, %v, %v; want %d", key, v, found, err, want)
		}
	}
	if _, found, _ := fdinfoValue(b, "drm-memory-vram"); found {
		t.Error("absent key found")
	}
	for _, bad := range []string{"k: 12 TiB", "k: -1", "k: x", "k: 1 2 3", "k: 9223372036854775807 KiB"} {
		if _, _, err := fdinfoValue([]byte(bad), "k"); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzParseMapsLine(f *testing.F) {
	f.Add("7f1c2a400000-7f1c2a500000 rw-s 00300000 00:1f 77 /dev/nr1_0_compute_dma")
	f.Add("55d4c8a00000-55d4c8a02000 r--p 00000000 fd:00 1312")
	f.Fuzz(func(t *testing.T, line string) {
		m, err := parseMapsLine([]byte(line))
		if err == nil && m.end < m.start {
			t.Fatalf("accepted a negative range: %+v", m)
		}
	})
}

func FuzzFdinfoValue(f *testing.F) {
	f.Add("drm-memory-dma:\t3072 KiB\ndrm-engine-queue: 7\n", "drm-memory-dma")
	f.Add("k: 1 GiB", "k")
	f.Fuzz(func(t *testing.T, content, key string) {
		v, found, err := fdinfoValue([]byte(content), key)
		if err == nil && v < 0 {
			t.Fatalf("negative value %d", v)
		}
		if !found && (v != 0 || err != nil) {
			t.Fatalf("not found but %d, %v", v, err)
		}
		if strings.TrimSpace(key) != key || key == "" {
			return
		}
	})
}

func TestFdinfoFlags(t *testing.T) {
	// As the kernel writes it for an fd opened with O_PATH|O_CLOEXEC.
	flags, err := fdinfoFlags([]byte("pos:\t0\nflags:\t012000000\nmnt_id:\t30\nino:\t5\n"))
	if err != nil || flags&unix.O_PATH == 0 {
		t.Errorf("O_PATH fd: flags %o, %v", flags, err)
	}
	if flags, err := fdinfoFlags([]byte("pos:\t0\nflags:\t02\n")); err != nil || flags&unix.O_PATH != 0 || flags&unix.O_RDWR == 0 {
		t.Errorf("O_RDWR fd: flags %o, %v", flags, err)
	}
	for _, bad := range []string{"pos:\t0\n", "flags:\t9\n", "flags:\n"} {
		if _, err := fdinfoFlags([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
