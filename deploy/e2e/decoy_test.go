// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestProcessNamedKubeletDecidesNothing runs, in a pod, a process named kubelet whose
// --config is /dev/zero, an endless file; the node's kubelet is restarted after it, so
// the decoy is the lowest PID named kubelet, and the agent after both. The agent reads
// the real kubelet's configuration (the one serving its socket: its gates known), never
// restarts, and a CG beside the decoy over its queues (9 of 7) is killed.
func TestProcessNamedKubeletDecidesNothing(t *testing.T) {
	c := client(t)
	const ns = "nr1-kubelet-decoy"
	newNamespace(t, c, ns)
	mustReadyAgent(t, c)
	faultPod(t, c, ns, loadPod("decoy", "decoy", "kubelet", "--config=/dev/zero", "--config-dir=/proc/self"))

	node := nodeName(t, c)
	before := registrations(t, c)
	stack(t, "restart-kubelet")
	eventually(t, 60*time.Second, "node advertises NR1 after the kubelet restart", func() error { return checkNodeAdvertises(c, node) })
	eventually(t, 60*time.Second, "the agent's four plugins registered with the restarted kubelet", func() error {
		if n := registrations(t, c); n < before+4 {
			return fmt.Errorf("%d registrations, %d before the restart", n, before)
		}
		return nil
	})
	restartAgent(t, c)
	agent := mustReadyAgent(t, c)

	over := faultPod(t, c, ns, loadPod("over", "--compute-dma-mb=3", "--queues=9"))
	waitReason(t, c, over, "NR1Killed", 90*time.Second)

	eventually(t, 30*time.Second, "the real kubelet's gates read", func() error {
		_, body, err := getMetrics(agent.Status.PodIP)
		if err != nil {
			return err
		}
		if !strings.Contains(body, "\nnr1_kubelet_gates_unknown 0\n") {
			return fmt.Errorf("nr1_kubelet_gates_unknown is not 0 (see the agent's log for why)")
		}
		return nil
	})
	now, err := readyAgent(c)
	if err != nil {
		t.Fatal(err)
	}
	if now.UID != agent.UID {
		t.Errorf("the agent pod changed from %.8s to %.8s", agent.UID, now.UID)
	}
	for _, s := range now.Status.ContainerStatuses {
		if s.RestartCount != 0 {
			t.Errorf("the agent's %s restarted %d times beside a process named kubelet (last: %s)", s.Name, s.RestartCount, lastTermination(s))
		}
	}
}
