// SPDX-License-Identifier: Apache-2.0

package agents

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// Defaults: where the agents run and how their pods are labelled (deploy/kustomize).
const (
	DefaultNamespace = "nr1-system"
	DefaultSelector  = "app.kubernetes.io/name=nr1-agent"
	metricsPort      = 9470
)

// Source finds the agents and reads them through the API server.
type Source struct {
	Pods      corev1client.PodsGetter
	Namespace string
	Selector  string
}

// Agents lists the agent pods, of one node when node is not empty, by node name.
func (s Source) Agents(ctx context.Context, node string) ([]corev1.Pod, error) {
	opts := metav1.ListOptions{LabelSelector: s.Selector}
	if node != "" {
		opts.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}
	list, err := s.Pods.Pods(s.Namespace).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("agent pods in namespace %s (%s): %w", s.Namespace, s.Selector, err)
	}
	pods := list.Items
	sort.Slice(pods, func(i, j int) bool { return pods[i].Spec.NodeName < pods[j].Spec.NodeName })
	return pods, nil
}

// Nodes reads every agent, or the one on node, a few at a time. An agent that cannot be
// read is a node whose Error says why: the others are still shown.
func (s Source) Nodes(ctx context.Context, node string) ([]*Node, error) {
	pods, err := s.Agents(ctx, node)
	if err != nil {
		return nil, err
	}
	if node != "" && len(pods) == 0 {
		return nil, fmt.Errorf("no agent on node %s (pods %s in namespace %s)", node, s.Selector, s.Namespace)
	}
	out := make([]*Node, len(pods))
	var wg sync.WaitGroup
	limit := make(chan struct{}, 8)
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			limit <- struct{}{}
			defer func() { <-limit }()
			out[i] = s.Read(ctx, &pods[i])
		}()
	}
	wg.Wait()
	return out, nil
}

// Read reads one agent's report.
func (s Source) Read(ctx context.Context, pod *corev1.Pod) *Node {
	name := pod.Namespace + "/" + pod.Name
	failed := func(format string, args ...any) *Node {
		return &Node{Name: pod.Spec.NodeName, Agent: name, Error: fmt.Sprintf(format, args...)}
	}
	if pod.Status.Phase != corev1.PodRunning {
		return failed("agent pod is %s", pod.Status.Phase)
	}
	raw, err := s.Pods.Pods(pod.Namespace).ProxyGet("http", pod.Name, strconv.Itoa(port(pod)), "metrics", nil).DoRaw(ctx)
	switch {
	case apierrors.IsForbidden(err):
		return failed("forbidden to read its metrics through the API server (get pods/proxy in namespace %s: the nr1-agent-reader Role grants it)", pod.Namespace)
	case err != nil:
		return failed("reading its metrics through the API server: %v", err)
	}
	n, err := Parse(pod.Spec.NodeName, name, bytes.NewReader(raw))
	if err != nil {
		return failed("%v", err)
	}
	return n
}

// port is the agent container's port named metrics.
func port(pod *corev1.Pod) int {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == "metrics" {
				return int(p.ContainerPort)
			}
		}
	}
	return metricsPort
}
