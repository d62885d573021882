// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// watchTimeout is how long one watch request lasts before it is made again.
const watchTimeout = 5 * time.Minute

// errNoDaemonSet: the agent's pod is not run by a DaemonSet.
var errNoDaemonSet = errors.New("the agent's pod has no DaemonSet controller")

// Removal tells whether the agent is being removed from the cluster: the DaemonSet that
// runs its pod is deleted (helm uninstall, kubectl delete) — a rollout, a restart, a
// deleted pod or a drained node leave it in place. It watches that DaemonSet while the
// agent runs, since an uninstall goes on to delete the agent's ServiceAccount and RBAC:
// by the time the agent is stopped, it may no longer be allowed to ask.
//
// Not client-go's cache.Reflector: one DaemonSet is read by name (get, watch), and a
// Reflector lists, which the agent's RBAC does not grant on DaemonSets. Nor its
// RetryWatcher (client-go v0.37): it makes a failed watch again every second, without
// growing the wait, and tells its failures to klog only — with the API server down,
// every node's agent would ask once a second and say nothing; this loop doubles its wait
// to 30 s and logs each failure with the wait.
type Removal struct {
	getPod         podGetter
	daemonSets     daemonSetClient
	namespace, pod string
	log            *slog.Logger
	retry          time.Duration // first wait after a failure, doubling to 30 s
	// clock times the waits between attempts, so that tests step a fake one; the
	// deadlines of API calls stay on real time, bounding calls to a real API server.
	clock clock.Clock

	mu      sync.Mutex
	owner   *metav1.OwnerReference
	removed bool
}

func newRemoval(getPod podGetter, ds daemonSetClient, namespace, pod string, log *slog.Logger) *Removal {
	return &Removal{getPod: getPod, daemonSets: ds, namespace: namespace, pod: pod, log: log, retry: time.Second, clock: clock.RealClock{}}
}

// daemonSetClient is the part of client-go's typed DaemonSet client the watch needs.
type daemonSetClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*appsv1.DaemonSet, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// restDaemonSets reads apps/v1 DaemonSets of one namespace with a plain REST client: the
// typed apps client would bring its apply configurations into the binary.
type restDaemonSets struct {
	rest      rest.Interface
	namespace string
}

func (d *restDaemonSets) Get(ctx context.Context, name string, opts metav1.GetOptions) (*appsv1.DaemonSet, error) {
	ds := &appsv1.DaemonSet{}
	err := d.rest.Get().Namespace(d.namespace).Resource("daemonsets").Name(name).
		VersionedParams(&opts, parameterCodec).Do(ctx).Into(ds)
	if err != nil {
		return nil, fmt.Errorf("daemonset %s/%s: %w", d.namespace, name, err)
	}
	return ds, nil
}

func (d *restDaemonSets) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	w, err := d.rest.Get().Namespace(d.namespace).Resource("daemonsets").
		VersionedParams(&opts, parameterCodec).Watch(ctx)
	if err != nil {
		return nil, fmt.Errorf("watching daemonsets in %s: %w", d.namespace, err)
	}
	return w, nil
}

// Run finds the pod's DaemonSet and watches it until ctx ends or it is seen deleted,
// retrying with backoff whatever fails.
func (r *Removal) Run(ctx context.Context) {
	backoff := r.backoff()
	for ctx.Err() == nil {
		owner, err := r.findOwner(ctx)
		if errors.Is(err, errNoDaemonSet) {
			r.log.Warn("throttles will not be lifted when the agent is removed", "err", err)
			return
		}
		var seen bool
		if err == nil {
			seen, err = r.watch(ctx, owner)
		}
		if seen {
			r.log.Info("the agent's DaemonSet is being deleted: the agent will undo what it did on this node when it stops", "daemonset", r.namespace+"/"+owner.Name)
			return
		}
		if err == nil {
			backoff = r.backoff() // a watch that ran its course
			continue
		}
		delay := backoff.Step()
		if ctx.Err() == nil {
			r.log.Warn("following the agent's DaemonSet", "err", err, "retry", delay)
		}
		select {
		case <-ctx.Done():
		case <-r.clock.After(delay):
		}
	}
}

// backoff doubles from r.retry up to 30s; its steps are waited on r.clock.
func (r *Removal) backoff() wait.Backoff {
	return wait.Backoff{Duration: r.retry, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32}
}

// Removed tells whether the agent's DaemonSet is deleted or being deleted: as the watch
// saw it, else as the API server answers now.
func (r *Removal) Removed(ctx context.Context) (bool, error) {
	r.mu.Lock()
	removed, owner := r.removed, r.owner
	r.mu.Unlock()
	if removed {
		return true, nil
	}
	if owner == nil {
		return false, fmt.Errorf("the DaemonSet of pod %s/%s was never found", r.namespace, r.pod)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	ds, err := r.daemonSets.Get(ctx, owner.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("following the agent's DaemonSet: %w", err)
	}
	return gone(ds, owner.UID), nil
}

// findOwner returns the DaemonSet controlling the agent's pod.
func (r *Removal) findOwner(ctx context.Context) (*metav1.OwnerReference, error) {
	r.mu.Lock()
	owner := r.owner
	r.mu.Unlock()
	if owner != nil {
		return owner, nil
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	p, err := r.getPod(ctx, r.namespace, r.pod)
	if err != nil {
		return nil, fmt.Errorf("reading the agent's pod: %w", err)
	}
	owner = metav1.GetControllerOf(p)
	if owner == nil || owner.Kind != "DaemonSet" {
		return nil, fmt.Errorf("pod %s/%s: %w", r.namespace, r.pod, errNoDaemonSet)
	}
	r.mu.Lock()
	r.owner = owner
	r.mu.Unlock()
	return owner, nil
}

// watch reads the DaemonSet, then watches it for one watchTimeout. It reports whether
// it saw the DaemonSet deleted (or replaced by another of the same name).
func (r *Removal) watch(ctx context.Context, owner *metav1.OwnerReference) (bool, error) {
	gctx, cancel := context.WithTimeout(ctx, callTimeout)
	ds, err := r.daemonSets.Get(gctx, owner.Name, metav1.GetOptions{})
	cancel()
	if apierrors.IsNotFound(err) {
		return r.seen(), nil
	}
	if err != nil {
		return false, fmt.Errorf("following the agent's DaemonSet: %w", err)
	}
	if gone(ds, owner.UID) {
		return r.seen(), nil
	}
	wctx, cancel := context.WithTimeout(ctx, watchTimeout+callTimeout)
	defer cancel()
	secs := int64(watchTimeout / time.Second)
	w, err := r.daemonSets.Watch(wctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", owner.Name).String(),
		ResourceVersion: ds.ResourceVersion,
		TimeoutSeconds:  &secs,
	})
	if err != nil {
		return false, fmt.Errorf("following the agent's DaemonSet: %w", err)
	}
	defer w.Stop()
	for {
		ev, open, err := nextEvent(wctx, w)
		if err != nil {
			return false, fmt.Errorf("watching daemonset %s/%s: %w", r.namespace, owner.Name, err)
		}
		if !open {
			return false, nil
		}
		switch ev.Type {
		case watch.Deleted, watch.Added, watch.Modified:
			m, err := meta.Accessor(ev.Object)
			if err != nil {
				continue
			}
			if ev.Type == watch.Deleted || gone(m, owner.UID) {
				return r.seen(), nil
			}
		}
	}
}

func (r *Removal) seen() bool {
	r.mu.Lock()
	r.removed = true
	r.mu.Unlock()
	return true
}

// gone tells a DaemonSet being deleted, or one that replaced the agent's (uid).
func gone(ds metav1.Object, uid types.UID) bool {
	return ds.GetDeletionTimestamp() != nil || ds.GetUID() != uid
}
