// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The pod acted on gets a DisruptionTarget condition naming the agent's reason, beside
// the conditions it had; a pod recreated under the name, and a static pod's mirror, are
// left alone.
func TestMarkDisrupted(t *testing.T) {
	c, k := newCluster(t)
	ctx := context.Background()
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
	p, err := c.CoreV1().Pods("ns").Get(ctx, "cg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = []corev1.PodCondition{ready}
	if _, err := c.CoreV1().Pods("ns").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.MarkDisrupted(ctx, "ns", "cg", "cg-uid", "NR1Killed", "holds 9 queues, booked 7"); err != nil {
		t.Fatalf("MarkDisrupted: %v", err)
	}
	p, err = c.CoreV1().Pods("ns").Get(ctx, "cg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got *corev1.PodCondition
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.DisruptionTarget {
			got = &p.Status.Conditions[i]
		}
	}
	if got == nil || got.Status != corev1.ConditionTrue || got.Reason != "NR1Killed" || got.Message != "holds 9 queues, booked 7" || got.LastTransitionTime.IsZero() {
		t.Errorf("conditions %+v, want DisruptionTarget True NR1Killed with the message", p.Status.Conditions)
	}
	if len(p.Status.Conditions) != 2 {
		t.Errorf("conditions %+v, want Ready kept beside DisruptionTarget", p.Status.Conditions)
	}
	for name, uid := range map[string]string{"recreated": "old-uid", "etcd-node1": "static-uid"} {
		if err := k.MarkDisrupted(ctx, "ns", name, uid, "NR1Killed", "m"); !errors.Is(err, ErrNotThePod) {
			t.Errorf("MarkDisrupted of %s (uid %s): %v, want ErrNotThePod", name, uid, err)
		}
		p, err := c.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Status.Conditions) != 0 {
			t.Errorf("%s marked: %+v", name, p.Status.Conditions)
		}
	}
}
