// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// Node is the agent's own Node: its labels, read, and changed by a merge patch that
// touches only the labels named.
type Node struct {
	core rest.Interface
	name string
}

// Labels are the node's labels.
func (n *Node) Labels(ctx context.Context) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	node := &corev1.Node{}
	if err := n.core.Get().Resource("nodes").Name(n.name).Do(ctx).Into(node); err != nil {
		return nil, fmt.Errorf("node %s: %w", n.name, err)
	}
	return node.Labels, nil
}

// PatchLabels sets each label given a value and removes each given nil, leaving the
// node's other labels as they are: a merge patch, so that labels others write between
// the agent's read and its write are kept.
func (n *Node) PatchLabels(ctx context.Context, labels map[string]*string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return fmt.Errorf("node %s's labels: %w", n.name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := n.core.Patch(types.MergePatchType).Resource("nodes").Name(n.name).Body(patch).Do(ctx).Error(); err != nil {
		return fmt.Errorf("labelling node %s: %w", n.name, err)
	}
	return nil
}
