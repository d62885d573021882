// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// statusPatcher applies a strategic merge patch to a pod's status: the REST client in
// the agent, the typed fake client in tests.
type statusPatcher func(ctx context.Context, namespace, name string, patch []byte) error

func restStatus(c rest.Interface) statusPatcher {
	return func(ctx context.Context, namespace, name string, patch []byte) error {
		if err := c.Patch(types.StrategicMergePatchType).Namespace(namespace).Resource("pods").Name(name).SubResource("status").Body(patch).Do(ctx).Error(); err != nil {
			return fmt.Errorf("patching the status of pod %s/%s: %w", namespace, name, err)
		}
		return nil
	}
}

// MarkDisrupted sets the pod's DisruptionTarget condition, as the Eviction API and the
// kubelet do for the pods they end, so that a Job's podFailurePolicy can tell a pod
// stopped by the agent from one that failed by itself; only while the pod is the one
// with uid (the patch carries the UID, which the API server refuses to change). A static
// pod's mirror is left alone: its status is the kubelet's.
func (c *Client) MarkDisrupted(ctx context.Context, namespace, pod, uid, reason, message string) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeouts.call)
	defer cancel()
	p, err := c.pods.get(ctx, namespace, pod, true)
	if err != nil {
		return fmt.Errorf("marking %s/%s disrupted: %w", namespace, pod, err)
	}
	if mirrorOf(p) != "" || string(p.UID) != uid {
		return fmt.Errorf("marking %s/%s disrupted: %w", namespace, pod, ErrNotThePod)
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": uid},
		"status": map[string]any{"conditions": []corev1.PodCondition{{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: reason, Message: message,
			LastTransitionTime: metav1.NewTime(time.Now()),
		}}},
	})
	if err != nil {
		return fmt.Errorf("marking %s/%s disrupted: %w", namespace, pod, err)
	}
	if err := c.status(ctx, namespace, pod, patch); err != nil {
		return fmt.Errorf("marking %s/%s disrupted: %w", namespace, pod, err)
	}
	return nil
}
