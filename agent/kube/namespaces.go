// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// labelPrefix is the agent's labels' prefix. Only those are kept: the others are no
// business of the agent's, and would cost memory on every node.
const labelPrefix = "nr1.neureality.ai/"

// maxNamespaceRetry bounds the wait between failed attempts: short, since enforcement
// waits on the labels once they are older than their limit, but jittered, since every
// node's agent asks again when an API server comes back.
const maxNamespaceRetry = 10 * time.Second

// errNotListed: no list of the namespaces has succeeded yet.
var errNotListed = errors.New("namespaces not listed yet")

// Namespaces follows the agent's labels on every namespace: one list, then a watch
// resumed from the last version seen, and a new list only when the API server can no
// longer resume it. Every namespace is followed, labelled or not, so that one the agent
// has not seen yet (a pod created right after its namespace) reads as unknown, never
// as unlabelled.
//
// The labels are current while the watch is open. Once it fails they are kept, since
// they change only when someone labels a namespace through the API server, but only for
// maxAge: after that a partitioned agent could be missing a change, and they are unknown.
//
// Not client-go's cache.Reflector: it retries a refused watch without telling anyone
// (no error reaches its handler, so the labels' age could not be counted from the first
// failure), and after any other failed watch it lists every namespace again.
type Namespaces struct {
	client namespaceClient
	maxAge time.Duration
	clock  clock.Clock
	log    *slog.Logger
	retry  time.Duration // first wait after a failure, doubling to maxNamespaceRetry

	mu      sync.Mutex
	labels  map[string]map[string]string // namespace → the agent's labels on it
	listed  bool
	current bool      // listed, and the watch since has not failed
	since   time.Time // when the labels stopped being current
	err     error     // why
}

// namespaceClient is the part of client-go's namespaces client the watch needs.
type namespaceClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.NamespaceList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

func newNamespaces(c namespaceClient, maxAge time.Duration, clk clock.Clock, log *slog.Logger) *Namespaces {
	return &Namespaces{client: c, maxAge: maxAge, clock: clk, log: log, retry: time.Second}
}

// restNamespaces reads namespaces with the core/v1 REST client: the typed namespaces
// client would bring all its methods and apply configurations into the binary.
type restNamespaces struct{ rest rest.Interface }

func (r *restNamespaces) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NamespaceList, error) {
	l := &corev1.NamespaceList{}
	if err := r.rest.Get().Resource("namespaces").VersionedParams(&opts, parameterCodec).Do(ctx).Into(l); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	return l, nil
}

func (r *restNamespaces) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	w, err := r.rest.Get().Resource("namespaces").VersionedParams(&opts, parameterCodec).Watch(ctx)
	if err != nil {
		return nil, fmt.Errorf("watching namespaces: %w", err)
	}
	return w, nil
}

// Labels returns the agent's labels on namespace as of now, or why they are not known.
func (n *Namespaces) Labels(namespace string, now time.Time) (map[string]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case !n.listed && n.err != nil:
		return nil, fmt.Errorf("%w: %w", errNotListed, n.err)
	case !n.listed:
		return nil, errNotListed
	case !n.current && now.Sub(n.since) > n.maxAge:
		return nil, fmt.Errorf("namespace labels last known current %s ago (limit %s): %w",
			now.Sub(n.since).Round(time.Second), n.maxAge, n.err)
	}
	l, ok := n.labels[namespace]
	if !ok {
		return nil, fmt.Errorf("namespace %s not seen yet", namespace)
	}
	return l, nil
}

// Health is the stage's: current now, or since when not, and why.
func (n *Namespaces) Health() (lastSuccess time.Time, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.current:
		return n.clock.Now(), nil
	case !n.listed && n.err == nil:
		return time.Time{}, errNotListed
	case !n.listed:
		return time.Time{}, n.err
	}
	return n.since, n.err
}

// Run lists and watches the namespaces until ctx ends, retrying with backoff whatever
// fails.
func (n *Namespaces) Run(ctx context.Context) {
	backoff := n.backoff()
	var version string
	for ctx.Err() == nil {
		var err error
		if version == "" {
			version, err = n.list(ctx)
		}
		if err == nil {
			version, err = n.watch(ctx, version)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err == nil: // a watch that ran its course
			backoff = n.backoff()
			continue
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
			// Too old to resume: list again at once.
			version = ""
			continue
		}
		n.failed(err)
		delay := backoff.Step()
		n.log.Warn("following the namespaces' labels", "err", err, "retry", delay)
		select {
		case <-ctx.Done():
		case <-n.clock.After(delay):
		}
	}
}

// backoff doubles from n.retry up to maxNamespaceRetry, each wait jittered by up to half
// again; its steps are waited on n.clock.
func (n *Namespaces) backoff() wait.Backoff {
	return wait.Backoff{Duration: n.retry, Factor: 2, Jitter: 0.5, Cap: maxNamespaceRetry, Steps: math.MaxInt32}
}

// list reads every namespace's labels and returns the list's resource version.
func (n *Namespaces) list(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	l, err := n.client.List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err // names what failed
	}
	labels := make(map[string]map[string]string, len(l.Items))
	for i := range l.Items {
		labels[l.Items[i].Name] = ours(l.Items[i].Labels)
	}
	n.mu.Lock()
	first := !n.listed
	n.labels, n.listed = labels, true
	n.mu.Unlock()
	n.ok()
	if first {
		n.log.Info("namespaces listed", "namespaces", len(labels))
	}
	return l.ResourceVersion, nil
}

// watch follows the namespaces from version for one watchTimeout, and returns the last
// version seen.
func (n *Namespaces) watch(ctx context.Context, version string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, watchTimeout+callTimeout)
	defer cancel()
	secs := int64(watchTimeout / time.Second)
	w, err := n.client.Watch(ctx, metav1.ListOptions{ResourceVersion: version, TimeoutSeconds: &secs, AllowWatchBookmarks: true})
	if err != nil {
		return version, err // names what failed
	}
	defer w.Stop()
	n.ok()
	for {
		ev, open, err := nextEvent(ctx, w)
		if err != nil {
			return version, fmt.Errorf("watching namespaces: %w", err)
		}
		if !open {
			return version, nil
		}
		ns, isNamespace := ev.Object.(*corev1.Namespace)
		if !isNamespace {
			continue
		}
		version = ns.ResourceVersion
		n.mu.Lock()
		switch ev.Type {
		case watch.Added, watch.Modified:
			n.labels[ns.Name] = ours(ns.Labels)
		case watch.Deleted:
			delete(n.labels, ns.Name)
		}
		n.mu.Unlock()
	}
}

// ok records that the labels are current.
func (n *Namespaces) ok() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.current && n.listed && n.err != nil {
		n.log.Info("namespace labels current again", "after", n.clock.Since(n.since).Round(time.Millisecond))
	}
	n.current, n.err = true, nil
}

// failed records that the labels are no longer current, from the first failure on.
func (n *Namespaces) failed(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.current || n.since.IsZero() {
		n.since = n.clock.Now()
	}
	n.current, n.err = false, err
}

// ours keeps the agent's labels; nil when there are none.
func ours(labels map[string]string) map[string]string {
	var out map[string]string
	for k, v := range labels {
		if strings.HasPrefix(k, labelPrefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}
