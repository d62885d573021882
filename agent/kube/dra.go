// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// Resources is what the DRA driver asks of the API server: ResourceClaims, the node's
// ResourceSlices, and the node that owns them.
type Resources struct {
	core, resource rest.Interface
}

// Claim reads a ResourceClaim.
func (r *Resources) Claim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	c := &resourceapi.ResourceClaim{}
	if err := r.resource.Get().Namespace(namespace).Resource("resourceclaims").Name(name).Do(ctx).Into(c); err != nil {
		return nil, fmt.Errorf("ResourceClaim %s/%s: %w", namespace, name, err)
	}
	return c, nil
}

// NodeUID is the UID of the node name.
func (r *Resources) NodeUID(ctx context.Context, name string) (types.UID, error) {
	n := &corev1.Node{}
	if err := r.core.Get().Resource("nodes").Name(name).Do(ctx).Into(n); err != nil {
		return "", fmt.Errorf("node %s: %w", name, err)
	}
	return n.UID, nil
}

// Slices lists the ResourceSlices of driver on node.
func (r *Resources) Slices(ctx context.Context, node, driver string) ([]resourceapi.ResourceSlice, error) {
	opts := metav1.ListOptions{FieldSelector: fields.Set{"spec.nodeName": node, "spec.driver": driver}.String()}
	l := &resourceapi.ResourceSliceList{}
	if err := r.resource.Get().Resource("resourceslices").VersionedParams(&opts, parameterCodec).Do(ctx).Into(l); err != nil {
		return nil, fmt.Errorf("ResourceSlices of %s on %s: %w", driver, node, err)
	}
	return l.Items, nil
}

// CreateSlice creates a ResourceSlice.
func (r *Resources) CreateSlice(ctx context.Context, s *resourceapi.ResourceSlice) (*resourceapi.ResourceSlice, error) {
	out := &resourceapi.ResourceSlice{}
	if err := r.resource.Post().Resource("resourceslices").Body(s).Do(ctx).Into(out); err != nil {
		return nil, fmt.Errorf("creating ResourceSlice %s: %w", s.GenerateName, err)
	}
	return out, nil
}

// UpdateSlice replaces a ResourceSlice.
func (r *Resources) UpdateSlice(ctx context.Context, s *resourceapi.ResourceSlice) (*resourceapi.ResourceSlice, error) {
	out := &resourceapi.ResourceSlice{}
	if err := r.resource.Put().Resource("resourceslices").Name(s.Name).Body(s).Do(ctx).Into(out); err != nil {
		return nil, fmt.Errorf("updating ResourceSlice %s: %w", s.Name, err)
	}
	return out, nil
}

// NodeEvent records an Event on node, where `kubectl describe node` shows it (the
// kubelet's own name the node by its name, as here).
func (r *Resources) NodeEvent(ctx context.Context, node, eventType, reason, message string) error {
	now := metav1.Now()
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", node, now.UnixNano()), Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)},
		Type:           eventType,
		Reason:         reason,
		Message:        message,
		Source:         corev1.EventSource{Component: "nr1-agent", Host: node},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	if err := r.core.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(ctx).Error(); err != nil {
		return fmt.Errorf("writing Event %s on node %s: %w", reason, node, err)
	}
	return nil
}
