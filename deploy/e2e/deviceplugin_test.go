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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// simCapacity is the simulated NR1's default capacity (nr1/sim.DefaultOptions).
var simCapacity = map[corev1.ResourceName]int64{
	"neureality.ai/compute_dma_memory_in_mb": 116244,
	"neureality.ai/cpu_dma_memory_in_mb":     512,
	"neureality.ai/docker_partition_in_mb":   13417,
	"neureality.ai/ai_hypervisor_queue":      65536,
}

func checkNodeAdvertises(c kubernetes.Interface, node string) error {
	n, err := c.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for name, want := range simCapacity {
		for list, rl := range map[string]corev1.ResourceList{"capacity": n.Status.Capacity, "allocatable": n.Status.Allocatable} {
			got, ok := rl[name]
			if !ok || got.Cmp(*resource.NewQuantity(want, resource.DecimalSI)) != 0 {
				return fmt.Errorf("%s %s = %v, want %d", list, name, got.String(), want)
			}
		}
	}
	return nil
}

func TestNodeAdvertisesNR1Capacity(t *testing.T) {
	c := client(t)
	node := nodeName(t, c)
	eventually(t, 60*time.Second, "node advertises the four NR1 resources at full capacity", func() error {
		return checkNodeAdvertises(c, node)
	})
}

func TestAgentRunsAsDaemonSetPod(t *testing.T) {
	c := client(t)
	eventually(t, 60*time.Second, "agent pod Ready", func() error {
		pods, err := c.CoreV1().Pods("nr1-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=nr1-agent"})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d agent pods", len(pods.Items))
		}
		p := pods.Items[0]
		if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Kind != "DaemonSet" || p.OwnerReferences[0].Name != "nr1-agent" {
			return fmt.Errorf("agent pod owned by %+v, want the nr1-agent DaemonSet", p.OwnerReferences)
		}
		if isReady(&p) {
			return nil
		}
		return fmt.Errorf("agent pod %s not Ready: %s", p.Name, p.Status.Phase)
	})
}

func TestResNetCGIsScheduledAdmittedAndGetsItsBudget(t *testing.T) {
	c := client(t)
	pod := running(t, c, createPod(t, c, podFromFile(t, "device-plugin/resnet50-cg.yaml")))
	scheduled := false
	for _, ev := range podEvents(t, c, pod) {
		if ev.Reason == "Scheduled" && (ev.Source.Component == "default-scheduler" || ev.ReportingController == "default-scheduler") {
			scheduled = true
		}
	}
	if !scheduled {
		t.Error("no Scheduled event from default-scheduler")
	}
	// The Allocate answer reaches the container's environment; nr1-load logs it.
	eventually(t, 20*time.Second, "health-handler logs its budget", func() error {
		logs, err := c.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "health-handler"}).DoRaw(context.Background())
		if err != nil {
			return err
		}
		for _, want := range []string{"NR1_COMPUTE_DMA_MEMORY_MB=3", "NR1_DOCKER_PARTITION_MB=2392", "NR1_AI_HYPERVISOR_QUEUES=7", "queues=7"} {
			if !strings.Contains(string(logs), want) {
				return fmt.Errorf("log lacks %q:\n%s", want, logs)
			}
		}
		return nil
	})
}

func TestOversizedCGStaysPending(t *testing.T) {
	c := client(t)
	pod := createPod(t, c, podFromFile(t, "device-plugin/oversized-cg.yaml"))
	eventually(t, 30*time.Second, "scheduler refuses the oversized CG", func() error {
		for _, ev := range podEvents(t, c, pod) {
			if ev.Reason == "FailedScheduling" && strings.Contains(ev.Message, "Insufficient neureality.ai/compute_dma_memory_in_mb") {
				return nil
			}
		}
		return fmt.Errorf("no FailedScheduling event naming Insufficient neureality.ai/compute_dma_memory_in_mb")
	})
	p, err := c.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
		t.Errorf("oversized CG: phase %s node %q, want Pending and unscheduled", p.Status.Phase, p.Spec.NodeName)
	}
}

// TestKubeletRestartReregisters restarts the real kubelet, which deletes the plugins'
// sockets and makes a new kubelet.sock: the agent must serve and register again, and a
// CG must still be admitted.
func TestKubeletRestartReregisters(t *testing.T) {
	c := client(t)
	node := nodeName(t, c)
	eventually(t, 60*time.Second, "node advertises NR1 before the restart", func() error { return checkNodeAdvertises(c, node) })
	before := -1
	eventually(t, 30*time.Second, "the agent's registrations read", func() error {
		if before = registrations(t, c); before < 0 {
			return fmt.Errorf("nr1_kubelet_registrations_total not read")
		}
		return nil
	})
	run(t, filepath.Join(repo, "deploy", "local", "stack.sh"), "restart-kubelet")
	eventually(t, 60*time.Second, "node advertises NR1 after the kubelet restart", func() error { return checkNodeAdvertises(c, node) })
	// The node's status comes from the kubelet's checkpoint: it advertises the resources
	// before the plugins have registered again, and a pod admitted then is refused.
	eventually(t, 60*time.Second, "the agent's four plugins registered with the restarted kubelet", func() error {
		if n := registrations(t, c); n < before+4 {
			return fmt.Errorf("%d registrations, %d before the restart", n, before)
		}
		return nil
	})
	TestResNetCGIsScheduledAdmittedAndGetsItsBudget(t)
}
