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
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	sigsyaml "sigs.k8s.io/yaml"

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

// upgradeFrom is the commit whose release is upgraded from: NR1_UPGRADE_FROM, else the
// newest release tag before HEAD, else the commit before HEAD.
func upgradeFrom(t *testing.T) string {
	if ref := os.Getenv("NR1_UPGRADE_FROM"); ref != "" {
		return ref
	}
	if tag, err := runErr("git", "-C", repo, "describe", "--tags", "--abbrev=0", "--match", "v*", "HEAD~1"); err == nil {
		return strings.TrimSpace(string(tag))
	}
	return "HEAD~1"
}

// previous is the previous release as pushed to the stack's registry, once per run: its
// version.
var previous struct {
	sync.Mutex
	version string
}

// releasePrevious releases the previous release (upgradeFrom) to the stack's registry
// as its maintainers would have: its tree checked out in a worktree, its own make image,
// and make release's script pushing that image and that tree's chart. It returns the
// release's version (the chart's is without its v).
func releasePrevious(t *testing.T) string {
	t.Helper()
	previous.Lock()
	defer previous.Unlock()
	if previous.version != "" {
		return previous.version
	}
	registry, ca := os.Getenv("NR1_REGISTRY"), os.Getenv("NR1_REGISTRY_CA")
	if registry == "" || ca == "" {
		t.Fatal("NR1_REGISTRY and NR1_REGISTRY_CA unset: run under make e2e, or after eval $(deploy/local/stack.sh env)")
	}
	old := filepath.Join(t.TempDir(), "old")
	run(t, "git", "-C", repo, "worktree", "add", "--detach", old, upgradeFrom(t))
	defer func() { _, _ = runErr("git", "-C", repo, "worktree", "remove", "--force", old) }()
	version := strings.TrimSpace(string(run(t, "make", "-s", "-C", old, "version")))
	if current := strings.TrimSpace(string(run(t, "make", "-s", "-C", repo, "version"))); version == current {
		t.Fatalf("the previous release is this one (%s): set NR1_UPGRADE_FROM", version)
	}
	run(t, "make", "-s", "-C", old, "image")
	release := exec.Command(filepath.Join(repo, "deploy", "dist", "release.sh"), registry, version)
	release.Env = append(os.Environ(), "REGISTRY_CA="+ca,
		"NR1_IMAGES="+filepath.Join(old, "_output", "images"), "NR1_CHART="+filepath.Join(old, "deploy", "helm", "nr1-agent"))
	if out, err := release.CombinedOutput(); err != nil {
		t.Fatalf("releasing %s: %v\n%s", version, err, out)
	}
	previous.version = version
	return version
}

// stackValues is a values file of what the stack's simulated NR1 needs of the
// configuration, without the stack's image: a released chart names its own.
func stackValues(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "deploy", "helm", "nr1-agent", "values-local.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var local map[string]any
	if err := sigsyaml.Unmarshal(b, &local); err != nil {
		t.Fatal(err)
	}
	delete(local, "image")
	delete(local, "namespace")
	if b, err = sigsyaml.Marshal(local); err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(t.TempDir(), "stack.yaml")
	writeFile(t, values, b)
	return values
}

// handover is what an agent leaves to the next: the CGs as they were, which the next
// must take over as they are.
type handover struct {
	c           kubernetes.Interface
	cgs         []*corev1.Pod
	throttled   *regexp.Regexp // in the agent's metrics while the throttle stays
	events      map[string]string
	statuses    map[string][]corev1.ContainerStatus
	allocations map[string]nr1.Amounts
}

// before records the CGs as the running agent has them, the throttled one among them:
// their NR1 Events, containers and known allocations.
func before(t *testing.T, c kubernetes.Interface, throttled *corev1.Pod, cgs ...*corev1.Pod) *handover {
	t.Helper()
	h := &handover{c: c, cgs: cgs, events: map[string]string{}, statuses: map[string][]corev1.ContainerStatus{}, allocations: map[string]nr1.Amounts{},
		throttled: regexp.MustCompile(`(?m)^nr1_throttled\{[^}]*pod="` + regexp.QuoteMeta(throttled.Name) + `"[^}]*\} 1$`)}
	h.agentShows(t, throttled.Name+" throttled")
	for _, p := range cgs {
		h.events[p.Name] = reasons(nr1Events(t, c, p))
		h.statuses[p.Name] = podStatuses(t, c, p)
		cg, err := cgView(mustReadyAgent(t, c), p)
		if err != nil || !cg.AllocationKnown {
			t.Fatalf("%s before the agent is replaced: %v %+v", p.Name, err, cg)
		}
		h.allocations[p.Name] = cg.Allocation
	}
	return h
}

func (h *handover) agentShows(t *testing.T, what string) {
	t.Helper()
	eventually(t, 60*time.Second, what, func() error {
		agent, err := readyAgent(h.c)
		if err != nil {
			return err
		}
		_, body, err := getMetrics(agent.Status.PodIP)
		if err == nil && !h.throttled.MatchString(body) {
			err = fmt.Errorf("the agent's metrics lack %s", h.throttled)
		}
		return err
	})
}

// replace does what, then waits for an agent of image other than the one before, past
// its warm-up, and checks that it took over the CGs as they were: none acted on again,
// none restarted, each allocation known as before, the throttle still on.
func (h *handover) replace(t *testing.T, what, image string, do func()) {
	t.Helper()
	was := mustReadyAgent(t, h.c)
	do()
	eventually(t, 2*time.Minute, what+": a new agent ready", func() error {
		a, err := readyAgent(h.c)
		switch {
		case err != nil:
			return err
		case a.UID == was.UID:
			return fmt.Errorf("still the agent before")
		case a.Spec.Containers[0].Image != image:
			return fmt.Errorf("the agent runs %s, want %s", a.Spec.Containers[0].Image, image)
		}
		return nil
	})
	time.Sleep(15 * time.Second) // past the new agent's warm-up, and several samples
	h.agentShows(t, "the throttle still on after "+what)
	agent := mustReadyAgent(t, h.c)
	for _, p := range h.cgs {
		if cg, err := cgView(agent, p); err != nil || !cg.AllocationKnown || cg.Allocation != h.allocations[p.Name] {
			t.Errorf("%s after %s: %v %+v, want its allocation %v known", p.Name, what, err, cg, h.allocations[p.Name])
		}
		if got := reasons(nr1Events(t, h.c, p)); got != h.events[p.Name] {
			t.Errorf("%s: Events %s after %s, %s before: acted on again", p.Name, got, what, h.events[p.Name])
		}
		for i, s := range podStatuses(t, h.c, p) {
			if i >= len(h.statuses[p.Name]) || s.ContainerID != h.statuses[p.Name][i].ContainerID || s.RestartCount != 0 || s.State.Running == nil {
				t.Errorf("%s: container %s %s (restarts %d), was %s: restarted by %s", p.Name, s.Name, containerState(s), s.RestartCount, h.statuses[p.Name][i].ContainerID, what)
			}
		}
	}
}

// TestChartUpgrade, in DRA mode: the previous release installed from the stack's
// registry with CGs running, one of them throttled, then helm upgrade to this chart and
// agent, then helm rollback to the previous: each time the agents are replaced, and no
// CG is acted on again, the throttle stays, each CG's allocation is known as before
// (each agent reads the other's checkpoints and pins, the prepared claims among them),
// no container restarts, and the budget gate goes on counting the CG that holds all the
// queues it booked, refusing it nothing. TestStrangersPath does the same in device-plugin mode.
func TestChartUpgrade(t *testing.T) {
	c := client(t)
	registry, ca := os.Getenv("NR1_REGISTRY"), os.Getenv("NR1_REGISTRY_CA")
	old := releasePrevious(t)
	values := filepath.Join(t.TempDir(), "upgrade.yaml")
	writeFile(t, values, []byte(upgradeValues))
	node := nodeName(t, c)
	t.Cleanup(func() { deleteNodeSlices(t, c, node) })

	makeWayForARelease(t, c)
	// The budget gate on: each agent takes over the gate the one before left, with the
	// counts of the CGs holding queues.
	run(t, "helm", append([]string{"install", "nr1-agent", "oci://" + registry + "/charts/nr1-agent", "--version", strings.TrimPrefix(old, "v"),
		"--namespace", "nr1-system", "--create-namespace", "--ca-file", ca, "--wait", "--timeout", "3m",
		"-f", stackValues(t), "--set", "config.mode=dra", "-f", values, "--set", "config.prevention.enabled=true", "--set", "image.pullPolicy=IfNotPresent"}, runtimeValues()...)...)
	oldImage := registry + "/nr1-agent:" + old
	if a := mustReadyAgent(t, c); a.Spec.Containers[0].Image != oldImage {
		t.Fatalf("the previous release's agent runs %s, want %s", a.Spec.Containers[0].Image, oldImage)
	}
	time.Sleep(12 * time.Second) // the enforcement warm-up (10 s) after a start

	newNamespace(t, c, draNS)
	booked := nr1.Amounts{3, 0, nr1LoadImageMB(t) + 4, 7}
	steady := runningPod(t, c, draCG(t, c, "upgrade-steady", booked, "--compute-dma-mb=3", "--queues=7"))
	over := runningPod(t, c, draCG(t, c, "upgrade-over", booked, "--compute-dma-mb=2", "--step=3s:compute=4"))
	waitReason(t, c, over, "NR1Throttled", 40*time.Second)
	h := before(t, c, over, steady, over)
	if got := h.events[steady.Name]; got != "" {
		t.Fatalf("upgrade-steady acted on before the upgrade: %s", got)
	}
	chart := filepath.Join(repo, "deploy", "helm", "nr1-agent")
	gateHolds(t, c, "before the upgrade", steady, 7)
	h.replace(t, "the upgrade", "nr1.local/nr1-agent:dev", func() {
		run(t, "helm", append([]string{"upgrade", "nr1-agent", chart, "--namespace", "nr1-system", "--wait", "--timeout", "3m",
			"-f", filepath.Join(chart, "values-local.yaml"), "--set", "namespace.create=false", "--set", "config.mode=dra", "-f", values, "--set", "config.prevention.enabled=true"},
			runtimeValues()...)...)
	})
	gateHolds(t, c, "after the upgrade", steady, 7)
	h.replace(t, "the rollback", oldImage, func() {
		run(t, "helm", "rollback", "nr1-agent", "1", "--namespace", "nr1-system", "--wait", "--timeout", "3m")
	})
	gateHolds(t, c, "after the rollback", steady, 7)
}

// gateHolds checks that the budget gate runs and counts p holding held queues, as many
// as it booked, and has refused it nothing: the agent took over the gate with its count.
func gateHolds(t *testing.T, c kubernetes.Interface, when string, p *corev1.Pod, held float64) {
	t.Helper()
	eventually(t, 30*time.Second, "the gate's count of "+p.Name+" "+when, func() error {
		agent, err := readyAgent(c)
		if err != nil {
			return err
		}
		_, body, err := getMetrics(agent.Status.PodIP)
		if err != nil {
			return err
		}
		series := func(name string) string {
			return fmt.Sprintf(`%s{namespace=%q,pod=%q,resource="ai_hypervisor_queue",uid=%q}`, name, p.Namespace, p.Name, p.UID)
		}
		for s, want := range map[string]float64{
			`nr1_gate_enabled{configured="true"}`: 1,
			series("nr1_gate_held"):               held,
			series("nr1_gate_booked"):             held,
			series("nr1_gate_refused_total"):      0,
		} {
			if v, ok := seriesValue(body, s); !ok || v != want {
				return fmt.Errorf("%s = %v (found %v), want %v", s, v, ok, want)
			}
		}
		return nil
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
