// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/cli/agents"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// kubectlNR1 runs `kubectl nr1 …` as an operator would: kubectl finding the plugin
// (bin/kubectl-nr1, built by make) on PATH, with the admin kubeconfig.
func kubectlNR1(t *testing.T, stdin []byte, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("kubectl", append([]string{"nr1"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(repo, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl nr1 %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

func topJSON(t *testing.T, args ...string) (*agents.CG, error) {
	t.Helper()
	out, err := kubectlNR1(t, nil, append([]string{"top", "-o", "json"}, args[1:]...)...)
	if err != nil {
		return nil, err
	}
	var v struct{ Nodes []*agents.Node }
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return nil, fmt.Errorf("top -o json: %w\n%s", err, out)
	}
	for _, n := range v.Nodes {
		if n.Error != "" {
			return nil, fmt.Errorf("node %s: %s", n.Name, n.Error)
		}
		for _, c := range n.CGs {
			if c.Pod == args[0] {
				return c, nil
			}
		}
	}
	return nil, fmt.Errorf("no CG %s in\n%s", args[0], out)
}

// injectCG writes the CG of spec (a pod named name in namespace) with kubectl nr1
// inject and the seed's ResNet-50 resources.yaml (args: more of inject's flags),
// applies it, waits for it to run and for the agent to know it at 3 / 0 / 2392 / 7, and
// deletes it when the test ends.
func injectCG(t *testing.T, c kubernetes.Interface, spec, namespace, name string, args ...string) {
	t.Helper()
	args = append(append([]string{"inject"}, args...), "-f", filepath.Join(repo, "nr1", "testdata", "resnet50-resources.yaml"), "-")
	out, err := kubectlNR1(t, []byte(spec), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl nr1 %s:\n%s", strings.Join(args, " "), out)
	path := filepath.Join(t.TempDir(), name+".yaml")
	writeFile(t, path, []byte(out))
	run(t, "kubectl", "apply", "-f", path)
	t.Cleanup(func() { _ = exec.Command("kubectl", "delete", "--wait=true", "--timeout=60s", "-f", path).Run() })
	pod, err := c.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, name+" runs", func() error {
		p, err := c.CoreV1().Pods(namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return allRunning(p)
	})
	eventually(t, 30*time.Second, name+" known to the agent at 3 / 0 / 2392 / 7", func() error {
		cg, err := topJSON(t, name, "-n", namespace)
		if err != nil {
			return err
		}
		for r, want := range (nr1.Amounts{3, 0, 2392, 7}) {
			if got := known(cg.Allocation[r]); got != float64(want) {
				return fmt.Errorf("%s allocated %v", nr1.Resource(r).Short(), got)
			}
		}
		return nil
	})
	out, err = kubectlNR1(t, nil, "explain", "-n", namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`(?m)^compute_dma_memory\s+3 MB\s`, `(?m)^ai_hypervisor_queue\s+7\s+7\s+1\.00\s+-$`, `Next: nothing: the CG is within its allocation\.`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("kubectl nr1 explain %s: no %q in\n%s", name, want, out)
		}
	}
}

func known(q agents.Quantity) float64 {
	if q == nil {
		return -1
	}
	return *q
}

// TestKubectlNR1 runs the plugin against the real API server and agent: top shows the
// ResNet-50 example at 3 / 0 / 2392 / 7 with what it really holds; inject turns the
// toolchain's resources.yaml into a pod the cluster admits and runs and the agent knows
// at those amounts; explain tells a throttled-then-killed CG's story in order.
func TestKubectlNR1(t *testing.T) {
	c := client(t)
	t.Run("top", func(t *testing.T) {
		t.Parallel()
		pod := running(t, c, createPod(t, c, podFromFile(t, "device-plugin/resnet50-cg.yaml")))
		var cg *agents.CG
		eventually(t, 30*time.Second, "resnet50 in kubectl nr1 top, holding its 3 MB and 7 queues", func() error {
			var err error
			if cg, err = topJSON(t, pod.Name, "-A"); err != nil {
				return err
			}
			if known(cg.Usage[nr1.ComputeDMAMemory]) != 3 || known(cg.Usage[nr1.HypervisorQueue]) != 7 {
				return fmt.Errorf("usage %v", cg.Usage)
			}
			if p := known(cg.Usage[nr1.DockerPartition]); p <= 0 || p > 2392 {
				return fmt.Errorf("docker partition used %v MB: want the image and writable layer, within 2392", p)
			}
			return nil
		})
		for r, want := range (nr1.Amounts{3, 0, 2392, 7}) {
			if got := known(cg.Allocation[r]); got != float64(want) {
				t.Errorf("%s allocated %v, want %d", nr1.Resource(r).Short(), got, want)
			}
		}
		table, err := kubectlNR1(t, nil, "top", "-A")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kubectl nr1 top -A:\n%s", table)
		row := regexp.MustCompile(`(?m)^default\s+resnet50\s+\S+\s+3/3\s+0/0\s+[0-9.]+/2392\s+7/7\s+1\.00 `)
		if !row.MatchString(table) {
			t.Errorf("no resnet50 row at 3/3 0/0 …/2392 7/7 in\n%s", table)
		}
		if !regexp.MustCompile(`(?m)^\S+\s+compute_dma_memory\s+116244\s+116244\s`).MatchString(table) {
			t.Errorf("no node capacity in\n%s", table)
		}
		// -n scopes the CGs to a namespace; another namespace has none of them.
		if out, err := kubectlNR1(t, nil, "top", "-n", "kube-system"); err != nil || strings.Contains(out, "resnet50") {
			t.Errorf("top -n kube-system shows resnet50 (%v):\n%s", err, out)
		}
	})
	t.Run("an operator with view and nr1-agent-reader", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		const operator, viewer = "nr1-e2e-operator", "nr1-e2e-viewer"
		for _, user := range []string{operator, viewer} {
			crb := &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: user + "-view"},
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
				Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}},
			}
			if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{}) })
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: operator, Namespace: "nr1-system"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "nr1-agent-reader"},
			Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: operator}},
		}
		if _, err := c.RbacV1().RoleBindings("nr1-system").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.RbacV1().RoleBindings("nr1-system").Delete(ctx, rb.Name, metav1.DeleteOptions{}) })
		eventually(t, 10*time.Second, "kubectl nr1 top as an operator bound to view and nr1-agent-reader", func() error {
			out, err := kubectlNR1(t, nil, "top", "-A", "--as", operator)
			if err != nil {
				return err
			}
			if !regexp.MustCompile(`(?m)^\S+\s+ai_hypervisor_queue\s+65536\s`).MatchString(out) {
				return fmt.Errorf("no node capacity in\n%s", out)
			}
			return nil
		})
		// view alone cannot proxy to the agents: the node is unknown, and the exit says so.
		out, err := kubectlNR1(t, nil, "top", "-A", "--as", viewer)
		if err == nil || !strings.Contains(err.Error(), "1 of 1 agents could not be read") || !strings.Contains(out, "<unknown>") || !strings.Contains(out, "pods/proxy") {
			t.Errorf("view alone: %v\n%s", err, out)
		}
	})
	t.Run("inject", func(t *testing.T) {
		t.Parallel()
		spec := `apiVersion: v1
kind: Pod
metadata: {name: injected, namespace: default}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  nodeSelector: {neureality.ai/nr1: "true"}
  containers:
    - name: health-handler
      image: nr1.local/nr1-load:dev
      imagePullPolicy: Never
      args: [--compute-dma-mb=1, --queues=7]
`
		injectCG(t, c, spec, "default", "injected")
		// A resources.yaml the toolchain would not write is refused with its line.
		bad := filepath.Join(t.TempDir(), "resources.yaml")
		writeFile(t, bad, []byte("neureality.ai/compute_dma_memory_in_mb: 3\nneureality.ai/cpu_dma_memory_in_mb: -1\n"))
		if _, err := kubectlNR1(t, []byte(spec), "inject", "-f", bad, "-"); err == nil || !strings.Contains(err.Error(), "line 2: neureality.ai/cpu_dma_memory_in_mb: value -1 is negative") {
			t.Errorf("a negative amount: %v", err)
		}
	})
	t.Run("explain: throttled, then killed", func(t *testing.T) {
		t.Parallel()
		pod := running(t, c, createPod(t, c, loadPod("explained", "--compute-dma-mb=2", "--step=3s:compute=4")))
		waitReason(t, c, pod, "NR1Throttled", 30*time.Second)
		out, err := kubectlNR1(t, nil, "explain", "-n", pod.Namespace, pod.Name)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kubectl nr1 explain, throttled:\n%s", out)
		for _, want := range []string{`Throttle: attached`, `(?m)^compute_dma_memory\s+3 MB\s+4 MB\s+1\.33\s+over since .*; next kill at`, `Next: kill at`} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("throttled: no %q", want)
			}
		}
		waitReason(t, c, pod, "NR1Killed", 40*time.Second)
		terminated(t, c, pod, 30*time.Second)
		out, err = kubectlNR1(t, nil, "explain", "-n", pod.Namespace, pod.Name)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kubectl nr1 explain, killed:\n%s", out)
		steps := regexp.MustCompile(`(?m)^  \d\d:\d\d:\d\d \([^)]*\)\s+(\S+)\s+\S+\s+(NR1\w+)`).FindAllStringSubmatch(out, -1)
		var told []string
		for _, s := range steps {
			told = append(told, s[1]+" "+s[2])
		}
		if want := "warn NR1LimitExceeded,throttle NR1Throttled,kill NR1Killed"; strings.Join(told, ",") != want {
			t.Errorf("events told %q, want %q", strings.Join(told, ","), want)
		}
		if !strings.Contains(out, "terminated: Error, exit code 137") {
			t.Errorf("no killed container in\n%s", out)
		}
	})
}
