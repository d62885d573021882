// SPDX-License-Identifier: Apache-2.0

//go:build e2eclean

package e2e

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stackBinaries are the processes the local node stack and its pods run.
var stackBinaries = []string{
	"containerd", "containerd-shim-runc-v2", "crio", "conmon", "etcd", "kube-apiserver", "kube-controller-manager",
	"kube-scheduler", "kubelet", "nr1-agent", "nr1-load", "pause", "registry",
}

// TestNothingLeftAfterDown runs after `stack.sh down` and compares the machine with what
// it was before `up` ($NR1_E2E_BEFORE).
func TestNothingLeftAfterDown(t *testing.T) {
	before := readEnv(t, os.Getenv("NR1_E2E_BEFORE"))

	// CRI-O's trust of the stack's registry, written by up.
	if certs, _ := filepath.Glob("/etc/containers/certs.d/*:5000"); len(certs) > 0 {
		t.Errorf("the registry's certificate directories are left: %v", certs)
	}

	procs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited while we looked
		}
		comm := strings.TrimSpace(string(b))
		for _, name := range stackBinaries {
			// comm is cut at 15 characters.
			if comm == name || (len(name) > 15 && comm == name[:15]) {
				t.Errorf("process %s (%s) still runs", comm, filepath.Dir(p))
			}
		}
	}

	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	bpffs := false
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		for _, root := range []string{"/var/lib/kubelet", "/run/containerd", "/run/crio", "/var/lib/nr1-local", "/run/nr1-sim", "/run/netns", "/run/nr1-local"} {
			if f[4] == root || strings.HasPrefix(f[4], root+"/") {
				t.Errorf("mount left: %s", f[4])
			}
		}
		if f[4] == "/sys/fs/bpf" {
			bpffs = true
		}
	}
	if wasMounted := before["bpffs"] == "mounted"; bpffs != wasMounted {
		t.Errorf("bpffs mounted=%v, was %v before", bpffs, wasMounted)
	}

	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods*")
	for _, c := range cgroups {
		t.Errorf("cgroup left: %s", c)
	}
	if _, err := os.Stat("/sys/class/net/nr1br0"); err == nil {
		t.Error("CNI bridge nr1br0 left")
	}
	for _, dir := range []string{"/var/lib/kubelet", "/var/lib/nr1-local", "/var/lib/nr1-agent", "/run/nr1-sim", "/var/log/pods", "/var/log/containers"} {
		if _, err := os.Lstat(dir); err == nil {
			t.Errorf("%s left", dir)
		}
	}
	if specs, _ := filepath.Glob("/var/run/cdi/nr1.neureality.ai_*.json"); len(specs) > 0 {
		t.Errorf("CDI specs of DRA claims left: %v", specs)
	}
	for _, s := range []string{"vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops"} {
		b, err := os.ReadFile(filepath.Join("/proc/sys", strings.ReplaceAll(s, ".", "/")))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(b)); got != before[s] {
			t.Errorf("sysctl %s = %s, was %s before", s, got, before[s])
		}
	}
}

func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("NR1_E2E_BEFORE: %v (run through make e2e)", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			out[k] = v
		}
	}
	return out
}
