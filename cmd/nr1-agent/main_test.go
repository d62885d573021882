// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/observe/cgroup/cgrouptest"
)

var binary string

func TestMain(m *testing.M) {
	cgrouptest.Main()
	dir, err := os.MkdirTemp("", "nr1-agent-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "nr1-agent")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		panic(string(out))
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// node lays out a sysfs tree with the NR1 driver's default attributes, the device
// files, and a kubelet dir, and returns the flags pointing the agent at them.
func node(t *testing.T, computeCapacity string) (args []string, kubelet string) {
	t.Helper()
	root := t.TempDir()
	dev := filepath.Join(root, "sys/class/neureality/nr1_0")
	kubelet = filepath.Join(root, "kubelet")
	for _, d := range []string{dev, filepath.Join(root, "dev"), kubelet} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(dev, "compute_dma_memory_mb"): computeCapacity, filepath.Join(dev, "cpu_dma_memory_mb"): "512",
		filepath.Join(dev, "docker_partition_mb"): "13417", filepath.Join(dev, "ai_hypervisor_queues"): "65536",
		filepath.Join(dev, "health"): "ok",
	}
	for p, v := range files {
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(root, "config.yaml")
	body := "apiVersion: nr1.neureality.ai/v1alpha1\nkind: AgentConfig\nnr1:\n  resources:\n"
	for _, r := range []string{"compute_dma_memory", "cpu_dma_memory", "ai_hypervisor_queue"} {
		p := filepath.Join(root, "dev", r)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		body += "    " + r + ":\n      files: [{path: " + p + "}]\n"
	}
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--config", cfg, "--path.sysfs", filepath.Join(root, "sys"), "--path.kubelet", kubelet, "--log.format", "text", "--metrics-addr", "127.0.0.1:0", "--debug-addr", ""}, kubelet
}

func TestBadConfigurationExitsNonZeroNamingTheField(t *testing.T) {
	args, _ := node(t, "116244")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: nr1.neureality.ai/v1alpha1\nkind: AgentConfig\nnr1:\n  resources:\n    cpu_dma_memory:\n      capacity: -4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tooBig, _ := node(t, "500000")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"negative capacity", []string{"--config", bad}, []string{"nr1.resources.cpu_dma_memory.capacity: must not be negative, got -4"}},
		{"capacity that cannot be advertised", tooBig, []string{"nr1.resources.compute_dma_memory (capacity from sysfs)", "500000 devices", "over the safe limit"}},
		{"bad flag value", append(args, "--log.level", "chatty"), []string{"log.level", `"chatty"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			cmd := exec.Command(binary, tt.args...)
			cmd.Stderr = &stderr
			err := cmd.Run()
			if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() == 0 {
				t.Fatalf("exit %v, want non-zero; stderr %s", err, stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
		})
	}
}

func TestSIGTERMStopsInOrder(t *testing.T) {
	args, kubelet := node(t, "116244")
	var stderr bytes.Buffer
	cmd := exec.Command(binary, args...)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if s, _ := filepath.Glob(filepath.Join(kubelet, "device-plugins", "nr1-ai_hypervisor_queue-*.sock")); len(s) == 1 {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("plugin socket never appeared; stderr:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v; stderr:\n%s", err, stderr.String())
	}
	entries, _ := os.ReadDir(filepath.Join(kubelet, "device-plugins"))
	if len(entries) != 0 {
		t.Errorf("sockets left after SIGTERM: %v", entries)
	}
	if !strings.Contains(stderr.String(), "nr1-agent stopped") {
		t.Errorf("no orderly stop in log:\n%s", stderr.String())
	}
}
