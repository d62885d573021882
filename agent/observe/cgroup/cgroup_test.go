// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/neureality-sdk/nr1-agent/internal/untrusted"
)

func TestRelative(t *testing.T) {
	tests := map[string]string{
		"/kubepods/besteffort/pod123/abc":                    "kubepods/besteffort/pod123/abc",
		"/kubepods/pod123/abc":                               "kubepods/pod123/abc",
		"/kubepods//pod123/abc/":                             "kubepods/pod123/abc",
		"kubepods-burstable-pod1_2.slice:cri-containerd:abc": "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice/cri-containerd-abc.scope",
		"kubepods-pod9.slice:crio:def":                       "kubepods.slice/kubepods-pod9.slice/crio-def.scope",
		"-.slice:cri-containerd:abc":                         "cri-containerd-abc.scope",
		"kubepods.slice:..:..":                               "kubepods.slice/..-...scope",
	}
	for in, want := range tests {
		got, err := Relative(in)
		if err != nil || got != want {
			t.Errorf("Relative(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{
		"", "/", "//", "/a/../../etc", "/..", "/kubepods/..", "/kubepods/./pod1/abc", "/kubepods/pod1/../pod2/abc",
		"kubepods:x", "a:b:c", ".slice:a:b", "-kubepods.slice:a:b", "kubepods--burstable.slice:a:b", "kubepods-.slice:a:b",
		"../../etc.slice:a:b", "kubepods.slice:a/../../..:b", "kubepods.slice:a:../../../etc", "kubepods.slice::b", "kubepods.slice:a:",
		"/kubepods/pod1\x00/abc", "/" + strings.Repeat("a", maxCgroupsPath),
	} {
		got, err := Relative(bad)
		if err == nil {
			t.Errorf("Relative(%q) = %q, want an error", bad, got)
			continue
		}
		if bad != "" && !strings.Contains(err.Error(), untrusted.Quote(bad)) {
			t.Errorf("Relative(%q): error %q does not name the cgroupsPath", bad, err)
		}
	}
}

// A cgroupsPath resolves below the root of every hierarchy, or not at all.
func TestResolveStaysInEachHierarchy(t *testing.T) {
	h := Hierarchy{Root: "/sys/fs/cgroup", Mode: Hybrid, V2: "/sys/fs/cgroup/unified", Controllers: []string{"freezer", "memory"}}
	p, err := h.Resolve("kubepods-pod9.slice:crio:def")
	if err != nil {
		t.Fatal(err)
	}
	if p.V2 != "/sys/fs/cgroup/unified/kubepods.slice/kubepods-pod9.slice/crio-def.scope" ||
		p.V1["memory"] != "/sys/fs/cgroup/memory/kubepods.slice/kubepods-pod9.slice/crio-def.scope" {
		t.Errorf("Resolve = %+v", p)
	}
	// ../unified from memory would still be under /sys/fs/cgroup, in another hierarchy.
	for _, bad := range []string{"/../unified/kubepods", "/kubepods/../../memory/x", "kubepods.slice:x/../../..:y"} {
		if p, err := h.Resolve(bad); err == nil || !strings.Contains(err.Error(), "cgroupsPath") {
			t.Errorf("Resolve(%q) = %+v, %v; want an error naming the cgroupsPath", bad, p, err)
		}
	}
}

func FuzzResolve(f *testing.F) {
	for _, seed := range []string{
		"/kubepods/burstable/pod5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b11/0b3e7d218c444f0ea1f26d9e5c7b3a08e2a9c5d41f7b3e6a0c8d2b9f4e1a7c35",
		"/kubepods/pod6a3c1b9e0f8d4e2a/cri-o-abc",
		"kubepods-burstable-pod5f0c3a52_1b7e_4c1a_9d55_0e4a7c2f9b11.slice:cri-containerd:0b3e7d218c44",
		"kubepods-besteffort-pod0b3e7d21_8c44_4f0e_a1f2_6d9e5c7b3a08.slice:crio:9f4e1a7c35",
		"system.slice:docker:abc",
		"-.slice:cri-containerd:abc",
		"/kubepods/../../etc",
		"../../etc.slice:a:b",
		"kubepods.slice:a/../..:b",
		"/a/b/../../..",
	} {
		f.Add(seed)
	}
	h := Hierarchy{Root: "/sys/fs/cgroup", Mode: Hybrid, V2: "/sys/fs/cgroup/unified", Controllers: []string{"freezer", "memory", "pids"}}
	f.Fuzz(func(t *testing.T, cgroupsPath string) {
		p, err := h.Resolve(cgroupsPath)
		if err != nil {
			if cgroupsPath != "" && !strings.Contains(err.Error(), "cgroupsPath") {
				t.Fatalf("error %q does not name the cgroupsPath", err)
			}
			return
		}
		roots := map[string]string{h.V2: p.V2}
		for _, c := range h.Controllers {
			roots[filepath.Join(h.Root, c)] = p.V1[c]
		}
		for root, dir := range roots {
			rel, err := filepath.Rel(root, dir)
			if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || filepath.Clean(dir) != dir {
				t.Fatalf("Resolve(%q) gives %q, not below %q", cgroupsPath, dir, root)
			}
		}
	})
}

// TestRealCgroups runs on this host's cgroups: it makes a cgroup, puts a process in it,
// and checks the paths, id and processes against what /proc says; once with a
// cgroupsPath of the cgroupfs driver, once of the systemd driver (as CRI-O gives it by
// default: a slice, the runtime's prefix, the container's scope), laid out as systemd
// would.
func TestRealCgroups(t *testing.T) {
	slice := "nr1agenttest" + strconv.Itoa(os.Getpid())
	for _, c := range []struct{ driver, cgroupsPath, rel string }{
		{"cgroupfs", "/nr1-agent-test-" + strconv.Itoa(os.Getpid()) + "/ctr", "nr1-agent-test-" + strconv.Itoa(os.Getpid()) + "/ctr"},
		{"systemd", slice + "-pod1.slice:crio:ctr", slice + ".slice/" + slice + "-pod1.slice/crio-ctr.scope"},
	} {
		t.Run(c.driver, func(t *testing.T) { testRealCgroup(t, c.cgroupsPath, c.rel) })
	}
}

func testRealCgroup(t *testing.T, cgroupsPath, rel string) {
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	h, err := Detect("/sys/fs/cgroup")
	if err != nil {
		t.Skipf("no cgroups on this host: %v", err)
	}
	if h.Mode == Legacy {
		t.Skip("no cgroup v2 tree on this host (legacy mode)")
	}
	t.Logf("cgroup mode %s, v2 tree at %s", h.Mode, h.V2)
	p, err := h.Resolve(cgroupsPath)
	if err != nil {
		t.Fatal(err)
	}
	if p.V2 != filepath.Join(h.V2, rel) {
		t.Fatalf("Resolve(%q).V2 = %q, want %q", cgroupsPath, p.V2, filepath.Join(h.V2, rel))
	}
	if err := os.MkdirAll(p.V2, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for d := p.V2; d != h.V2; d = filepath.Dir(d) {
			_ = os.Remove(d)
		}
	})
	if h.Mode == Hybrid {
		if p.V1["memory"] != "/sys/fs/cgroup/memory/"+rel || p.V1["freezer"] == "" {
			t.Errorf("v1 paths %v", p.V1)
		}
	}

	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := os.WriteFile(filepath.Join(p.V2, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if p.ProcsDir() != p.V2 {
		t.Errorf("ProcsDir %q, want the v2 dir", p.ProcsDir())
	}
	// A worker the container moved into a child cgroup of its own is still its.
	child := filepath.Join(p.V2, "worker")
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(child) })
	worker := exec.Command("sleep", "30")
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })
	if err := os.WriteFile(filepath.Join(child, "cgroup.procs"), []byte(strconv.Itoa(worker.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	childID, err := ID(child)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := ReadSubtree(p.ProcsDir())
	pids := tree.PIDs
	slices.Sort(pids)
	want := []int{cmd.Process.Pid, worker.Process.Pid}
	slices.Sort(want)
	if err != nil || !slices.Equal(pids, want) || !slices.Equal(tree.Descendants, []uint64{childID}) {
		t.Fatalf("ReadSubtree = %+v, %v; want processes %v and the child cgroup %d", tree, err, want, childID)
	}
	// The worker leaves, so that the container's own cgroup can be removed.
	if err := os.WriteFile(filepath.Join(p.V2, "cgroup.procs"), []byte(strconv.Itoa(worker.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	// /proc/PID/cgroup names the v2 cgroup on its "0::" line; its inode is the id.
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	var v2 string
	for _, line := range strings.Split(string(b), "\n") {
		if after, ok := strings.CutPrefix(line, "0::"); ok {
			v2 = after
		}
	}
	if v2 != "/"+rel {
		t.Fatalf("/proc says v2 cgroup %q", v2)
	}
	id, err := ID(p.V2)
	if err != nil || id == 0 {
		t.Fatalf("ID = %d, %v", id, err)
	}
	fi, _ := os.Stat(filepath.Join(h.V2, v2))
	if want := inodeOf(t, fi); id != want {
		t.Errorf("id %d, inode of /proc's cgroup %d", id, want)
	}
}

func TestBelow(t *testing.T) {
	if p, err := below("/sys/fs/cgroup/memory", "kubepods/pod1"); err != nil || p != "/sys/fs/cgroup/memory/kubepods/pod1" {
		t.Errorf("below = %q, %v", p, err)
	}
	for _, rel := range []string{"", ".", "..", "../unified/kubepods", "a/../..", "/"} {
		if p, err := below("/sys/fs/cgroup/memory", rel); err == nil {
			t.Errorf("below(%q) = %q, want an error", rel, p)
		}
	}
}

// The freezer acts on cgroups below the v2 root only: a directory from a checkpoint
// naming anything else is refused before it is touched.
func TestFreezerStaysBelowTheV2Root(t *testing.T) {
	root := t.TempDir()
	h := Hierarchy{Root: root, Mode: Unified, V2: root}
	for _, dir := range []string{root, filepath.Dir(root), filepath.Join(root, "..", "etc"), "/etc"} {
		if err := h.Freeze(dir); err == nil || !strings.Contains(err.Error(), "is not below") {
			t.Errorf("Freeze(%q) = %v, want a refusal", dir, err)
		}
		if err := h.Thaw(dir); err == nil || !strings.Contains(err.Error(), "is not below") {
			t.Errorf("Thaw(%q) = %v, want a refusal", dir, err)
		}
	}
}
