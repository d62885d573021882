// SPDX-License-Identifier: Apache-2.0

// Package golden keeps a test's expected output in a file beside the test: Read returns
// it, after rewriting it with what the test produced when the test runs with -update.
// It is imported by tests only.
package golden

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files with what the tests produce")

// Read returns the golden file at path, first rewritten with got under -update.
func Read(t testing.TB, path string, got []byte) []byte {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return want
}

// Check fails the test when got differs from the golden file at path.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if want := Read(t, path, got); !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -run '%s' -update rewrites it):\n%s", path, t.Name(), got)
	}
}
