// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// The default policy's figures the fault tests time themselves by.
const (
	partitionEvictAfter = 20 * time.Second // docker partition ladder: warn at 0, evict after
	maxAllocationAge    = 5 * time.Second  // an older pod-resources answer is unknown
	idleInterval        = 10 * time.Second // samples at rest, each asking the kubelet first
)

// stack runs a subcommand of deploy/local/stack.sh.
func stack(t *testing.T, args ...string) {
	t.Helper()
	run(t, filepath.Join(repo, "deploy", "local", "stack.sh"), args...)
}

// faultPod is a CG of a fault test: pod with the namespace ns, created and running.
func faultPod(t *testing.T, c kubernetes.Interface, ns string, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	pod.Namespace = ns
	created := createPod(t, c, pod)
	diagnose(t, c, created)
	return running(t, c, created)
}

// diagnose logs, if the test fails, what became of pods: their containers, the agent's
// Events and view of them, and what the agent logged about them.
func diagnose(t *testing.T, c kubernetes.Interface, pods ...*corev1.Pod) {
	began := time.Now()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		snap, err := agentDebug(t, c)
		for _, pod := range pods {
			if p, err := c.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{}); err == nil {
				for _, s := range p.Status.ContainerStatuses {
					t.Logf("%s/%s: %s, restarts %d", pod.Name, s.Name, containerState(s), s.RestartCount)
				}
			}
			t.Logf("%s: events %s", pod.Name, reasons(nr1Events(t, c, pod)))
			if err != nil {
				t.Logf("agent /debug/cgs: %v", err)
			} else if cg := snap.CG(string(pod.UID)); cg != nil {
				t.Logf("%s in /debug/cgs: usage %v allocation %v known %v %s", pod.Name, cg.Usage, cg.Allocation, cg.AllocationKnown, cg.AllocationUnknown)
			}
			if agent, err := readyAgent(c); err == nil {
				for _, l := range agentLog(t, c, agent, began, "pod="+pod.Name) {
					t.Logf("agent: %.300s", l)
				}
			}
		}
	})
}

// nr1LoadImageMB is the nr1-load image's size, rounded up to whole MB.
func nr1LoadImageMB(t testing.TB) nr1.Units {
	t.Helper()
	return nr1.Units((imageSize(t, nr1LoadImage) + 1<<20 - 1) >> 20)
}

// logLineAt returns the time nr1-load stamped on its first log line containing marker.
func logLineAt(t *testing.T, c kubernetes.Interface, pod *corev1.Pod, container, marker string) (time.Time, bool) {
	t.Helper()
	logs, err := c.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(logs), "\n") {
		stamp, rest, _ := strings.Cut(line, " ")
		if !strings.Contains(rest, marker) {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		return at, true
	}
	return time.Time{}, false
}

// agentLog returns the agent's log lines since since that contain every one of words.
func agentLog(t *testing.T, c kubernetes.Interface, agent *corev1.Pod, since time.Time, words ...string) []string {
	t.Helper()
	st := metav1.NewTime(since)
	logs, err := c.CoreV1().Pods(agent.Namespace).GetLogs(agent.Name, &corev1.PodLogOptions{SinceTime: &st}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
next:
	for _, line := range strings.Split(string(logs), "\n") {
		for _, w := range words {
			if !strings.Contains(line, w) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// agentActed returns when the agent logged that it took action on pod, from its
// log since since (with milliseconds, where Events have seconds).
func agentActed(t *testing.T, c kubernetes.Interface, agent *corev1.Pod, since time.Time, action string, pod *corev1.Pod) []time.Time {
	t.Helper()
	var out []time.Time
	for _, l := range agentLog(t, c, agent, since, "enforcement action taken", "action="+action+" ", "namespace="+pod.Namespace+" ", "pod="+pod.Name+" ") {
		stamp, _, _ := strings.Cut(strings.TrimPrefix(l, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			t.Fatalf("agent log line %q: %v", l, err)
		}
		out = append(out, at)
	}
	return out
}

// sameAgent fails when the agent pod was replaced or restarted since before.
func sameAgent(t *testing.T, c kubernetes.Interface, before *corev1.Pod) {
	t.Helper()
	// Not its Ready condition: after a long API server outage the node controller marks
	// the node's pods not ready, and the kubelet may take minutes to say otherwise.
	pods, err := c.CoreV1().Pods("nr1-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=nr1-agent"})
	if err != nil {
		t.Fatalf("agent pods: %v", err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d agent pods, want the one there before", len(pods.Items))
	}
	if now := &pods.Items[0]; agentInstance(now) != agentInstance(before) {
		t.Errorf("the agent restarted or was replaced: before %s, after %s", agentInstance(before), agentInstance(now))
	}
}

// untouched: no Event from the agent on pod, every container running and never
// restarted, the pod the one created.
func untouched(t *testing.T, c kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	for _, ev := range nr1Events(t, c, pod) {
		t.Errorf("%s: Event %s at %s from nr1-agent: %s", pod.Name, ev.Reason, ev.LastTimestamp.Format("15:04:05"), ev.Message)
	}
	p, err := c.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil || p.UID != pod.UID {
		t.Errorf("%s: the pod created is gone (evicted?): %v", pod.Name, err)
		return
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.RestartCount != 0 {
			t.Errorf("%s/%s restarted %d times (last: %s)", pod.Name, s.Name, s.RestartCount, lastTermination(s))
		}
	}
	if err := allRunning(p); err != nil {
		t.Errorf("not running: %v", err)
	}
}

// containerRunning asks CRI, not the API server, whether pod's container runs.
func containerRunning(t *testing.T, pod *corev1.Pod) bool {
	t.Helper()
	out := run(t, "crictl", "ps", "-q", "--state", "running", "--label", "io.kubernetes.pod.uid="+string(pod.UID))
	return strings.TrimSpace(string(out)) != ""
}

func clock(at time.Time) string { return at.Format("15:04:05.000") }

func clocks(ts []time.Time) string {
	out := make([]string, 0, len(ts))
	for _, at := range ts {
		out = append(out, clock(at))
	}
	return "[" + strings.Join(out, " ") + "]"
}

// TestFaultAPIServerDownDuringEviction: a CG past its docker partition is due to be
// evicted while the API server is down for 60 s. The eviction must fail, be retried and
// happen once the API server is back; the Events recorded meanwhile must reach it; the
// agent must neither restart nor do anything else to the CG meanwhile.
func TestFaultAPIServerDownDuringEviction(t *testing.T) {
	c := client(t)
	const ns, down = "nr1-fault-apiserver", 60 * time.Second
	newNamespace(t, c, ns)
	agent := mustReadyAgent(t, c)
	began := time.Now()

	// 100 MB written against a partition of the image and 60 MB: over, but under the
	// hard ratio (2), so the ladder's 20 s apply.
	p := loadPod("filler", "--write-mb=100")
	p.Spec.Containers[0].Resources = nr1Requests(nr1.Amounts{3, 0, nr1LoadImageMB(t) + 60, 7})
	pod := faultPod(t, c, ns, p)
	warn := waitReason(t, c, pod, "NR1LimitExceeded", 60*time.Second)
	// Event times have seconds: the warning was in [first, first+1s).
	due := warn.FirstTimestamp.Add(partitionEvictAfter)
	stopAt := due.Add(-6 * time.Second) // the API server may take a few seconds to stop
	if time.Now().After(stopAt) {
		t.Fatalf("the warning (%s) was seen too late to stop the API server before the eviction is due", warn.FirstTimestamp.Format("15:04:05"))
	}
	time.Sleep(time.Until(stopAt))

	t.Cleanup(func() { stack(t, "start-apiserver") }) // a no-op unless the test failed while it was down
	downAt := time.Now()
	stack(t, "stop-apiserver")
	stopped := time.Now()
	time.Sleep(time.Until(downAt.Add(down)))
	stillRunning := containerRunning(t, pod)
	startAt := time.Now()
	stack(t, "start-apiserver")
	upAt := time.Now()
	if !stillRunning {
		t.Errorf("the CG's container was stopped while the API server was down")
	}

	var evictedAt time.Time
	eventually(t, 90*time.Second, "the CG evicted after the API server is back", func() error {
		got, err := c.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err), err == nil && (got.UID != pod.UID || got.DeletionTimestamp != nil):
			evictedAt = time.Now()
			return nil
		case err != nil:
			return err
		}
		return fmt.Errorf("still there, phase %s", got.Status.Phase)
	})
	evicted := waitReason(t, c, pod, "NR1Evicted", 30*time.Second)
	evictions := agentActed(t, c, agent, began, "evict", pod)
	failures := agentLog(t, c, agent, began, "enforcement action failed", "action=evict ", "pod="+pod.Name+" ")
	var failedEvents []corev1.Event
	for _, ev := range nr1Events(t, c, pod) {
		if ev.Reason == "NR1EnforcementFailed" {
			failedEvents = append(failedEvents, ev)
		}
	}

	t.Logf("warned %s; eviction due %s; API server stopped %s–%s, started %s, ready %s; evicted by the agent %s; eviction seen %s (%v after the API server was ready); NR1Evicted at %s",
		warn.FirstTimestamp.Format("15:04:05"), due.Format("15:04:05"), clock(downAt), clock(stopped), clock(startAt), clock(upAt),
		clocks(evictions), clock(evictedAt), evictedAt.Sub(upAt).Round(100*time.Millisecond), evicted.FirstTimestamp.Format("15:04:05"))
	t.Logf("the agent logged %d failed evictions:", len(failures))
	for _, l := range failures {
		t.Logf("  %.300s", l)
	}
	for _, ev := range failedEvents {
		t.Logf("Event NR1EnforcementFailed first %s last %s count %d: %.200s", ev.FirstTimestamp.Format("15:04:05"), ev.LastTimestamp.Format("15:04:05"), ev.Count, ev.Message)
	}
	t.Logf("events: %s", reasons(nr1Events(t, c, pod)))

	if len(failures) == 0 {
		t.Errorf("no failed eviction logged by the agent while the API server was down")
	}
	if len(evictions) != 1 || evictions[0].Before(startAt) {
		t.Errorf("the agent evicted at %s, want once after the API server was started again (%s)", clocks(evictions), clock(startAt))
	}
	// Recorded while the API server was down, delivered once it was back.
	var duringOutage bool
	for _, ev := range failedEvents {
		if !ev.FirstTimestamp.Time.Before(downAt.Truncate(time.Second)) && ev.FirstTimestamp.Time.Before(upAt) {
			duringOutage = true
		}
	}
	if !duringOutage {
		t.Errorf("no NR1EnforcementFailed Event recorded during the outage reached the API server (events: %s)", reasons(nr1Events(t, c, pod)))
	}
	sameAgent(t, c, agent)
	// A minute without the API server can have marked the node unreachable; the tests
	// after this one need it schedulable and its agent Ready again.
	eventually(t, 3*time.Minute, "the node and the agent Ready again", func() error {
		node, err := c.CoreV1().Nodes().Get(context.Background(), nodeName(t, c), metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
				return fmt.Errorf("node %s: %s", cond.Status, cond.Message)
			}
		}
		for _, taint := range node.Spec.Taints {
			if taint.Effect == corev1.TaintEffectNoSchedule || taint.Effect == corev1.TaintEffectNoExecute {
				return fmt.Errorf("node tainted %s", taint.Key)
			}
		}
		_, err = readyAgent(c)
		return err
	})
}

// TestKilledCGEndsAsAFailure: a CG stopped for going over never reads as a success. Its
// workload takes SIGTERM as the end of its work (it would exit 0), and holds 20 queues of
// 7 (past the hard ratio): it is killed at once (exit 137, never asked to stop), its pod
// ends Failed with the condition DisruptionTarget (reason NR1Killed). As a Job's pod, a
// podFailurePolicy matching that condition fails the Job on its first pod.
func TestKilledCGEndsAsAFailure(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	const ns = "nr1-fault-failure"
	newNamespace(t, c, ns)
	// Over after 4 s, so that the pod is seen Running before it is killed.
	args := []string{"--queues=2", "--step=4s:queues=20", "--sigterm-exit=0"}
	pod := faultPod(t, c, ns, loadPod("polite-hog", args...))
	killed := waitReason(t, c, pod, "NR1Killed", 60*time.Second)
	term := terminated(t, c, pod, 30*time.Second)
	_, asked := logLineAt(t, c, pod, "health-handler", "terminated")
	t.Logf("NR1Killed at %s; exit %d (%s); SIGTERM seen: %v", killed.FirstTimestamp.Format("15:04:05"), term.ExitCode, term.Reason, asked)
	if term.ExitCode != 137 || asked {
		t.Errorf("container ended with %d (%s), SIGTERM seen %v: want 137 (SIGKILL) without SIGTERM", term.ExitCode, term.Reason, asked)
	}
	eventually(t, 30*time.Second, "the killed pod Failed, marked DisruptionTarget by NR1", func() error {
		p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return failedByNR1(p)
	})
	for _, ev := range nr1Events(t, c, pod) {
		if ev.Reason == "NR1EnforcementFailed" {
			t.Errorf("the kill was reported failed: %s", ev.Message)
		}
	}

	// The same CG as a Job whose podFailurePolicy fails it on a disruption: failed on its
	// first pod, never retried, never a success.
	template := loadPod("", args...)
	backoff := int32(3)
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "polite-hog-job", Namespace: ns}, Spec: batchv1.JobSpec{
		BackoffLimit: &backoff,
		PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
			Action:          batchv1.PodFailurePolicyActionFailJob,
			OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
		}}},
		Template: corev1.PodTemplateSpec{Spec: template.Spec},
	}}
	if _, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// wrong is a final state other than the one wanted: no use waiting on.
	var wrong error
	eventually(t, 90*time.Second, "the Job failed by its podFailurePolicy", func() error {
		j, err := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
				wrong = fmt.Errorf("the Job completed: %s", cond.Message)
				return nil
			}
			if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
				if cond.Reason != batchv1.JobReasonPodFailurePolicy {
					wrong = fmt.Errorf("the Job failed for %s (%s), not its podFailurePolicy", cond.Reason, cond.Message)
					return nil
				}
				t.Logf("Job failed: %s: %s; succeeded %d, failed %d", cond.Reason, cond.Message, j.Status.Succeeded, j.Status.Failed)
				if j.Status.Succeeded != 0 || j.Status.Failed != 1 {
					wrong = fmt.Errorf("succeeded %d, failed %d: want one pod, failed", j.Status.Succeeded, j.Status.Failed)
					return nil
				}
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", j.Status.Conditions)
	})
	if wrong != nil {
		t.Fatal(wrong)
	}
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Errorf("%d pods of the Job, want 1: its one pod failed by NR1 was not retried", len(pods.Items))
	}
	for i := range pods.Items {
		if err := failedByNR1(&pods.Items[i]); err != nil {
			t.Errorf("the Job's pod %s: %v", pods.Items[i].Name, err)
		}
	}
}

// failedByNR1 says why a pod is not Failed with the condition DisruptionTarget, reason
// NR1Killed, and a container ended by SIGKILL.
func failedByNR1(p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodFailed {
		return fmt.Errorf("phase %s", p.Status.Phase)
	}
	marked := false
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.DisruptionTarget && cond.Status == corev1.ConditionTrue && cond.Reason == "NR1Killed" {
			marked = true
		}
	}
	if !marked {
		return fmt.Errorf("no DisruptionTarget condition with reason NR1Killed: %+v", p.Status.Conditions)
	}
	for _, s := range p.Status.ContainerStatuses {
		if term := s.State.Terminated; term == nil || term.ExitCode != 137 {
			return fmt.Errorf("container %s: %+v, want ended by SIGKILL (137)", s.Name, s.State)
		}
	}
	return nil
}

// allocationView is the agent's /debug/cgs as the pod-resources fault reads it.
type allocationView struct {
	Taken          time.Time `json:"taken"`
	AllocationRead time.Time `json:"allocationRead"`
	debugSnapshot
}

// allocationsKnown reads /debug/cgs from the agent: nil when every pod's
// allocation is known from a pod-resources answer read after after, whose time it
// returns.
func allocationsKnown(agent *corev1.Pod, pods []*corev1.Pod, after time.Time) (time.Time, error) {
	var v allocationView
	if err := debugJSON(agent, "/debug/cgs?limit=500", &v); err != nil {
		return time.Time{}, err
	}
	if v.AllocationRead.Before(after) {
		return time.Time{}, fmt.Errorf("pod-resources last read %s", clock(v.AllocationRead))
	}
	for _, p := range pods {
		if cg := v.CG(string(p.UID)); cg == nil || !cg.AllocationKnown {
			return time.Time{}, fmt.Errorf("%s not known", p.Name)
		}
	}
	return v.AllocationRead, nil
}

// allocationSeen is one read of a CG's allocation in /debug/cgs.
type allocationSeen struct {
	at     time.Time
	age    time.Duration // of the pod-resources answer, at the sample
	known  map[string]bool
	queues map[string]nr1.Base
	err    error
}

// watchAllocations reads /debug/cgs from the agent every 250 ms until ctx ends,
// for the CGs pods.
func watchAllocations(ctx context.Context, agent *corev1.Pod, pods []*corev1.Pod) <-chan []allocationSeen {
	out := make(chan []allocationSeen, 1)
	go func() {
		var seen []allocationSeen
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			s := allocationSeen{at: time.Now(), known: map[string]bool{}, queues: map[string]nr1.Base{}}
			var v allocationView
			if s.err = debugJSON(agent, "/debug/cgs?limit=500", &v); s.err == nil {
				s.age = v.Taken.Sub(v.AllocationRead)
				for _, p := range pods {
					if cg := v.CG(string(p.UID)); cg != nil {
						s.known[p.Name], s.queues[p.Name] = cg.AllocationKnown, cg.Usage[nr1.HypervisorQueue]
					}
				}
			}
			seen = append(seen, s)
			select {
			case <-ctx.Done():
				out <- seen
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// TestFaultPodResourcesUnavailable: the kubelet hangs for 18 s, so the agent's
// pod-resources List fails and its allocations age into unknown. A CG holding exactly
// its allocation must be left alone; a CG that goes over during the outage must not be
// acted on until the kubelet answers again, and then it is.
func TestFaultPodResourcesUnavailable(t *testing.T) {
	c := client(t)
	const ns, outage, overAt = "nr1-fault-podres", 18 * time.Second, 40 * time.Second
	newNamespace(t, c, ns)
	agent := mustReadyAgent(t, c)
	imageMB := nr1LoadImageMB(t)

	var x nr1.Amounts
	x[nr1.ComputeDMAMemory], x[nr1.HypervisorQueue] = 3, 7
	withinCG := &exactCG{name: "within", alloc: x, writeMB: 2}
	x[nr1.ComputeDMAMemory], x[nr1.HypervisorQueue] = 2, 4
	lateCG := &exactCG{name: "late-over", alloc: x}
	late := lateCG.build(imageMB)
	// One queue over (under the hard ratio) overAt after it starts: during the outage.
	late.Spec.Containers[0].Args = append(late.Spec.Containers[0].Args, fmt.Sprintf("--step=%s:queues=5", overAt))
	within := withinCG.build(imageMB)
	for _, p := range []*corev1.Pod{within, late} {
		p.Namespace = ns
		created, err := c.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		*p = *created
	}
	diagnose(t, c, within, late)
	eventually(t, 60*time.Second, "both CGs run", func() error {
		for _, p := range []*corev1.Pod{within, late} {
			got, err := c.CoreV1().Pods(ns).Get(context.Background(), p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := allRunning(got); err != nil {
				return err
			}
		}
		return nil
	})
	var started time.Time
	eventually(t, 30*time.Second, "late-over's first holding logged", func() error {
		h := holdings(t, c, late)
		if len(h) == 0 {
			return fmt.Errorf("no holding yet")
		}
		started = h[0].at
		return nil
	})
	goesOver := started.Add(overAt)
	pauseAt := goesOver.Add(-8 * time.Second) // the allocation is stale (5 s) before it goes over
	eventually(t, time.Until(pauseAt), "the agent knows both CGs' allocations", func() error {
		_, err := allocationsKnown(agent, []*corev1.Pod{within, late}, time.Time{})
		return err
	})
	if time.Now().After(pauseAt) {
		t.Fatalf("the CGs were known too late to hang the kubelet before late-over goes over (%s)", clock(goesOver))
	}
	ctx, stopWatching := context.WithCancel(context.Background())
	t.Cleanup(stopWatching)
	watched := watchAllocations(ctx, agent, []*corev1.Pod{within, late})
	time.Sleep(time.Until(pauseAt))

	t.Cleanup(func() { stack(t, "resume-kubelet") }) // a no-op unless the test failed while it hung
	pausedAt := time.Now()
	stack(t, "pause-kubelet")
	time.Sleep(time.Until(pausedAt.Add(outage)))
	resumedAt := time.Now() // the kubelet hangs until this call thaws it
	stack(t, "resume-kubelet")

	var answered time.Time // the first read after the outage with a fresh answer
	eventually(t, 30*time.Second, "the agent knows both CGs' allocations from a new pod-resources answer", func() error {
		var err error
		answered, err = allocationsKnown(agent, []*corev1.Pod{within, late}, resumedAt.Add(-time.Second))
		return err
	})
	for _, l := range agentLog(t, c, agent, pausedAt.Add(-time.Second), "pod-resources API") {
		t.Logf("agent: %.300s", l)
	}
	warn := waitReason(t, c, late, "NR1LimitExceeded", 30*time.Second)
	warned := agentActed(t, c, agent, pausedAt, "warn", late)
	time.Sleep(2 * time.Second)
	stopWatching()
	seen := <-watched

	// During the outage, from when the last answer went stale until the kubelet answered.
	// At rest the kubelet is asked only before each sample: a sample comes within an idle
	// interval of the pause, and it, like every later one, judges an answer from before
	// the pause, by then older than maxAllocationAge.
	var during, stale, unknownShown, overSeen int
	var maxAge time.Duration
	var firstOver time.Time
	for _, s := range seen {
		if s.at.Before(pausedAt.Add(max(maxAllocationAge, idleInterval)+2*time.Second)) || !s.at.Before(resumedAt) {
			continue
		}
		during++
		if s.err != nil {
			t.Errorf("%s /debug/cgs: %v", clock(s.at), s.err)
			continue
		}
		maxAge = max(maxAge, s.age)
		if s.age > maxAllocationAge {
			stale++
		}
		if !s.known[within.Name] && !s.known[late.Name] {
			unknownShown++
		}
		if s.queues[late.Name] > 4 {
			overSeen++
			if firstOver.IsZero() {
				firstOver = s.at
			}
		}
	}
	t.Logf("kubelet hung %s–%s; the agent read pod-resources again at %s; late-over went over at %s (measured over from %s), warned by the agent %v, Event %s",
		clock(pausedAt), clock(resumedAt), clock(answered), clock(goesOver), clock(firstOver), clocks(warned), warn.FirstTimestamp.Format("15:04:05"))
	t.Logf("during the outage: %d reads of /debug/cgs, %d with the pod-resources answer older than %v (oldest %v), %d showing allocationKnown=false, %d showing late-over over",
		during, stale, maxAllocationAge, maxAge.Round(100*time.Millisecond), unknownShown, overSeen)

	if during == 0 || stale != during {
		t.Errorf("the agent's allocations did not age into unknown during the outage: %d of %d reads older than %v", stale, during, maxAllocationAge)
	}
	if unknownShown != during {
		t.Errorf("/debug/cgs kept allocationKnown=true in %d of %d reads: a stale allocation must read as unknown", during-unknownShown, during)
	}
	if overSeen == 0 {
		t.Errorf("late-over was not measured over during the outage: the test proves nothing about acting on it")
	}
	if len(warned) == 0 || warned[0].Before(resumedAt) {
		t.Errorf("late-over warned at %s, want after the kubelet answered again (hung until %s)", clocks(warned), clock(resumedAt))
	}
	untouched(t, c, within)
	sameAgent(t, c, agent)
}
