package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestRelative(t *testing.T) {
	tests := map[string]string{
		"/kubepods/besteffort/pod123/abc":                    "kubepods/besteffort/pod123/abc",
		"/kubepods/pod123/abc":                               "kubepods/pod123/abc",
		"kubepods-burstable-pod1_2.slice:cri-containerd:abc": "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice/cri-containerd-abc.scope",
		"kubepods-pod9.slice:crio:def":                       "kubepods.slice/kubepods-pod9.slice/crio-def.scope",
	}
	for in, want := range tests {
		got, err := Relative(in)
		if err != nil || got != want {
			t.Errorf("Relative(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "/", "/a/../../etc", "kubepods:x", "a:b:c"} {
		if got, err := Relative(bad); err == nil {
			t.Errorf("Relative(%q) = %q, want an error", bad, got)
		}
	}
}

// TestRealCgroups runs on this host's cgroups: it makes a cgroup, puts a process in it,
// and checks the paths, id and processes against what /proc says.
func TestRealCgroups(t *testing.T) {
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
	rel := "nr1-agent-test-" + strconv.Itoa(os.Getpid())
	p, err := h.Resolve("/" + rel + "/ctr")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(p.V2, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(p.V2); _ = os.Remove(filepath.Dir(p.V2)) })
	if h.Mode == Hybrid {
		if p.V1["memory"] != "/sys/fs/cgroup/memory/"+rel+"/ctr" || p.V1["freezer"] == "" {
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
	if v2 != "/"+rel+"/ctr" {
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
