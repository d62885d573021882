// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The largest queue limit among a pod's run-to-completion init containers; sidecars
// (listed by the kubelet with the main containers), main containers and other
// resources do not count; a pod of the name that is another pod is an error, even
// once a lookup of the old one is cached.
func TestInitLimitIsTheLargestRunToCompletionInitContainers(t *testing.T) {
	const queue = "neureality.ai/ai_hypervisor_queue"
	always := corev1.ContainerRestartPolicyAlways
	limits := func(name string, n int64) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceName(name): *resource.NewQuantity(n, resource.DecimalSI)}
	}
	p := pod("cg", "cg-uid", nil)
	p.Spec = corev1.PodSpec{
		InitContainers: []corev1.Container{
			{Name: "fetch", Resources: corev1.ResourceRequirements{Limits: limits(queue, 4)}},
			{Name: "warm", Resources: corev1.ResourceRequirements{Limits: limits(queue, 2)}},
			{Name: "sidecar", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Limits: limits(queue, 9)}},
			{Name: "disk", Resources: corev1.ResourceRequirements{Limits: limits("neureality.ai/docker_partition_in_mb", 50)}},
		},
		Containers: []corev1.Container{{Name: "health-handler", Resources: corev1.ResourceRequirements{Limits: limits(queue, 7)}}},
	}
	plain := pod("web", "web-uid", nil)
	cs := fake.NewClientset(p, plain)
	k := newClient(cs.CoreV1().Events(""), typedPods(cs), typedStatus(cs), typedEvictions{cs.PolicyV1()}, "node1", quiet(), timeouts{call: time.Second, lookup: time.Second})
	t.Cleanup(k.Close)
	ctx := context.Background()

	if n, err := k.InitLimit(ctx, "ns", "cg", "cg-uid", queue); err != nil || n != 4 {
		t.Errorf("InitLimit(cg) = %d, %v; want 4", n, err)
	}
	if n, err := k.InitLimit(ctx, "ns", "web", "web-uid", queue); err != nil || n != 0 {
		t.Errorf("InitLimit(web) = %d, %v; want 0", n, err)
	}
	if _, err := k.InitLimit(ctx, "ns", "missing", "x", queue); err == nil {
		t.Error("InitLimit of a pod the API server does not have: no error")
	}
	// cg recreated under its name: the cached lookup is of the old pod.
	if err := cs.CoreV1().Pods("ns").Delete(ctx, "cg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := pod("cg", "cg-uid-2", nil)
	again.Spec.InitContainers = []corev1.Container{{Name: "fetch", Resources: corev1.ResourceRequirements{Limits: limits(queue, 6)}}}
	if _, err := cs.CoreV1().Pods("ns").Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := k.InitLimit(ctx, "ns", "cg", "cg-uid-2", queue); err != nil || n != 6 {
		t.Errorf("InitLimit(cg recreated) = %d, %v; want 6", n, err)
	}
	if _, err := k.InitLimit(ctx, "ns", "cg", "cg-uid", queue); err == nil {
		t.Error("InitLimit of the pod the name stood for before: no error")
	}
}
