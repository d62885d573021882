// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// upgradeValues keep a throttled CG throttled: a compute DMA ladder that ends at the
// throttle, so that the CG is neither killed nor let go while the agents are replaced.
const upgradeValues = `config:
  enforcement:
    resources:
      compute_dma_memory:
        ladder: [{action: warn, after: 0s}, {action: throttle, after: 2s}]
`

// upgradeFrom is the commit whose chart is upgraded from: NR1_UPGRADE_FROM, else the
// newest release tag, else the commit before HEAD.
func upgradeFrom(t *testing.T) string {
	if ref := os.Getenv("NR1_UPGRADE_FROM"); ref != "" {
		return ref
	}
	if tag, err := runErr("git", "-C", repo, "describe", "--tags", "--abbrev=0", "--match", "v*"); err == nil {
		return strings.TrimSpace(string(tag))
	}
	return "HEAD~1"
}

// previousRelease checks out from in a worktree, builds its images (its own make
// image) and pushes its agent's image to the stack's registry: the chart's directory in
// that tree, and the image's repository and tag.
func previousRelease(t *testing.T, from string) (chart, repository, tag string) {
	t.Helper()
	registry := os.Getenv("NR1_REGISTRY")
	if registry == "" {
		t.Fatal("NR1_REGISTRY unset: run under make e2e, or after eval $(deploy/local/stack.sh env)")
	}
	old := filepath.Join(t.TempDir(), "old")
	run(t, "git", "-C", repo, "worktree", "add", "--detach", old, from)
	t.Cleanup(func() { _, _ = runErr("git", "-C", repo, "worktree", "remove", "--force", old) })
	tag = strings.TrimSpace(string(run(t, "make", "-s", "-C", old, "version")))
	run(t, "make", "-s", "-C", old, "image")
	layout := filepath.Join(t.TempDir(), "layout")
	if err := os.Mkdir(layout, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "tar", "-xf", filepath.Join(old, "_output", "images", "nr1-agent.tar"), "-C", layout)
	repository = registry + "/nr1-agent-previous"
	push := exec.Command("crane", "push", layout, repository+":"+tag)
	push.Env = append(os.Environ(), "SSL_CERT_FILE="+os.Getenv("NR1_REGISTRY_CA"))
	if out, err := push.CombinedOutput(); err != nil {
		t.Fatalf("crane push %s:%s: %v\n%s", repository, tag, err, out)
	}
	return filepath.Join(old, "deploy", "helm", "nr1-agent"), repository, tag
}

// TestChartUpgrade: the previous release (its chart and its agent's image, built from
// its tree) installed with CGs running, one of them throttled, then helm upgrade to this
// chart and agent, then helm rollback to the previous: each time the agents are
// replaced, and no CG is acted on again, the throttle stays, each CG's allocation is
// known as before (each agent reads the other's checkpoints and pins: in DRA mode the
// prepared claims), and no container restarts. In both modes.
func TestChartUpgrade(t *testing.T) {
	c := client(t)
	oldChart, oldRepository, oldTag := previousRelease(t, upgradeFrom(t))
	for _, mode := range []string{"devicePlugin", "dra"} {
		t.Run(mode, func(t *testing.T) { chartUpgrade(t, c, mode, oldChart, oldRepository, oldTag) })
	}
}

func chartUpgrade(t *testing.T, c kubernetes.Interface, mode, oldChart, oldRepository, oldTag string) {
	values := filepath.Join(t.TempDir(), "upgrade.yaml")
	writeFile(t, values, []byte(upgradeValues))
	helm := func(verb, chart string, set ...string) {
		run(t, "helm", append([]string{verb, "nr1-agent", chart, "--namespace", "nr1-system", "--wait", "--timeout", "3m",
			"-f", filepath.Join(chart, "values-local.yaml"), "--set", "namespace.create=false", "--set", "config.mode=" + mode, "-f", values},
			append(runtimeValues(), set...)...)...)
	}
	if mode == "dra" {
		node := nodeName(t, c)
		t.Cleanup(func() { deleteNodeSlices(t, c, node) })
	}

	makeWayForARelease(t, c)
	run(t, "kubectl", "create", "namespace", "nr1-system")
	run(t, "kubectl", "label", "namespace", "nr1-system", "pod-security.kubernetes.io/enforce=privileged")
	helm("install", oldChart, "--set", "image.repository="+oldRepository, "--set", "image.tag="+oldTag, "--set", "image.pullPolicy=IfNotPresent")
	if a := mustReadyAgent(t, c); a.Spec.Containers[0].Image != oldRepository+":"+oldTag {
		t.Fatalf("the previous release's agent runs %s, want %s:%s", a.Spec.Containers[0].Image, oldRepository, oldTag)
	}
	time.Sleep(12 * time.Second) // the enforcement warm-up (10 s) after a start

	var steady, over *corev1.Pod
	if mode == "dra" {
		newNamespace(t, c, draNS)
		booked := nr1.Amounts{3, 0, nr1LoadImageMB(t) + 4, 7}
		steady = runningPod(t, c, draCG(t, c, "upgrade-steady", booked, "--compute-dma-mb=3", "--queues=7"))
		over = runningPod(t, c, draCG(t, c, "upgrade-over", booked, "--compute-dma-mb=2", "--step=3s:compute=4"))
	} else {
		steady = running(t, c, createPod(t, c, loadPod("upgrade-steady", "--compute-dma-mb=3", "--queues=7")))
		over = running(t, c, createPod(t, c, loadPod("upgrade-over", "--compute-dma-mb=2", "--step=3s:compute=4")))
	}
	waitReason(t, c, over, "NR1Throttled", 40*time.Second)
	throttled := regexp.MustCompile(`(?m)^nr1_throttled\{[^}]*pod="upgrade-over"[^}]*\} 1$`)
	agentShows := func(what string, re *regexp.Regexp) {
		eventually(t, 60*time.Second, what, func() error {
			agent, err := readyAgent(c)
			if err != nil {
				return err
			}
			_, body, err := getMetrics(agent.Status.PodIP)
			if err == nil && !re.MatchString(body) {
				err = fmt.Errorf("the agent's metrics lack %s", re)
			}
			return err
		})
	}
	agentShows("upgrade-over throttled", throttled)
	before := map[string][]string{}
	statuses := map[string][]corev1.ContainerStatus{}
	allocations := map[string]nr1.Amounts{}
	for _, p := range []*corev1.Pod{steady, over} {
		before[p.Name] = strings.Split(reasons(nr1Events(t, c, p)), ",")
		statuses[p.Name] = podStatuses(t, c, p)
		cg, err := cgView(mustReadyAgent(t, c), p)
		if err != nil || !cg.AllocationKnown {
			t.Fatalf("%s before the upgrade: %v %+v", p.Name, err, cg)
		}
		allocations[p.Name] = cg.Allocation
	}
	if got := strings.Join(before[steady.Name], ","); got != "" {
		t.Fatalf("upgrade-steady acted on before the upgrade: %s", got)
	}

	// replace does what, then waits for an agent of image other than the one before,
	// past its warm-up, and checks that it took over the CGs as they were.
	replace := func(what, image string, do func()) {
		previous := mustReadyAgent(t, c)
		do()
		eventually(t, 2*time.Minute, what+": a new agent ready", func() error {
			a, err := readyAgent(c)
			switch {
			case err != nil:
				return err
			case a.UID == previous.UID:
				return fmt.Errorf("still the agent before")
			case a.Spec.Containers[0].Image != image:
				return fmt.Errorf("the agent runs %s, want %s", a.Spec.Containers[0].Image, image)
			}
			return nil
		})
		time.Sleep(15 * time.Second) // past the new agent's warm-up, and several samples
		agentShows("upgrade-over still throttled after "+what, throttled)
		agent := mustReadyAgent(t, c)
		for _, p := range []*corev1.Pod{steady, over} {
			if cg, err := cgView(agent, p); err != nil || !cg.AllocationKnown || cg.Allocation != allocations[p.Name] {
				t.Errorf("%s after %s: %v %+v, want its allocation %v known", p.Name, what, err, cg, allocations[p.Name])
			}
			if got, was := reasons(nr1Events(t, c, p)), strings.Join(before[p.Name], ","); got != was {
				t.Errorf("%s: Events %s after %s, %s before: acted on again", p.Name, got, what, was)
			}
			now := podStatuses(t, c, p)
			for i, s := range now {
				if i >= len(statuses[p.Name]) || s.ContainerID != statuses[p.Name][i].ContainerID || s.RestartCount != 0 || s.State.Running == nil {
					t.Errorf("%s: container %s %s (restarts %d), was %s: restarted by %s", p.Name, s.Name, containerState(s), s.RestartCount, statuses[p.Name][i].ContainerID, what)
				}
			}
		}
	}
	replace("the upgrade", "nr1.local/nr1-agent:dev", func() { helm("upgrade", filepath.Join(repo, "deploy", "helm", "nr1-agent")) })
	replace("the rollback", oldRepository+":"+oldTag, func() {
		run(t, "helm", "rollback", "nr1-agent", "1", "--namespace", "nr1-system", "--wait", "--timeout", "3m")
	})
}

// makeWayForARelease removes the stack's agent (kustomize) for a Helm release of the test's
// to take its place, and brings it back after the test, the release uninstalled.
func makeWayForARelease(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	run(t, "kubectl", "-n", "nr1-system", "delete", "daemonset", "nr1-agent", "--cascade=foreground", "--ignore-not-found")
	run(t, "kubectl", "delete", "-k", strings.TrimSpace(string(run(t, filepath.Join(repo, "deploy", "local", "stack.sh"), "kustomization", "local"))), "--ignore-not-found", "--wait")
	eventually(t, 2*time.Minute, "namespace nr1-system gone", func() error {
		_, err := c.CoreV1().Namespaces().Get(context.Background(), "nr1-system", metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("namespace nr1-system: %w", err)
		}
		return errors.New("namespace nr1-system still there")
	})
	t.Cleanup(func() {
		_, _ = runErr("helm", "uninstall", "nr1-agent", "--namespace", "nr1-system", "--wait")
		_, _ = runErr("kubectl", "delete", "namespace", "nr1-system", "--wait")
		run(t, filepath.Join(repo, "deploy", "local", "stack.sh"), "deploy")
	})
}

func podStatuses(t *testing.T, c kubernetes.Interface, p *corev1.Pod) []corev1.ContainerStatus {
	t.Helper()
	got, err := c.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Status.ContainerStatuses
}
