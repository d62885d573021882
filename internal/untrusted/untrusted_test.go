// SPDX-License-Identifier: Apache-2.0

package untrusted

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPodUID(t *testing.T) {
	for _, uid := range []string{
		"5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b11", // the API server's
		"0B3E7D21-8C44-4F0E-A1F2-6D9E5C7B3A08",
		"f4a7c9d2b1e08e3a6c5d4b3a29180f7e", // the kubelet's config hash of a static pod
		"6a3c1b9e0f8d4e2a",
		strings.Repeat("a", MaxUIDLen),
	} {
		if err := PodUID(uid); err != nil {
			t.Errorf("PodUID(%q) = %v, want nil", uid, err)
		}
	}
	for _, uid := range []string{
		"", ".", "..", "../../etc", "a/b", "/", "5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b1/",
		"5f0c3a52-1b7e-4c1a-9d55\x000e4a7c2f9b11", "abc\x00", "pod-uid", "uid-1",
		"5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b11-", "5f0c3a521b7e-4c1a-9d55-0e4a7c2f9b11x",
		strings.Repeat("a", MaxUIDLen+1), "g123", " 5f0c3a52",
	} {
		if err := PodUID(uid); err == nil {
			t.Errorf("PodUID(%q) accepted", uid)
		}
	}
}

func TestQuote(t *testing.T) {
	if got := Quote("a\nb\x00"); got != `"a\nb\x00"` {
		t.Errorf("Quote = %s", got)
	}
	long := strings.Repeat("x", MaxQuoted+10)
	want := strconv.Quote(long[:MaxQuoted]) + "… (138 bytes)"
	if got := Quote(long); got != want {
		t.Errorf("Quote(long) = %s, want %s", got, want)
	}
}

func FuzzPodUID(f *testing.F) {
	f.Add("5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b11")
	f.Add("f4a7c9d2b1e08e3a6c5d4b3a29180f7e")
	f.Add("..")
	f.Add("../5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b11")
	f.Add("a\x00b")
	f.Fuzz(func(t *testing.T, uid string) {
		err := PodUID(uid)
		if err != nil {
			if msg := err.Error(); strings.ContainsAny(msg, "\n\x00") || !utf8.ValidString(msg) {
				t.Fatalf("error is not one printable line: %q", msg)
			}
			return
		}
		// Accepted: joined to a directory it must name an entry of that directory.
		p := filepath.Join("/pins", uid)
		if filepath.Dir(p) != "/pins" || filepath.Base(p) != uid || strings.ContainsRune(uid, 0) || len(uid) > MaxUIDLen {
			t.Fatalf("accepted %q, which joins to %q", uid, p)
		}
	})
}

func FuzzQuote(f *testing.F) {
	f.Add("kubepods-burstable.slice")
	f.Add("a\nb\x00\u202e")
	f.Add(strings.Repeat("é", MaxQuoted))
	f.Fuzz(func(t *testing.T, s string) {
		q := Quote(s)
		if strings.ContainsAny(q, "\n\r\x00") || !utf8.ValidString(q) {
			t.Fatalf("Quote(%q) = %q: not one printable line", s, q)
		}
		// Every byte shown is at most 4 bytes of escape, and the rest is counted.
		if limit := 4*MaxQuoted + 32; len(q) > limit {
			t.Fatalf("Quote of %d bytes is %d bytes long, over %d", len(s), len(q), limit)
		}
		if len(s) <= MaxQuoted {
			if back, err := strconv.Unquote(q); err != nil || back != s {
				t.Fatalf("Quote(%q) = %s does not read back: %q, %v", s, q, back, err)
			}
		}
	})
}
