// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/manifest"
)

// sharedClaimCGs checks pods sharing one ResourceClaim: each may use the whole claim,
// not each of them at once. Two pods mapping 3 MB each of a 4 MB claim, apart, hold 6
// MB together and are both acted on, their Events saying so; two mapping the same 3 MB
// hold 3 MB together and are left alone.
func sharedClaimCGs(t *testing.T, c kubernetes.Interface, agent *corev1.Pod, imageMB nr1.Units) {
	t.Helper()
	booked := nr1.Amounts{4, 0, imageMB + 2, 1}
	apart := sharedClaimPods(t, c, "pair-apart", booked, "--compute-dma-offset-mb=0", "--compute-dma-offset-mb=3")
	same := sharedClaimPods(t, c, "pair-same", booked, "--compute-dma-offset-mb=0", "--compute-dma-offset-mb=0")
	for _, p := range apart {
		ev := waitReason(t, c, p, "NR1LimitExceeded", 60*time.Second)
		if !strings.Contains(ev.Message, "sharing "+draNS+"/pair-apart") || !strings.Contains(ev.Message, "6.0 MB") {
			t.Errorf("%s: %q, want the pods sharing pair-apart and the 6 MB they hold together", p.Name, ev.Message)
		}
	}
	eventually(t, 20*time.Second, "pair-same's 3 MB held together, known", func() error {
		for _, p := range same {
			cg, err := cgView(agent, p)
			if err != nil {
				return err
			}
			if cg.Shared == nil || cg.Shared.Usage[nr1.ComputeDMAMemory] != nr1.ComputeDMAMemory.InBase(3) || cg.Shared.Allocation != booked {
				return fmt.Errorf("%s shares %+v", p.Name, cg.Shared)
			}
		}
		return nil
	})
	for _, p := range same {
		runningPod(t, c, p)
		if evs := nr1Events(t, c, p); len(evs) > 0 {
			t.Errorf("%s, within the claim it shares, got NR1 Event %s: %s", p.Name, evs[0].Reason, evs[0].Message)
		}
	}
	// Gone, so that the pair over its claim, killed and restarted, does not spend the
	// node's action budget the tests after this one count on.
	for _, p := range append(apart, same...) {
		if err := c.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	}
}

// sharedClaimPods creates a ResourceClaim for booked and a pod claiming it per offset,
// each mapping 3 MB of compute DMA from it.
func sharedClaimPods(t *testing.T, c kubernetes.Interface, claim string, booked nr1.Amounts, offsets ...string) []*corev1.Pod {
	t.Helper()
	tmpl := manifest.ClaimTemplate(draNS, claim, booked)
	_, err := c.ResourceV1().ResourceClaims(draNS).Create(context.Background(), &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: draNS}, Spec: tmpl.Spec.Spec,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	grace := int64(1)
	noToken := false
	var pods []*corev1.Pod
	for i, offset := range offsets {
		hh := loadContainer("health-handler", "--compute-dma-mb=3", offset)
		hh.Resources.Claims = []corev1.ResourceClaim{{Name: manifest.RequestName}}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", claim, i), Namespace: draNS}, Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace, AutomountServiceAccountToken: &noToken,
			ResourceClaims: []corev1.PodResourceClaim{{Name: manifest.RequestName, ResourceClaimName: &claim}},
			Containers:     []corev1.Container{hh},
		}}
		created, err := c.CoreV1().Pods(draNS).Create(context.Background(), pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		diagnose(t, c, created)
		pods = append(pods, created)
	}
	return pods
}
