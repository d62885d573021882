// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// nr1Events lists the agent's Events on pod, by reason, in order.
func nr1Events(t *testing.T, c kubernetes.Interface, pod *corev1.Pod) []corev1.Event {
	t.Helper()
	var out []corev1.Event
	for _, ev := range podEvents(t, c, pod) {
		if ev.Source.Component == "nr1-agent" {
			out = append(out, ev)
		}
	}
	return out
}

func reasons(evs []corev1.Event) string {
	var r []string
	for _, ev := range evs {
		r = append(r, ev.Reason)
	}
	return strings.Join(r, ",")
}

func waitReason(t *testing.T, c kubernetes.Interface, pod *corev1.Pod, reason string, timeout time.Duration) corev1.Event {
	t.Helper()
	var found corev1.Event
	eventually(t, timeout, pod.Name+": Event "+reason, func() error {
		for _, ev := range nr1Events(t, c, pod) {
			if ev.Reason == reason {
				found = ev
				return nil
			}
		}
		return fmt.Errorf("events so far: %s", reasons(nr1Events(t, c, pod)))
	})
	return found
}

// eventTime is when ev happened, to the microsecond where the Event says.
func eventTime(ev corev1.Event) time.Time {
	if !ev.EventTime.IsZero() {
		return ev.EventTime.Time
	}
	return ev.FirstTimestamp.Time
}

func terminated(t *testing.T, c kubernetes.Interface, pod *corev1.Pod, timeout time.Duration) *corev1.ContainerStateTerminated {
	t.Helper()
	var term *corev1.ContainerStateTerminated
	eventually(t, timeout, pod.Name+" container terminated", func() error {
		p, err := c.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Terminated != nil {
				term = s.State.Terminated
				return nil
			}
		}
		return fmt.Errorf("phase %s", p.Status.Phase)
	})
	return term
}

// criID is a pod status's container ID without its runtime's scheme (containerd://,
// cri-o://).
func criID(containerID string) string {
	if _, id, ok := strings.Cut(containerID, "://"); ok {
		return id
	}
	return containerID
}

// criFinishedAt reads a container's exit time with nanoseconds from CRI (the pod status
// keeps seconds only).
func criFinishedAt(t *testing.T, containerID string) time.Time {
	t.Helper()
	var st struct {
		Status struct {
			FinishedAt time.Time `json:"finishedAt"`
		} `json:"status"`
	}
	if err := json.Unmarshal(run(t, "crictl", "inspect", "-o", "json", criID(containerID)), &st); err != nil {
		t.Fatal(err)
	}
	return st.Status.FinishedAt
}

// TestEnforcement runs the default policy's cases side by side on the real node.
func TestEnforcement(t *testing.T) {
	c := client(t)
	t.Run("ladder: warned, throttled, then killed", func(t *testing.T) {
		t.Parallel()
		pod := running(t, c, createPod(t, c, loadPod("ramp", "--compute-dma-mb=2", "--step=3s:compute=4")))
		warn := waitReason(t, c, pod, "NR1LimitExceeded", 30*time.Second)
		throttled := waitReason(t, c, pod, "NR1Throttled", 30*time.Second)
		killed := waitReason(t, c, pod, "NR1Killed", 40*time.Second)
		if d := throttled.FirstTimestamp.Sub(warn.FirstTimestamp.Time); d < 4*time.Second {
			t.Errorf("throttled %v after the warning, want the ladder's 5 s", d)
		}
		if d := killed.FirstTimestamp.Sub(warn.FirstTimestamp.Time); d < 14*time.Second {
			t.Errorf("killed %v after the warning, want the ladder's 15 s", d)
		}
		if term := terminated(t, c, pod, 30*time.Second); term.ExitCode != 137 {
			t.Errorf("container ended with %d (%s), want 137: killed at once, a failure", term.ExitCode, term.Reason)
		}
		if got := reasons(nr1Events(t, c, pod)); got != "NR1LimitExceeded,NR1Throttled,NR1Killed" {
			t.Errorf("events %s", got)
		}
	})
	t.Run("queue hog killed within 2.5 s of going over", func(t *testing.T) {
		t.Parallel()
		pod := running(t, c, createPod(t, c, loadPod("hog", "--queues=2", "--step=4s:queues=20")))
		waitReason(t, c, pod, "NR1Killed", 30*time.Second)
		term := terminated(t, c, pod, 30*time.Second)
		h := holdings(t, c, pod)
		if len(h) != 2 || !strings.Contains(h[1].line, "queues=20") {
			t.Fatalf("nr1-load's changes: %+v", h)
		}
		lag := criFinishedAt(t, term.ContainerID).Sub(h[1].at)
		t.Logf("queue hog: container finished %v after nr1-load went over", lag.Round(time.Millisecond))
		if lag > 2500*time.Millisecond || lag < 0 {
			t.Errorf("kill latency %v, want at most 2.5 s", lag)
		}
	})
	t.Run("writable layer past the docker partition: evicted", func(t *testing.T) {
		t.Parallel()
		p := loadPod("filler", "--write-mb=150")
		small := resource.MustParse("100")
		p.Spec.Containers[0].Resources.Requests["neureality.ai/docker_partition_in_mb"] = small
		p.Spec.Containers[0].Resources.Limits["neureality.ai/docker_partition_in_mb"] = small
		pod := running(t, c, createPod(t, c, p))
		waitReason(t, c, pod, "NR1LimitExceeded", 40*time.Second)
		waitReason(t, c, pod, "NR1Evicted", 60*time.Second)
		eventually(t, 30*time.Second, "evicted pod gone", func() error {
			got, err := c.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
			if err == nil && got.UID == pod.UID && got.DeletionTimestamp == nil {
				return fmt.Errorf("still there, phase %s", got.Status.Phase)
			}
			return nil
		})
	})
	// The runtime sizes a layer by walking its names: a file removed and held open takes
	// the layer's blocks and is in no figure of it. The agent finds it held.
	t.Run("a removed file held open past the docker partition: evicted", func(t *testing.T) {
		t.Parallel()
		p := loadPod("hider", "--write-mb=150", "--unlink-written")
		small := resource.MustParse("100")
		p.Spec.Containers[0].Resources.Requests["neureality.ai/docker_partition_in_mb"] = small
		p.Spec.Containers[0].Resources.Limits["neureality.ai/docker_partition_in_mb"] = small
		pod := running(t, c, createPod(t, c, p))
		ev := waitReason(t, c, pod, "NR1LimitExceeded", 60*time.Second)
		if !strings.Contains(ev.Message, "docker_partition") {
			t.Errorf("the CG over for another reason: %s", ev.Message)
		}
		waitReason(t, c, pod, "NR1Evicted", 60*time.Second)
	})
	t.Run("a CG within its budget is left alone", func(t *testing.T) { // exempt ones: TestExemption
		t.Parallel()
		within := running(t, c, createPod(t, c, podFromFile(t, "device-plugin/resnet50-cg.yaml")))
		time.Sleep(25 * time.Second) // past the whole default ladder
		if evs := nr1Events(t, c, within); len(evs) != 0 {
			t.Errorf("%s: %s", within.Name, reasons(evs))
		}
		if got := running(t, c, within); got.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("%s restarted", within.Name)
		}
	})
}

// TestDryRun redeploys the agent in dry-run mode: the ladder is reported, nothing done.
func TestDryRun(t *testing.T) {
	c := client(t)
	stack := filepath.Join(repo, "deploy", "local", "stack.sh")
	cm, err := c.CoreV1().ConfigMaps("nr1-system").Get(context.Background(), "nr1-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["config.yaml"] += "enforcement:\n  mode: dry-run\n"
	if _, err := c.CoreV1().ConfigMaps("nr1-system").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run(t, stack, "deploy") }) // back to the overlay's configuration
	run(t, "kubectl", "-n", "nr1-system", "rollout", "restart", "daemonset/nr1-agent")
	run(t, "kubectl", "-n", "nr1-system", "rollout", "status", "daemonset/nr1-agent", "--timeout=120s")

	pod := running(t, c, createPod(t, c, loadPod("dry-hog", "--queues=2", "--step=12s:queues=20")))
	waitReason(t, c, pod, "NR1EnforcementDryRun", 40*time.Second)
	time.Sleep(3 * time.Second)
	evs := nr1Events(t, c, pod)
	for _, ev := range evs {
		if ev.Reason != "NR1EnforcementDryRun" {
			t.Errorf("dry-run took an action: %s %s", ev.Reason, ev.Message)
		}
	}
	if !strings.Contains(evs[len(evs)-1].Message, "would kill") {
		t.Errorf("last dry-run event %q, want the kill it would have made", evs[len(evs)-1].Message)
	}
	if got := running(t, c, pod); got.Status.ContainerStatuses[0].State.Running == nil {
		t.Error("dry-run stopped the container")
	}
}
