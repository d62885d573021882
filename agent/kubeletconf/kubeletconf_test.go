// SPDX-License-Identifier: Apache-2.0

package kubeletconf

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeProc makes a /proc with a kubelet of PID 42 run with args, its root and working
// directory holding files.
func fakeProc(t *testing.T, args []string, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	write := func(path, body string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "7", "comm"), "containerd\n")
	write(filepath.Join(root, "7", "cmdline"), "containerd\x00--config\x00/etc/other.yaml\x00")
	write(filepath.Join(root, "42", "comm"), "kubelet\n")
	write(filepath.Join(root, "42", "cmdline"), strings.Join(append([]string{"/usr/bin/kubelet"}, args...), "\x00")+"\x00")
	if err := os.MkdirAll(filepath.Join(root, "42", "cwd"), 0o755); err != nil {
		t.Fatal(err)
	}
	for path, body := range files {
		if filepath.IsAbs(path) {
			write(filepath.Join(root, "42", "root", path), body)
		} else {
			write(filepath.Join(root, "42", "cwd", path), body)
		}
	}
	return root
}

func TestResourceHealth(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		files  map[string]string
		on     bool
		source string
	}{
		{"off in the config file", []string{"--config=/var/lib/kubelet/config.yaml"},
			map[string]string{"/var/lib/kubelet/config.yaml": "kind: KubeletConfiguration\nfeatureGates:\n  ResourceHealthStatus: false\n"},
			false, "ResourceHealthStatus=false in the kubelet's --config /var/lib/kubelet/config.yaml"},
		{"a relative config path, from the kubelet's working directory", []string{"--config", "kubelet.yaml"},
			map[string]string{"kubelet.yaml": "featureGates: {ResourceHealthStatus: false}\n"},
			false, "--config kubelet.yaml"},
		{"the drop-in directory over the file, the last file last", []string{"--config=/etc/k.yaml", "--config-dir=/etc/k.d"},
			map[string]string{"/etc/k.yaml": "featureGates: {ResourceHealthStatus: false}\n", "/etc/k.d/10-a.conf": "featureGates: {ResourceHealthStatus: true}\n",
				"/etc/k.d/20-b.conf": "featureGates: {ResourceHealthStatus: false}\n", "/etc/k.d/README": "not a config"},
			false, "--config-dir /etc/k.d/20-b.conf"},
		{"the flag over the files", []string{"--config=/etc/k.yaml", "--feature-gates=Other=true,ResourceHealthStatus=true"},
			map[string]string{"/etc/k.yaml": "featureGates: {ResourceHealthStatus: false}\n"},
			true, "ResourceHealthStatus=true in the kubelet's --feature-gates"},
		{"each --feature-gates merged over the ones before, empty items skipped", []string{"--feature-gates=ResourceHealthStatus=false,", "--feature-gates", "Other=true"},
			nil, false, "ResourceHealthStatus=false in the kubelet's --feature-gates"},
		{"not set: the default", []string{"--config=/etc/k.yaml"}, map[string]string{"/etc/k.yaml": "kind: KubeletConfiguration\n"},
			true, "not set for the kubelet, and is on by default"},
		{"a config file that cannot be read: the default", []string{"--config=/etc/missing.yaml"}, nil,
			true, "could not be read"},
		{"a malformed flag: the default", []string{"--feature-gates=ResourceHealthStatus"}, nil,
			true, "could not be read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on, why := ResourceHealth(fakeProc(t, tc.args, tc.files))
			if on != tc.on || !strings.Contains(why, tc.source) {
				t.Errorf("ResourceHealth = %v, %q; want %v, naming %q", on, why, tc.on, tc.source)
			}
		})
	}
}

func TestNoKubelet(t *testing.T) {
	if _, err := Read(t.TempDir()); !errors.Is(err, ErrNoKubelet) {
		t.Errorf("Read with no kubelet: %v", err)
	}
	if on, why := ResourceHealth(t.TempDir()); !on || !strings.Contains(why, "no kubelet process") {
		t.Errorf("ResourceHealth with no kubelet = %v, %q", on, why)
	}
}
