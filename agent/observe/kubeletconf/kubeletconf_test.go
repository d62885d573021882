// SPDX-License-Identifier: Apache-2.0

package kubeletconf

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kubeletSocket listens on a unix socket as the kubelet does: the test's own process is
// the one the kernel names as its listener.
func kubeletSocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "kubelet.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return path
}

// fakeProc makes a /proc where the test's own process is the kubelet, run with args, in
// cgroup, its root and working directory holding files; beside it a process of a lower
// PID named kubelet whose configuration is a FIFO, which nothing may read.
func fakeProc(t *testing.T, args []string, cgroup string, files map[string]string) string {
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
	self := strconv.Itoa(os.Getpid())
	write(filepath.Join(root, "1", "comm"), "kubelet\n")
	write(filepath.Join(root, "1", "cmdline"), "kubelet\x00--config\x00/fifo\x00")
	write(filepath.Join(root, "1", "cgroup"), "0::/\n")
	if err := os.MkdirAll(filepath.Join(root, "1", "root"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "1", "root", "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(root, self, "comm"), "not-named-kubelet\n")
	write(filepath.Join(root, self, "cmdline"), strings.Join(append([]string{"/usr/bin/kubelet"}, args...), "\x00")+"\x00")
	write(filepath.Join(root, self, "cgroup"), cgroup)
	if err := os.MkdirAll(filepath.Join(root, self, "cwd"), 0o755); err != nil {
		t.Fatal(err)
	}
	for path, body := range files {
		if filepath.IsAbs(path) {
			write(filepath.Join(root, self, "root", path), body)
		} else {
			write(filepath.Join(root, self, "cwd", path), body)
		}
	}
	return root
}

const hostCgroup = "12:pids:/system.slice/kubelet.service\n0::/system.slice/kubelet.service\n"

func TestResourceHealth(t *testing.T) {
	socket := kubeletSocket(t)
	for _, tc := range []struct {
		name   string
		args   []string
		files  map[string]string
		on     bool
		source string
		known  bool
	}{
		{"off in the config file", []string{"--config=/var/lib/kubelet/config.yaml"},
			map[string]string{"/var/lib/kubelet/config.yaml": "kind: KubeletConfiguration\nfeatureGates:\n  ResourceHealthStatus: false\n"},
			false, "ResourceHealthStatus=false in the kubelet's --config /var/lib/kubelet/config.yaml", true},
		{"a relative config path, from the kubelet's working directory", []string{"--config", "kubelet.yaml"},
			map[string]string{"kubelet.yaml": "featureGates: {ResourceHealthStatus: false}\n"},
			false, "--config kubelet.yaml", true},
		{"the drop-in directory over the file, the last file last", []string{"--config=/etc/k.yaml", "--config-dir=/etc/k.d"},
			map[string]string{"/etc/k.yaml": "featureGates: {ResourceHealthStatus: false}\n", "/etc/k.d/10-a.conf": "featureGates: {ResourceHealthStatus: true}\n",
				"/etc/k.d/20-b.conf": "featureGates: {ResourceHealthStatus: false}\n", "/etc/k.d/README": "not a config"},
			false, "--config-dir /etc/k.d/20-b.conf", true},
		{"the flag over the files", []string{"--config=/etc/k.yaml", "--feature-gates=Other=true,ResourceHealthStatus=true"},
			map[string]string{"/etc/k.yaml": "featureGates: {ResourceHealthStatus: false}\n"},
			true, "ResourceHealthStatus=true in the kubelet's --feature-gates", true},
		{"each --feature-gates merged over the ones before, empty items skipped", []string{"--feature-gates=ResourceHealthStatus=false,", "--feature-gates", "Other=true"},
			nil, false, "ResourceHealthStatus=false in the kubelet's --feature-gates", true},
		{"not set: the default", []string{"--config=/etc/k.yaml"}, map[string]string{"/etc/k.yaml": "kind: KubeletConfiguration\n"},
			true, "not set for the kubelet, and is on by default", true},
		{"a config file that cannot be read: the default, unknown", []string{"--config=/etc/missing.yaml"}, nil,
			true, "could not be read", false},
		{"a config file past the limit: the default, unknown", []string{"--config=/etc/k.yaml"},
			map[string]string{"/etc/k.yaml": "featureGates: {ResourceHealthStatus: false}\n#" + strings.Repeat("x", MaxFileBytes)},
			true, "larger than 1048576 bytes", false},
		{"a malformed flag: the default, unknown", []string{"--feature-gates=ResourceHealthStatus"}, nil,
			true, "could not be read", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on, why, err := ResourceHealth(t.Context(), fakeProc(t, tc.args, hostCgroup, tc.files), socket)
			if on != tc.on || !strings.Contains(why, tc.source) || (err == nil) != tc.known {
				t.Errorf("ResourceHealth = %v, %q, %v; want %v, naming %q, known %v", on, why, err, tc.on, tc.source, tc.known)
			}
		})
	}
}

func TestNoKubelet(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "kubelet.sock")
	if _, err := Read(t.Context(), t.TempDir(), missing); !errors.Is(err, ErrNoKubelet) {
		t.Errorf("Read with no kubelet: %v", err)
	}
	if on, why, err := ResourceHealth(t.Context(), t.TempDir(), missing); !on || err == nil || !strings.Contains(why, "no kubelet answering") {
		t.Errorf("ResourceHealth with no kubelet = %v, %q, %v", on, why, err)
	}
}

// What serves the kubelet's socket from a pod's cgroup is not the kubelet, on either
// cgroup driver's layout: its files are not read.
func TestSocketServedFromAPodIsNoKubelet(t *testing.T) {
	socket := kubeletSocket(t)
	for _, cgroup := range []string{
		"0::/kubepods/besteffort/pod0f6b0b0e-1c4e-4c55-9d9f-2b6f1f4f4b1a/abc\n",
		"4:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f6b.slice/cri-containerd-abc.scope\n0::/\n",
	} {
		proc := fakeProc(t, []string{"--config=/k.yaml"}, cgroup, map[string]string{"/k.yaml": "featureGates: {ResourceHealthStatus: false}\n"})
		if g, err := Read(t.Context(), proc, socket); err == nil || !strings.Contains(err.Error(), "in a pod's cgroup") {
			t.Errorf("cgroup %q: Read = %+v, %v; want refused as in a pod's cgroup", cgroup, g, err)
		}
	}
}

// A file the kubelet's flags name is read only when regular and small: a FIFO, a device,
// a link to one and a file past the limit are each refused at once.
func TestReadFileRefusesWhatIsNotASmallRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, MaxFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	exact := filepath.Join(dir, "exact")
	if err := os.WriteFile(exact, make([]byte, MaxFileBytes), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{fifo: "not a regular file", "/dev/zero": "not a regular file", link: "not a regular file", big: "larger than", dir: "not a regular file"} {
		done := make(chan error, 1)
		go func() { _, err := readFile(path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("readFile(%s) = %v, want %q", path, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("readFile(%s) blocked", path)
		}
	}
	if b, err := readFile(exact); err != nil || len(b) != MaxFileBytes {
		t.Errorf("readFile of exactly the limit: %d bytes, %v", len(b), err)
	}
}

// On the real kernel: a process named kubelet, its configuration a FIFO, runs beside the
// process serving the kubelet's socket; the gates are read from the socket's process,
// and the one named kubelet is never read (reading its FIFO would block).
func TestProcessNamedKubeletIsNotTheKubelet(t *testing.T) {
	dir := t.TempDir()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary to run as a process named kubelet")
	}
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	decoy := filepath.Join(dir, "kubelet")
	if err := os.WriteFile(decoy, b, 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "config.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(decoy, "60", "--config="+fifo)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(5 * time.Second); ; {
		comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "comm"))
		if strings.TrimSpace(string(comm)) == "kubelet" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the decoy's comm is %q", comm)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	g, err := Read(ctx, "/proc", kubeletSocket(t))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if g.PID != os.Getpid() {
		t.Errorf("the kubelet read is PID %d, want the socket's listener %d (the decoy is %d)", g.PID, os.Getpid(), cmd.Process.Pid)
	}
}
