// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestPodUID(t *testing.T) {
	tests := []struct {
		name, uid string
		pod       bool
	}{
		{"pod5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b11", "5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b11", true},
		{"pod6a3c1b9e0f8d4e2a", "6a3c1b9e0f8d4e2a", true}, // a static pod: its config hash
		{"kubepods-burstable-pod5f0c3a52_1b7e_4c1a_9d55_0e4a7c2f9b11.slice", "5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b11", true},
		{"kubepods-pod6a3c1b9e0f8d4e2a.slice", "6a3c1b9e0f8d4e2a", true},
		{"kubepods-burstable.slice", "", false},
		{"burstable", "", false},
		{"pod", "", false},
		{"cri-containerd-0123abcd.scope", "", false},
	}
	for _, tt := range tests {
		uid, pod := podUID(tt.name)
		if uid != tt.uid || pod != tt.pod {
			t.Errorf("podUID(%q) = %q, %v; want %q, %v", tt.name, uid, pod, tt.uid, tt.pod)
		}
	}
}

// tree writes files (path → content) under root, making their directories.
func tree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, v := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Only the wanted pods' own cgroups count, frozen by themselves, below kubepods.
func TestFrozenPodsOfBothDriversAndHierarchies(t *testing.T) {
	root := t.TempDir()
	const (
		a = "aaaaaaaa-0000-0000-0000-000000000001" // throttled, frozen (cgroupfs driver)
		b = "bbbbbbbb-0000-0000-0000-000000000002" // throttled, not frozen
		c = "cccccccc-0000-0000-0000-000000000003" // frozen, never throttled
		d = "dddddddd-0000-0000-0000-000000000004" // throttled, frozen (systemd driver)
		e = "6a3c1b9e0f8d4e2a"                     // throttled static pod, frozen in v1
	)
	tree(t, root, map[string]string{
		"unified/cgroup.freeze":                                         "0",
		"unified/kubepods/burstable/pod" + a + "/cgroup.freeze":         "1",
		"unified/kubepods/burstable/pod" + a + "/ctr/cgroup.freeze":     "0",
		"unified/kubepods/pod" + b + "/cgroup.freeze":                   "0",
		"unified/kubepods/besteffort/pod" + c + "/cgroup.freeze":        "1",
		"unified/system.slice/pod" + a + "/cgroup.freeze":               "1", // not a pod's: outside kubepods
		"unified/kubepods/podnever-a-uid/cgroup.freeze":                 "1", // named by no pod UID
		"unified/kubepods/pod" + e + "/cgroup.freeze":                   "0",
		"freezer/kubepods/pod" + e + "/freezer.self_freezing":           "1",
		"freezer/kubepods/pod" + e + "/freezer.state":                   "FROZEN",
		"freezer/kubepods/burstable/pod" + a + "/freezer.self_freezing": "0", // frozen by its parent only
		"freezer/kubepods/burstable/pod" + a + "/freezer.state":         "FROZEN",
		"memory/kubepods/pod" + e + "/memory.usage_in_bytes":            "0",
		"unified/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(d, "-", "_") + ".slice/cgroup.freeze": "1",
	})
	h := Hierarchy{Root: root, Mode: Hybrid, V2: filepath.Join(root, "unified"), Controllers: []string{"freezer", "memory"}}
	got, err := h.FrozenPods([]string{a, b, d, e, "never-existed", "never-a-uid"})
	if err != nil {
		t.Fatal(err)
	}
	want := []FrozenPod{
		{UID: e, Dir: filepath.Join(root, "freezer/kubepods/pod"+e), V1: true},
		{UID: d, Dir: filepath.Join(root, "unified/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"+strings.ReplaceAll(d, "-", "_")+".slice")},
		{UID: a, Dir: filepath.Join(root, "unified/kubepods/burstable/pod"+a)},
	}
	if !slices.Equal(got, want) {
		t.Errorf("FrozenPods =\n%v\nwant\n%v", got, want)
	}
	if got, err := h.FrozenPods(nil); err != nil || len(got) != 0 {
		t.Errorf("FrozenPods(nil) = %v, %v", got, err)
	}
}

// TestThawPodV1 freezes a real v1 freezer cgroup holding a process, as found on hybrid
// and legacy hosts, and thaws it.
func TestThawPodV1(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup/freezer", &st); err != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
		t.Skip("no v1 freezer hierarchy on this host")
	}
	// A test root inside the freezer hierarchy, laid out as a hierarchy root would be.
	root := filepath.Join("/sys/fs/cgroup/freezer", "nr1-agent-test-"+strconv.Itoa(os.Getpid()))
	const uid = "6a3c1b9e0f8d4e2a"
	pod := filepath.Join(root, "freezer", "kubepods", "pod"+uid)
	if err := os.MkdirAll(pod, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(pod, "freezer.state"), []byte("THAWED"), 0)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for _, d := range []string{pod, filepath.Dir(pod), filepath.Dir(filepath.Dir(pod)), root} {
			for range 50 {
				if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	if err := os.WriteFile(filepath.Join(pod, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pod, "freezer.state"), []byte("FROZEN"), 0); err != nil {
		t.Fatal(err)
	}
	h := Hierarchy{Root: root, Mode: Legacy, Controllers: []string{"freezer"}}
	got, err := h.FrozenPods([]string{uid})
	if err != nil || len(got) != 1 || got[0].Dir != pod || !got[0].V1 {
		t.Fatalf("FrozenPods = %v, %v; want %s", got, err, pod)
	}
	if err := h.ThawPod(got[0]); err != nil {
		t.Fatal(err)
	}
	if s, _ := os.ReadFile(filepath.Join(pod, "freezer.state")); strings.TrimSpace(string(s)) != "THAWED" {
		t.Errorf("freezer.state %q after ThawPod", s)
	}
	if got, err := h.FrozenPods([]string{uid}); err != nil || len(got) != 0 {
		t.Errorf("FrozenPods after thawing = %v, %v", got, err)
	}
}
