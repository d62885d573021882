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

// TestChartUpgrade: the previous chart installed with CGs running, one of them
// throttled, then helm upgrade to this chart: the agents are replaced, and no CG is
// acted on again, the throttle stays, and no container restarts.
func TestChartUpgrade(t *testing.T) {
	c := client(t)
	from := upgradeFrom(t)
	old := filepath.Join(t.TempDir(), "old")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := run(t, "git", "-C", repo, "archive", "--format=tar", from, "deploy/helm/nr1-agent")
	untar := exec.Command("tar", "-x", "-C", old)
	untar.Stdin = strings.NewReader(string(archive))
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("the chart of %s: %v: %s", from, err, out)
	}
	oldChart := filepath.Join(old, "deploy", "helm", "nr1-agent")
	values := filepath.Join(t.TempDir(), "upgrade.yaml")
	writeFile(t, values, []byte(upgradeValues))
	helm := func(verb, chart string, set ...string) {
		run(t, "helm", append([]string{verb, "nr1-agent", chart, "--namespace", "nr1-system", "--wait", "--timeout", "3m",
			"-f", filepath.Join(chart, "values-local.yaml"), "--set", "namespace.create=false", "-f", values}, append(runtimeValues(), set...)...)...)
	}

	makeWayForARelease(t, c)
	run(t, "kubectl", "create", "namespace", "nr1-system")
	run(t, "kubectl", "label", "namespace", "nr1-system", "pod-security.kubernetes.io/enforce=privileged")
	helm("install", oldChart)
	mustReadyAgent(t, c)
	time.Sleep(12 * time.Second) // the enforcement warm-up (10 s) after a start

	steady := running(t, c, createPod(t, c, loadPod("upgrade-steady", "--compute-dma-mb=3", "--queues=7")))
	over := running(t, c, createPod(t, c, loadPod("upgrade-over", "--compute-dma-mb=2", "--step=3s:compute=4")))
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
	for _, p := range []*corev1.Pod{steady, over} {
		before[p.Name] = strings.Split(reasons(nr1Events(t, c, p)), ",")
		statuses[p.Name] = podStatuses(t, c, p)
	}
	if got := strings.Join(before[steady.Name], ","); got != "" {
		t.Fatalf("upgrade-steady acted on before the upgrade: %s", got)
	}

	oldAgent, err := readyAgent(c)
	if err != nil {
		t.Fatal(err)
	}
	// A release's new version labels change the agents' pod template; between two commits
	// of one version, a changed configuration does (checksum/config).
	helm("upgrade", filepath.Join(repo, "deploy", "helm", "nr1-agent"), "--set", "config.log.level=debug")
	eventually(t, 2*time.Minute, "the upgraded agent ready", func() error {
		a, err := readyAgent(c)
		if err == nil && a.UID == oldAgent.UID {
			err = fmt.Errorf("still the agent of the old chart")
		}
		return err
	})
	time.Sleep(15 * time.Second) // past the new agent's warm-up, and several samples
	agentShows("upgrade-over still throttled by the new agent", throttled)

	for _, p := range []*corev1.Pod{steady, over} {
		if got, was := reasons(nr1Events(t, c, p)), strings.Join(before[p.Name], ","); got != was {
			t.Errorf("%s: Events %s after the upgrade, %s before: acted on again", p.Name, got, was)
		}
		now := podStatuses(t, c, p)
		for i, s := range now {
			if i >= len(statuses[p.Name]) || s.ContainerID != statuses[p.Name][i].ContainerID || s.RestartCount != 0 || s.State.Running == nil {
				t.Errorf("%s: container %s %s (restarts %d), was %s: restarted by the upgrade", p.Name, s.Name, containerState(s), s.RestartCount, statuses[p.Name][i].ContainerID)
			}
		}
	}
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
