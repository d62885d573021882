// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

// mirrorAnnotation is set by the kubelet on a static pod's mirror pod to the static
// pod's UID (its config hash), the UID the runtime reports.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// mirrorOf is the static pod's UID a mirror pod stands for; empty for any other pod.
func mirrorOf(p *corev1.Pod) string { return p.Annotations[mirrorAnnotation] }

// podGetter reads a pod: with restPods in the agent, since client-go's typed pods client
// would bring all its methods and apply configurations into the binary; with the typed
// fake clientset in tests.
type podGetter func(ctx context.Context, namespace, name string) (*corev1.Pod, error)

// restPods reads pods with the core/v1 REST client.
func restPods(c rest.Interface) podGetter {
	return func(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
		p := &corev1.Pod{}
		if err := c.Get().Namespace(namespace).Resource("pods").Name(name).Do(ctx).Into(p); err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, err)
		}
		return p, nil
	}
}

// podTTL is how long a pod lookup, or its failure, is reused: an Event per action and
// CG does not each cost a GET, nor wait on an API server that just failed one.
const podTTL = 30 * time.Second

// podCache looks pods up by namespace and name, remembering each answer for podTTL.
type podCache struct {
	read podGetter
	now  func() time.Time

	mu      sync.Mutex
	entries map[string]podEntry
}

type podEntry struct {
	pod     *corev1.Pod
	err     error
	expires time.Time
}

func newPodCache(get podGetter) *podCache {
	return &podCache{read: get, now: time.Now, entries: map[string]podEntry{}}
}

// get returns the pod, from the cache unless fresh or expired. The GET runs under ctx,
// which the caller bounds.
func (c *podCache) get(ctx context.Context, namespace, name string, fresh bool) (*corev1.Pod, error) {
	key := namespace + "/" + name
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && !fresh && now.Before(e.expires) {
		return e.pod, e.err
	}
	p, err := c.read(ctx, namespace, name)
	if err != nil {
		p = nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, old := range c.entries { // few entries: pods acted on within podTTL
		if !now.Before(old.expires) {
			delete(c.entries, k)
		}
	}
	c.entries[key] = podEntry{pod: p, err: err, expires: now.Add(podTTL)}
	return p, err
}

// InitLimit is the largest limit of resource among the init containers of pod
// namespace/name that run to completion before the others start: the kubelet's
// pod-resources answer lists sidecars (restartable init containers) with the main
// containers, but leaves these out, and one of them may book more than all the others
// together. A pod of that name that is not the one with uid is an error.
func (c *Client) InitLimit(ctx context.Context, namespace, pod, uid, resource string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeouts.lookup)
	defer cancel()
	p, err := c.pods.get(ctx, namespace, pod, false)
	if err == nil && string(p.UID) != uid {
		// The cached pod may be one the name stood for before: asked again once.
		p, err = c.pods.get(ctx, namespace, pod, true)
	}
	if err != nil {
		return 0, err
	}
	if string(p.UID) != uid {
		return 0, fmt.Errorf("pod %s/%s is %s, not %s", namespace, pod, p.UID, uid)
	}
	var largest int64
	for _, ctr := range p.Spec.InitContainers {
		if ctr.RestartPolicy != nil && *ctr.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			continue
		}
		if q, ok := ctr.Resources.Limits[corev1.ResourceName(resource)]; ok {
			largest = max(largest, q.Value())
		}
	}
	return largest, nil
}
