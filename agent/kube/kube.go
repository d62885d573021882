// Package kube is the agent's Kubernetes API client: Events on pods and the Eviction
// API. It is optional: on a standalone kubelet there is no API server, and the agent's
// actions are then only logged.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	policyv1client "k8s.io/client-go/kubernetes/typed/policy/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
)

// ErrEvictionRefused is returned when the API server refuses an eviction, as it does when
// a PodDisruptionBudget would be violated.
var ErrEvictionRefused = errors.New("eviction refused by the API server")

// Client talks to the API server.
type Client struct {
	policy      policyv1client.PolicyV1Interface
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
}

// New connects with kubeconfig, or in-cluster when it is empty.
func New(kubeconfig, node string, log *slog.Logger) (*Client, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	cfg.UserAgent = "nr1-agent"
	// Only the two API groups the agent uses: the full clientset and scheme would more
	// than double the binary.
	core, err := typedcorev1.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	policy, err := policyv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("kubernetes scheme: %w", err)
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: core.Events("")})
	log.Info("kubernetes API client ready", "host", cfg.Host)
	return &Client{policy: policy, broadcaster: b, recorder: b.NewRecorder(scheme, corev1.EventSource{Component: "nr1-agent", Host: node})}, nil
}

// Close flushes and stops the event broadcaster.
func (c *Client) Close() { c.broadcaster.Shutdown() }

// Event records an Event on a pod.
func (c *Client) Event(namespace, pod, uid, eventType, reason, message string) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: pod, UID: types.UID(uid)}
	c.recorder.Event(ref, eventType, reason, message)
}

// Evict asks the API server to evict the pod, only if it is still the one with uid.
func (c *Client) Evict(ctx context.Context, namespace, pod, uid string) error {
	u := types.UID(uid)
	err := c.policy.Evictions(namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod, Namespace: namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &u}},
	})
	switch {
	case err == nil:
		return nil
	case apierrors.IsTooManyRequests(err):
		return fmt.Errorf("evicting %s/%s: %w: %w", namespace, pod, ErrEvictionRefused, err)
	default:
		return fmt.Errorf("evicting %s/%s: %w", namespace, pod, err)
	}
}
