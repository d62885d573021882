// SPDX-License-Identifier: Apache-2.0

//go:build e2e

// Package e2e tests nr1-agent on the local node stack (deploy/local): a real kubelet,
// containerd or CRI-O, API server, scheduler and controller-manager, with the simulated
// NR1. Run with `make e2e` (`NR1_RUNTIME=crio make e2e` on CRI-O), which brings the
// stack up and tears it down.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// stackRuntime is the local stack's container runtime, containerd or crio, as
// `stack.sh env` says it.
func stackRuntime() string {
	if r := os.Getenv("NR1_RUNTIME"); r != "" {
		return r
	}
	return "containerd"
}

// runtimeValues are the chart's values for the stack's runtime: its socket, which the
// chart mounts.
func runtimeValues() []string {
	if stackRuntime() == "crio" {
		return []string{"--set", "config.runtime.endpoint=unix:///run/crio/crio.sock"}
	}
	return nil
}

// repo is the repository root, for manifests and scripts.
var repo = func() string {
	wd, _ := os.Getwd()
	return filepath.Join(wd, "..", "..")
}()

func client(t testing.TB) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatalf("KUBECONFIG=%q: %v (run through make e2e)", os.Getenv("KUBECONFIG"), err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// eventually polls cond every 250 ms until it returns nil or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func nodeName(t testing.TB, c kubernetes.Interface) string {
	t.Helper()
	nodes, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("want the one local node: %v %v", nodes, err)
	}
	return nodes.Items[0].Name
}

// podFromFile reads a Pod manifest from deploy/examples.
func podFromFile(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "deploy", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096).Decode(&pod); err != nil {
		t.Fatal(err)
	}
	return &pod
}

// createPod creates pod, deleting any leftover of the same name first, and deletes it
// when the test ends.
func createPod(t *testing.T, c kubernetes.Interface, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pods := c.CoreV1().Pods(pod.Namespace)
	zero := int64(0)
	_ = pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	eventually(t, 30*time.Second, "old pod "+pod.Name+" gone", func() error {
		if _, err := pods.Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	return created
}

func podEvents(t *testing.T, c kubernetes.Interface, pod *corev1.Pod) []corev1.Event {
	t.Helper()
	evs, err := c.CoreV1().Events(pod.Namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + pod.Name + ",involvedObject.uid=" + string(pod.UID),
	})
	if err != nil {
		t.Fatal(err)
	}
	return evs.Items
}

// running waits until pod runs and returns its latest state.
func running(t *testing.T, c kubernetes.Interface, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	eventually(t, 60*time.Second, pod.Name+" Running", func() error {
		p, err := c.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod = p
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	return pod
}

// isReady says whether the pod's Ready condition is true.
func isReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// run runs a command of the local stack's, failing the test with its output.
func run(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// runErr runs a command and returns its output, or an error with its stderr.
func runErr(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func inodeOf(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
