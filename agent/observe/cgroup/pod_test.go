// SPDX-License-Identifier: Apache-2.0

package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

func TestIsPodDir(t *testing.T) {
	const uid = "5f0c3a52-1b7e-4c1a-9d55-0e4a7c2f9b11"
	for name, want := range map[string]bool{
		"pod" + uid: true,
		"kubepods-burstable-pod5f0c3a52_1b7e_4c1a_9d55_0e4a7c2f9b11.slice": true,
		"kubepods-pod5f0c3a52_1b7e_4c1a_9d55_0e4a7c2f9b11.slice":           true,
		"pod" + uid + "x": false,
		"kubepods":        false,
		uid:               false,
	} {
		if got := IsPodDir(name, uid); got != want {
			t.Errorf("IsPodDir(%q) = %v, want %v", name, got, want)
		}
	}
}

// A container's cgroup is found below its pod's by its ID as each runtime and driver
// name it; CRI-O's monitor of the container, a sibling named by the same ID, is not it;
// nor is a directory whose name only contains the ID.
func TestContainerDir(t *testing.T) {
	const id = "0123abcd"
	for _, tc := range []struct {
		dirs []string
		want string
	}{
		{[]string{"other", id}, id},
		{[]string{"crio-conmon-" + id, "crio-" + id}, "crio-" + id},
		{[]string{"crio-conmon-" + id + ".scope", "crio-" + id + ".scope"}, "crio-" + id + ".scope"},
		{[]string{"cri-containerd-" + id + ".scope"}, "cri-containerd-" + id + ".scope"},
		{[]string{"crio-conmon-" + id, "x-" + id, id + "-y", "docker-" + id + ".scopex"}, ""},
	} {
		pod := t.TempDir()
		for _, d := range tc.dirs {
			if err := os.Mkdir(filepath.Join(pod, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		got, err := ContainerDir(pod, id)
		want := ""
		if tc.want != "" {
			want = filepath.Join(pod, tc.want)
		}
		if err != nil || got != want {
			t.Errorf("dirs %v: ContainerDir = %q, %v; want %q", tc.dirs, got, err, want)
		}
	}
	if got, err := ContainerDir(filepath.Join(t.TempDir(), "gone"), id); got != "" || err != nil {
		t.Errorf("a pod cgroup gone: %q, %v", got, err)
	}
}

// The cgroup above every pod is found under either driver, nested by a cgroup root or
// not, the shallowest when a pod's own cgroups are named alike.
func TestKubepodsDir(t *testing.T) {
	for _, tc := range []struct {
		dirs []string
		want string
	}{
		{[]string{"system.slice/containerd.service", "kubepods/burstable/podx/kubepods"}, "kubepods"},
		{[]string{"kubepods.slice/kubepods-burstable.slice"}, "kubepods.slice"},
		{[]string{"a/b/node-kubepods.slice/kubepods-besteffort.slice"}, "a/b/node-kubepods.slice"},
		{[]string{"system.slice", "user.slice/user-0.slice"}, ""},
		{[]string{"a/b/c/d/e/kubepods"}, ""}, // deeper than the kubelet nests it
	} {
		root := t.TempDir()
		for _, d := range tc.dirs {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		got, err := Hierarchy{V2: root}.KubepodsDir()
		if err != nil {
			t.Fatal(err)
		}
		want := ""
		if tc.want != "" {
			want = filepath.Join(root, tc.want)
		}
		if got != want {
			t.Errorf("%v: KubepodsDir() = %q, want %q", tc.dirs, got, want)
		}
	}
	if got, err := (Hierarchy{}).KubepodsDir(); got != "" || err != nil {
		t.Errorf("without a v2 tree: %q, %v", got, err)
	}
}
