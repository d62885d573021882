// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// TestInFlightQueuesCountForTheirSender: a CG in one namespace binds a datagram socket on
// a volume it shares with a CG of another namespace and never reads it; the other CG
// holds its 7 queues and sends 3 more there, closing its own. The 3 in flight are the
// sender's: it is measured 10 of its 7 and killed; the CG whose socket holds them is
// measured its own 7 throughout, and never acted on, before the sender's kill or after.
func TestInFlightQueuesCountForTheirSender(t *testing.T) {
	c := client(t)
	const victimNS, senderNS = "nr1-frame-victim", "nr1-frame-sender"
	newNamespace(t, c, victimNS)
	newNamespace(t, c, senderNS)
	mustReadyAgent(t, c)
	seen := watchUsage(t, c)
	shared := func(p *corev1.Pod) *corev1.Pod {
		dir := corev1.HostPathDirectoryOrCreate
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "shared",
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/nr1-e2e-frame", Type: &dir}}})
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "shared", MountPath: "/shared"})
		return p
	}
	victim := faultPod(t, c, victimNS, shared(loadPod("victim", "--compute-dma-mb=3", "--queues=7", "--bind-socket=/shared/victim.sock")))
	eventually(t, 60*time.Second, "the victim measured its 7 queues", func() error {
		for _, u := range seen.of(string(victim.UID)) {
			if u[nr1.HypervisorQueue] == 7 {
				return nil
			}
		}
		return fmt.Errorf("measured %v", seen.of(string(victim.UID)))
	})
	sender := faultPod(t, c, senderNS, shared(loadPod("sender", "--compute-dma-mb=3", "--queues=7", "--inflight-queues=3", "--send-queues-to=/shared/victim.sock")))
	eventually(t, 60*time.Second, "the sender measured its 7 queues and the 3 it sent", func() error {
		for _, u := range seen.of(string(sender.UID)) {
			if u[nr1.HypervisorQueue] == 10 {
				return nil
			}
		}
		return fmt.Errorf("measured %v", seen.of(string(sender.UID)))
	})
	waitReason(t, c, sender, "NR1Killed", 60*time.Second)
	// Past the kill, and past the ladder's grace for anything the victim was ever judged.
	time.Sleep(20 * time.Second)
	for _, u := range seen.of(string(victim.UID)) {
		if u[nr1.HypervisorQueue] > 7 {
			t.Errorf("the victim measured %v: charged for what its neighbour sent", u)
		}
	}
	if r := reasons(nr1Events(t, c, victim)); r != "" {
		t.Errorf("the victim holds its allocation and was acted on: %s", r)
	}
	running(t, c, victim)
}
