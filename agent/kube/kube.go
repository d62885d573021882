// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
)

// ErrEvictionRefused is returned when the API server refuses an eviction, as it does when
// a PodDisruptionBudget would be violated.
var ErrEvictionRefused = errors.New("eviction refused by the API server")

// ErrStaticPod is returned by Evict for a static pod: the Eviction API only deletes its
// mirror pod, which the kubelet recreates, so the caller has to stop its containers.
var ErrStaticPod = errors.New("static pod: eviction cannot stop it")

// ErrNotThePod is returned by MarkDisrupted for a pod whose status is not the agent's to
// mark: a static pod's mirror, or another pod of the name.
var ErrNotThePod = errors.New("not the pod acted on, or a static pod's mirror")

// Deadlines of API calls.
const (
	// callTimeout bounds an eviction, an Event's write and each call of the removal watch.
	callTimeout = 10 * time.Second
	// lookupTimeout bounds the pod lookup an Event waits for.
	lookupTimeout = 2 * time.Second
)

// timeouts are the deadlines a Client sets, shortened by tests.
type timeouts struct{ call, lookup time.Duration }

// Client talks to the API server.
type Client struct {
	evictions   evictions
	status      statusPatcher
	pods        *podCache
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	log         *slog.Logger
	timeouts    timeouts
}

// eventAPI writes Events: the REST client in the agent, client-go's typed (fake) client
// in tests.
type eventAPI interface {
	CreateWithEventNamespaceWithContext(ctx context.Context, e *corev1.Event) (*corev1.Event, error)
	UpdateWithEventNamespaceWithContext(ctx context.Context, e *corev1.Event) (*corev1.Event, error)
	PatchWithEventNamespaceWithContext(ctx context.Context, e *corev1.Event, data []byte) (*corev1.Event, error)
}

// evictions posts an Eviction of a pod of namespace.
type evictions interface {
	Evict(ctx context.Context, namespace string, e *policyv1.Eviction) error
}

// newClient builds the client on its API calls, which tests fake.
func newClient(events eventAPI, pods podGetter, status statusPatcher, ev evictions, node string, log *slog.Logger, t timeouts) *Client {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&eventSink{events: events, timeout: t.call})
	return &Client{
		evictions:   ev,
		status:      status,
		pods:        newPodCache(pods),
		broadcaster: b,
		recorder:    b.NewRecorder(scheme, corev1.EventSource{Component: "nr1-agent", Host: node}),
		log:         log,
		timeouts:    t,
	}
}

// Close flushes and stops the event broadcaster.
func (c *Client) Close() { c.broadcaster.Shutdown() }

// Event records an Event on a pod. uid is the pod's UID as the runtime knows it; for a
// static pod the Event goes to its mirror pod, the object the API server has.
func (c *Client) Event(namespace, pod, uid, eventType, reason, message string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeouts.lookup)
	defer cancel()
	target := uid
	if p, err := c.pods.get(ctx, namespace, pod, false); err != nil {
		c.log.Debug("pod lookup for an Event", "pod", namespace+"/"+pod, "err", err)
	} else if mirrorOf(p) == uid {
		target = string(p.UID)
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: pod, UID: types.UID(target)}
	c.recorder.Event(ref, eventType, reason, message)
}

// Evict asks the API server to evict the pod, only if it is still the one with uid. A
// static pod is not evicted: the error wraps ErrStaticPod.
func (c *Client) Evict(ctx context.Context, namespace, pod, uid string) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeouts.call)
	defer cancel()
	if p, err := c.pods.get(ctx, namespace, pod, true); err == nil && mirrorOf(p) != "" {
		return fmt.Errorf("evicting %s/%s: %w", namespace, pod, ErrStaticPod)
	}
	u := types.UID(uid)
	err := c.evictions.Evict(ctx, namespace, &policyv1.Eviction{
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

// eventSink writes Events with a deadline on every call (client-go's sink has none).
// client-go's recorder tells by an error's type which writes to retry: transport errors
// are retried for about two minutes, but any answer of the API server is final. An API
// server that is starting answers 503 or 429 for a few seconds (and 401 or 403 until its
// authorizers have synced), and the Events of an outage would be dropped exactly then;
// such answers are passed on as transient, but for a namespace being deleted, which
// refuses for good. A real refusal is then retried for about two minutes before it is
// dropped: a log line's cost.
type eventSink struct {
	events  eventAPI
	timeout time.Duration
}

func (s *eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	out, err := s.events.CreateWithEventNamespaceWithContext(ctx, e)
	return out, transient(err)
}

func (s *eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	out, err := s.events.UpdateWithEventNamespaceWithContext(ctx, e)
	return out, transient(err)
}

func (s *eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	out, err := s.events.PatchWithEventNamespaceWithContext(ctx, e, data)
	return out, transient(err)
}

// errTransient marks an API server answer that a later write may not get.
var errTransient = errors.New("API server not ready")

// transient wraps the answers of an API server that is starting or overloaded, so that
// the recorder retries them (it gives up on a *StatusError); others are left as they are.
func transient(err error) error {
	// An Event on a pod of a namespace being deleted is refused (403) for good. The
	// recorder writes one Event at a time: retried, it would hold every Event after it,
	// on every pod, for the two minutes of its retries.
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return err
	}
	if apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTimeout(err) || apierrors.IsInternalError(err) || apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
		return fmt.Errorf("%w: %w", errTransient, err)
	}
	return err // unwrapped: the recorder reads client-go's own error types
}

// nextEvent waits for a watch's next event. open is false once ctx ends or the server
// closes the watch (the caller watches again); an Error event is the error it carries.
func nextEvent(ctx context.Context, w watch.Interface) (ev watch.Event, open bool, err error) {
	select {
	case <-ctx.Done():
		return watch.Event{}, false, nil
	case ev, open = <-w.ResultChan():
	}
	if open && ev.Type == watch.Error {
		return ev, false, fmt.Errorf("watch error event: %w", apierrors.FromObject(ev.Object))
	}
	return ev, open, nil
}

// restEvents writes core/v1 Events with the REST client, in the Event's namespace.
type restEvents struct{ rest rest.Interface }

func (r restEvents) CreateWithEventNamespaceWithContext(ctx context.Context, e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := r.rest.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(ctx).Into(out)
	return out, err //nolint:wrapcheck // the recorder reads client-go's error types
}

func (r restEvents) UpdateWithEventNamespaceWithContext(ctx context.Context, e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := r.rest.Put().Namespace(e.Namespace).Resource("events").Name(e.Name).Body(e).Do(ctx).Into(out)
	return out, err //nolint:wrapcheck // the recorder reads client-go's error types
}

func (r restEvents) PatchWithEventNamespaceWithContext(ctx context.Context, e *corev1.Event, data []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := r.rest.Patch(types.StrategicMergePatchType).Namespace(e.Namespace).Resource("events").Name(e.Name).Body(data).Do(ctx).Into(out)
	return out, err //nolint:wrapcheck // the recorder reads client-go's error types
}

// restEvictions posts policy/v1 Evictions, a subresource of core/v1 pods.
type restEvictions struct{ rest rest.Interface }

func (r restEvictions) Evict(ctx context.Context, namespace string, e *policyv1.Eviction) error {
	return r.rest.Post().AbsPath("/api/v1").Namespace(namespace).Resource("pods").Name(e.Name).SubResource("eviction").Body(e).Do(ctx).Error() //nolint:wrapcheck // wrapped by the caller, which reads its type
}
