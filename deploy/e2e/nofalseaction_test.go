// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// noFalseNS is TestNoFalseAction's namespace, deleted at its end.
const noFalseNS = "nr1-nofalse"

// actionKinds are the enforcement actions that must not happen to a CG within its
// allocation.
var actionKinds = []string{"warn", "throttle", "kill", "evict"}

// exactCG is a CG of TestNoFalseAction: its processes hold exactly its allocation of
// DMA memory and queues, and stay within its docker partition (the image, what it
// writes, and a MB for its status files).
type exactCG struct {
	name        string
	alloc       nr1.Amounts // the docker partition is set from the image's size
	writeMB     int64
	fork        int  // health-handler's --fork
	sidecar     bool // a second container mapping the same ranges of the same DMA files
	sidecarFork int
	init        bool // an init container running nr1-load briefly
	pod         *corev1.Pod
}

func exactCGs() []*exactCG {
	a := func(compute, cpu, queues nr1.Units) nr1.Amounts {
		var x nr1.Amounts
		x[nr1.ComputeDMAMemory], x[nr1.CPUDMAMemory], x[nr1.HypervisorQueue] = compute, cpu, queues
		return x
	}
	return []*exactCG{
		{name: "plain-a", alloc: a(3, 0, 7), writeMB: 4},
		{name: "plain-b", alloc: a(8, 2, 1)},
		{name: "fork-a", alloc: a(2, 1, 4), fork: 4},
		{name: "fork-b", alloc: a(5, 0, 2), fork: 4, writeMB: 2},
		{name: "fork-c", alloc: a(1, 0, 16), fork: 4},
		{name: "sidecar-a", alloc: a(3, 0, 3), sidecar: true},
		{name: "sidecar-b", alloc: a(6, 2, 5), sidecar: true, writeMB: 2},
		{name: "sidecar-c", alloc: a(4, 1, 1), sidecar: true},
		{name: "fork-sidecar", alloc: a(2, 1, 6), fork: 4, sidecar: true, sidecarFork: 2},
		{name: "init", alloc: a(3, 1, 4), init: true, writeMB: 1},
	}
}

// holdArgs are nr1-load's flags to hold a's DMA memory and queues.
func holdArgs(a nr1.Amounts) []string {
	return []string{
		"--compute-dma-mb=" + strconv.FormatInt(int64(a[nr1.ComputeDMAMemory]), 10),
		"--cpu-dma-mb=" + strconv.FormatInt(int64(a[nr1.CPUDMAMemory]), 10),
		"--queues=" + strconv.FormatInt(int64(a[nr1.HypervisorQueue]), 10),
	}
}

// simDMAFiles are the simulated NR1's DMA files (deploy/local/stack.sh's NR1_SIM_DIR),
// by the path containers see them at.
var simDMAFiles = map[string]string{
	"/dev/nr1_0_compute_dma": "/run/nr1-sim/dev/nr1_0_compute_dma",
	"/dev/nr1_0_cpu_dma":     "/run/nr1-sim/dev/nr1_0_cpu_dma",
}

func (cg *exactCG) build(imageMB nr1.Units) *corev1.Pod {
	cg.alloc[nr1.DockerPartition] = imageMB + nr1.Units(cg.writeMB) + 1
	hh := loadContainer("health-handler", append(holdArgs(cg.alloc), "--write-mb="+strconv.FormatInt(cg.writeMB, 10), "--fork="+strconv.Itoa(cg.fork))...)
	hh.Resources = nr1Requests(cg.alloc)
	grace := int64(1)
	noToken := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: cg.name, Namespace: noFalseNS, Labels: map[string]string{"neureality.ai/compute-graph": cg.name}},
		Spec: corev1.PodSpec{
			// A container the agent stopped is started again: its restart count tells, and
			// the agent's /metrics must survive it.
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken: &noToken,
			Containers:                   []corev1.Container{hh},
		},
	}
	if cg.sidecar {
		// The pod sharing its DMA buffers: the same ranges of the same files, reached
		// through hostPath as the ResNet-50 example's second container does.
		var dma nr1.Amounts
		dma[nr1.ComputeDMAMemory], dma[nr1.CPUDMAMemory] = cg.alloc[nr1.ComputeDMAMemory], cg.alloc[nr1.CPUDMAMemory]
		side := loadContainer("dma-sharer", append(holdArgs(dma), "--fork="+strconv.Itoa(cg.sidecarFork))...)
		fileType := corev1.HostPathFile
		for _, inCtr := range []string{"/dev/nr1_0_compute_dma", "/dev/nr1_0_cpu_dma"} {
			vol := strings.ReplaceAll(strings.TrimPrefix(inCtr, "/dev/"), "_", "-")
			side.VolumeMounts = append(side.VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: inCtr})
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: simDMAFiles[inCtr], Type: &fileType},
			}})
		}
		pod.Spec.Containers = append(pod.Spec.Containers, side)
	}
	if cg.init {
		// Given nothing and holding nothing: a kubelet restart fails a pod whose init
		// container was given device-plugin resources when the plugin's devices are not
		// back yet (UnexpectedAdmissionError, kubernetes/kubernetes#124345 and #138446),
		// whatever the agent does.
		pod.Spec.InitContainers = []corev1.Container{loadContainer("setup", "--exit")}
	}
	return pod
}

// allRunning says why pod is not running every container, nil when it is.
func allRunning(p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("%s: phase %s %s %s", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	if len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return fmt.Errorf("%s: %d container statuses", p.Name, len(p.Status.ContainerStatuses))
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Running == nil {
			return fmt.Errorf("%s/%s: %s", p.Name, s.Name, containerState(s))
		}
	}
	return nil
}

func containerState(s corev1.ContainerStatus) string {
	switch {
	case s.State.Waiting != nil:
		return "waiting: " + s.State.Waiting.Reason + " " + s.State.Waiting.Message
	case s.State.Terminated != nil:
		return fmt.Sprintf("terminated: %s exit %d", s.State.Terminated.Reason, s.State.Terminated.ExitCode)
	}
	return "running"
}

func newNamespace(t testing.TB, c kubernetes.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	nss := c.CoreV1().Namespaces()
	gone := func() error {
		_, err := nss.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("namespace %s: %w", name, err)
		}
		return fmt.Errorf("namespace %s still there", name)
	}
	// Deleted again at every try, should the API server have been away at the first.
	deleted := func() error {
		_ = nss.Delete(ctx, name, metav1.DeleteOptions{})
		return gone()
	}
	eventually(t, 90*time.Second, "leftover namespace "+name+" gone", deleted)
	if _, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eventually(t, 90*time.Second, "namespace "+name+" deleted", deleted) })
	eventually(t, 30*time.Second, "default ServiceAccount in "+name, func() error {
		_, err := c.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// TestNoFalseAction: ten CGs holding exactly their allocation — plain, forking, sharing
// their DMA with a sidecar, with an init container — live through three kubelet
// restarts, a containerd restart, the agent's pod deleted and its DaemonSet rolled. The
// agent must not act on any of them, and its /metrics must answer every scrape.
//
// Before the first disruption and after each one, a CG in the same namespace goes to
// twice its allocation of compute DMA memory, CPU DMA memory or queues (in turn): the
// agent must still warn and kill it at once (the hard ratio), within overKillWithin of
// going over. The docker partition's ladder (evicted 20 s over) is too slow to repeat
// after every disruption: TestEnforcement and TestFaultAPIServerDownDuringEviction
// cover it.
func TestNoFalseAction(t *testing.T) {
	c := client(t)
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	t.Cleanup(func() { cancel(); bg.Wait() })
	stack := filepath.Join(repo, "deploy", "local", "stack.sh")

	began := time.Now()
	eventually(t, 60*time.Second, "the agent answers /debug/cgs", func() error {
		agent, err := readyAgent(c)
		if err != nil {
			return err
		}
		return debugJSON(agent, "/debug/cgs?limit=500", &debugSnapshot{})
	})

	scr := newScraper()
	bg.Add(1)
	go func() { defer bg.Done(); scr.run(ctx, c) }()

	newNamespace(t, c, noFalseNS)
	node := nodeName(t, c)
	imageMB := nr1LoadImageMB(t)
	cgs := exactCGs()
	for _, cg := range cgs {
		created, err := c.CoreV1().Pods(noFalseNS).Create(ctx, cg.build(imageMB), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cg.pod = created
	}
	eventually(t, 90*time.Second, "the ten CGs run every container", func() error {
		for _, cg := range cgs {
			p, err := c.CoreV1().Pods(noFalseNS).Get(ctx, cg.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := allRunning(p); err != nil {
				return err
			}
		}
		return nil
	})

	obs := &observer{cgs: cgs}
	bg.Add(1)
	go func() { defer bg.Done(); obs.run(ctx, c) }()
	start := time.Now()
	if err := obs.awaitKnown(start, "", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("the agent knows the ten CGs' allocations %v after they all ran", time.Since(start).Round(100*time.Millisecond))
	checkMeasured(t, c, cgs)

	// The disruptions, each followed by time for the agent to take several samples.
	type step struct {
		name   string
		settle time.Duration
		do     func() (replaced types.UID)
	}
	// A restarted kubelet admits pods before the agent's plugins have registered with it
	// again ("no healthy devices"): the next CG waits for the four registrations.
	restartKubelet := func() types.UID {
		before := -1
		eventually(t, 30*time.Second, "the agent's registrations read", func() error {
			if before = registrations(t, c); before < 0 {
				return fmt.Errorf("nr1_kubelet_registrations_total not read")
			}
			return nil
		})
		run(t, stack, "restart-kubelet")
		eventually(t, 60*time.Second, "the agent's four plugins registered with the restarted kubelet", func() error {
			if n := registrations(t, c); n < before+4 {
				return fmt.Errorf("%d registrations, %d before the restart", n, before)
			}
			return nil
		})
		return ""
	}
	steps := []step{
		{"kubelet restart 1", 15 * time.Second, restartKubelet},
		{"kubelet restart 2", 15 * time.Second, restartKubelet},
		{"kubelet restart 3", 15 * time.Second, restartKubelet},
		{"runtime restart", 10 * time.Second, func() types.UID { run(t, stack, "restart-runtime"); return "" }},
		{"agent pod deleted", 10 * time.Second, func() types.UID {
			agent := mustReadyAgent(t, c)
			if err := c.CoreV1().Pods("nr1-system").Delete(ctx, agent.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			return agent.UID
		}},
		// The new agent's warm-up and the longest ladder step fit in its settle time.
		{"agent DaemonSet rolled", 25 * time.Second, func() types.UID {
			agent := mustReadyAgent(t, c)
			patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"nr1.neureality.ai/e2e-rolled":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
			if _, err := c.AppsV1().DaemonSets("nr1-system").Patch(ctx, "nr1-agent", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			run(t, "kubectl", "-n", "nr1-system", "rollout", "status", "daemonset/nr1-agent", "--timeout=120s")
			return agent.UID
		}},
	}
	// An over-budget CG after each disruption, and one before the first, while the
	// agent takes samples of the ten.
	var overs []*overCase
	overBudget := func(after string, settle time.Duration) {
		from := time.Now()
		oc := runOverBudget(t, c, node, len(overs), after, imageMB)
		overs = append(overs, oc)
		t.Log(oc.line())
		time.Sleep(time.Until(from.Add(settle)))
	}
	overBudget("before the disruptions", 10*time.Second) // samples before the first disruption
	var timeline []string
	for _, s := range steps {
		began := time.Now()
		replaced := s.do()
		took := time.Since(began)
		// Not fatal: what the agent did to the CGs meanwhile is the finding.
		if err := obs.awaitKnown(began, replaced, 45*time.Second); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
		overBudget("after "+s.name, s.settle)
		r := obs.recovery(began, replaced)
		line := fmt.Sprintf("%s at %s (took %v): ", s.name, began.Format("15:04:05"), took.Round(100*time.Millisecond))
		if r.recovered {
			line += fmt.Sprintf("every allocation known %v after it began", r.knownAfter.Round(100*time.Millisecond))
		} else {
			line += "allocations not all known at the end of its settle time"
		}
		line += fmt.Sprintf("; %d reads not known, %d known with a wrong allocation", r.unknown, r.wrong)
		if r.firstWrong != "" {
			line += " (first: " + r.firstWrong + ")"
		}
		if r.over != "" {
			line += "; measured over: " + r.over
		}
		timeline = append(timeline, line)
		t.Log(line)
	}
	cancel()
	bg.Wait()

	t.Logf("/metrics: %d scrapes answered 200 of %d (%d while no agent was Ready)", scr.ok, scr.ok+len(scr.failures), scr.away)
	if n := len(scr.failures); n > 0 {
		t.Errorf("/metrics: %d scrapes failed; the first: %s; the last: %s", n, scr.failures[0], scr.failures[n-1])
	}
	checkOverBudget(t, c, overs)
	checkActions(t, c, scr, began, overs)
	checkUntouched(t, c, cgs, timeline)
}

// mustReadyAgent waits for the agent to be Ready: a test before may have rolled it.
func mustReadyAgent(t *testing.T, c kubernetes.Interface) *corev1.Pod {
	t.Helper()
	var agent *corev1.Pod
	defer logAgentsIfFailed(t, c, t.Failed())
	eventually(t, 2*time.Minute, "a Ready agent", func() error {
		var err error
		agent, err = readyAgent(c)
		return err
	})
	return agent
}

// checkMeasured compares what the agent measures of each CG with what it holds: DMA
// memory and queues exactly, the docker partition within the allocation.
func checkMeasured(t *testing.T, c kubernetes.Interface, cgs []*exactCG) {
	t.Helper()
	var last string
	ok := func() error {
		agent, err := readyAgent(c)
		if err != nil {
			return err
		}
		var s debugSnapshot
		if err := debugJSON(agent, "/debug/cgs?limit=500", &s); err != nil {
			return err
		}
		var bad []string
		for _, cg := range cgs {
			seen := s.CG(string(cg.pod.UID))
			if seen == nil {
				bad = append(bad, cg.name+" absent")
				continue
			}
			var want nr1.Usage
			for _, r := range nr1.All {
				want[r] = r.InBase(cg.alloc[r])
			}
			got := seen.Usage
			if got[nr1.DockerPartition] == 0 || got[nr1.DockerPartition] > want[nr1.DockerPartition] {
				bad = append(bad, fmt.Sprintf("%s docker partition %s MB of %d", cg.name, humanUnits(nr1.DockerPartition, got[nr1.DockerPartition]), cg.alloc[nr1.DockerPartition]))
			}
			got[nr1.DockerPartition], want[nr1.DockerPartition] = 0, 0
			if got != want {
				bad = append(bad, fmt.Sprintf("%s holds %v, the agent measures %v", cg.name, want, got))
			}
		}
		if len(bad) > 0 {
			last = strings.Join(bad, "; ")
			return fmt.Errorf("%s", last)
		}
		return nil
	}
	deadline := time.Now().Add(30 * time.Second) // the docker partition is measured every 10 s
	for ok() != nil {
		if time.Now().After(deadline) {
			t.Errorf("the agent does not measure what the CGs hold: %s", last)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Log("the agent measures every CG holding exactly its DMA memory and queues, within its docker partition")
}

// checkUntouched: no Event from the agent on any CG, every container still running and
// never restarted, every pod the one created.
func checkUntouched(t *testing.T, c kubernetes.Interface, cgs []*exactCG, timeline []string) {
	t.Helper()
	failed := false
	for _, cg := range cgs {
		if evs := nr1Events(t, c, cg.pod); len(evs) > 0 {
			failed = true
			sort.Slice(evs, func(i, j int) bool { return evs[i].FirstTimestamp.Before(&evs[j].FirstTimestamp) })
			count := map[string]int32{}
			for _, ev := range evs {
				count[ev.Reason] += max(ev.Count, 1)
			}
			var by []string
			for r, n := range count {
				by = append(by, fmt.Sprintf("%s×%d", r, n))
			}
			sort.Strings(by)
			t.Errorf("%s: Events from nr1-agent %s; the first at %s: %s", cg.name, strings.Join(by, " "),
				evs[0].FirstTimestamp.Format("15:04:05"), evs[0].Message)
		}
		p, err := c.CoreV1().Pods(noFalseNS).Get(context.Background(), cg.name, metav1.GetOptions{})
		if err != nil || p.UID != cg.pod.UID {
			failed = true
			t.Errorf("%s: the pod created is gone (evicted?): %v", cg.name, err)
			continue
		}
		for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if s.RestartCount != 0 {
				failed = true
				t.Errorf("%s/%s restarted %d times (last: %s)", cg.name, s.Name, s.RestartCount, lastTermination(s))
			}
		}
		if err := allRunning(p); err != nil {
			failed = true
			t.Errorf("not running: %v", err)
		}
	}
	if failed {
		t.Logf("disruptions:\n  %s", strings.Join(timeline, "\n  "))
	}
}

func lastTermination(s corev1.ContainerStatus) string {
	if term := s.LastTerminationState.Terminated; term != nil {
		return fmt.Sprintf("%s exit %d at %s", term.Reason, term.ExitCode, term.FinishedAt.Format("15:04:05"))
	}
	return "unknown"
}

// registrations is the agent's nr1_kubelet_registrations_total now (-1 when unread).
func registrations(t *testing.T, c kubernetes.Interface) int {
	t.Helper()
	agent, err := readyAgent(c)
	if err != nil {
		return -1
	}
	_, body, err := getMetrics(agent.Status.PodIP)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "nr1_kubelet_registrations_total "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil {
				return n
			}
		}
	}
	return -1
}
