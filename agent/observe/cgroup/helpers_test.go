// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"os"
	"syscall"
	"testing"
)

func inodeOf(t *testing.T, fi os.FileInfo) uint64 {
	t.Helper()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Fatal("no stat")
	}
	return st.Ino
}
