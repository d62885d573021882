// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	policyv1client "k8s.io/client-go/kubernetes/typed/policy/v1"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// typedPods reads pods with client-go's typed client.
func typedPods(cs *fake.Clientset) podGetter {
	return func(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
		return cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	}
}

func typedStatus(cs *fake.Clientset) statusPatcher {
	return func(ctx context.Context, namespace, name string, patch []byte) error {
		_, err := cs.CoreV1().Pods(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		return err
	}
}

func pod(name, uid string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid), Annotations: annotations}}
}

// cluster is a fake API server holding a static pod's mirror pod (its runtime UID is
// static-uid), an ordinary pod, and a pod recreated under the same name.
type cluster struct {
	*fake.Clientset
	mu        sync.Mutex
	evictions []*policyv1.Eviction
}

func newCluster(t *testing.T) (*cluster, *Client) {
	t.Helper()
	c := &cluster{Clientset: fake.NewClientset(
		pod("etcd-node1", "mirror-uid", map[string]string{mirrorAnnotation: "static-uid"}),
		pod("cg", "cg-uid", nil),
		pod("recreated", "new-uid", nil),
	)}
	c.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.evictions = append(c.evictions, a.(clienttesting.CreateAction).GetObject().(*policyv1.Eviction))
		return true, nil, nil
	})
	k := newClient(c.CoreV1().Events(""), typedPods(c.Clientset), typedStatus(c.Clientset), typedEvictions{c.PolicyV1()}, "node1", quiet(), timeouts{call: time.Second, lookup: time.Second})
	t.Cleanup(k.Close)
	return c, k
}

// eventUID waits for the Event with reason and returns the UID it is attached to.
func (c *cluster) eventUID(t *testing.T, reason string) types.UID {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		list, err := c.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Reason == reason {
				return e.InvolvedObject.UID
			}
		}
	}
	t.Fatalf("no Event %s recorded", reason)
	return ""
}

func (c *cluster) count(verb, resource string) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource && a.GetSubresource() == "" {
			n++
		}
	}
	return n
}

func TestEventGoesToTheAPIServersPod(t *testing.T) {
	c, k := newCluster(t)
	tests := []struct {
		pod, uid string
		want     types.UID
	}{
		{"etcd-node1", "static-uid", "mirror-uid"}, // static pod: its mirror pod
		{"cg", "cg-uid", "cg-uid"},
		{"recreated", "old-uid", "old-uid"}, // another pod now has the name: not that one
		{"gone", "gone-uid", "gone-uid"},    // no such pod
	}
	for i, tt := range tests {
		reason := "Reason" + string(rune('A'+i))
		k.Event("ns", tt.pod, tt.uid, corev1.EventTypeWarning, reason, "over")
		if got := c.eventUID(t, reason); got != tt.want {
			t.Errorf("Event on %s (runtime UID %s) attached to UID %s, want %s", tt.pod, tt.uid, got, tt.want)
		}
	}
}

func TestEventLookupsAreCached(t *testing.T) {
	c, k := newCluster(t)
	now := time.Unix(1000, 0)
	k.pods.now = func() time.Time { return now }
	k.Event("ns", "etcd-node1", "static-uid", corev1.EventTypeWarning, "First", "over")
	k.Event("ns", "etcd-node1", "static-uid", corev1.EventTypeWarning, "Second", "over")
	k.Event("ns", "gone", "gone-uid", corev1.EventTypeWarning, "First", "over")
	k.Event("ns", "gone", "gone-uid", corev1.EventTypeWarning, "Second", "over")
	if n := c.count("get", "pods"); n != 2 {
		t.Errorf("%d pod GETs for two Events on each of two pods, want 2 (one each, failures cached too)", n)
	}
	now = now.Add(podTTL)
	k.Event("ns", "etcd-node1", "static-uid", corev1.EventTypeWarning, "Third", "over")
	if n := c.count("get", "pods"); n != 3 {
		t.Errorf("%d pod GETs once the lookup expired, want 3", n)
	}
	if got := c.eventUID(t, "Third"); got != "mirror-uid" {
		t.Errorf("Event attached to %s, want mirror-uid", got)
	}
}

func TestEvictStaticPodIsLeftToTheCaller(t *testing.T) {
	c, k := newCluster(t)
	err := k.Evict(context.Background(), "ns", "etcd-node1", "static-uid")
	if !errors.Is(err, ErrStaticPod) {
		t.Fatalf("Evict of a static pod: %v, want ErrStaticPod", err)
	}
	// Even when the mirror pod stands for another version of the static pod.
	if err := k.Evict(context.Background(), "ns", "etcd-node1", "older-static-uid"); !errors.Is(err, ErrStaticPod) {
		t.Errorf("Evict of an older static pod: %v, want ErrStaticPod", err)
	}
	if len(c.evictions) != 0 {
		t.Fatalf("Eviction API called for a static pod: %v", c.evictions)
	}
	if err := k.Evict(context.Background(), "ns", "cg", "cg-uid"); err != nil {
		t.Fatal(err)
	}
	if len(c.evictions) != 1 {
		t.Fatalf("%d evictions, want 1", len(c.evictions))
	}
	e := c.evictions[0]
	if e.Name != "cg" || e.DeleteOptions == nil || e.DeleteOptions.Preconditions == nil || *e.DeleteOptions.Preconditions.UID != "cg-uid" {
		t.Errorf("eviction %+v, want cg with UID precondition cg-uid", e)
	}
}

func TestEvictRefusedByABudget(t *testing.T) {
	c, k := newCluster(t)
	c.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		return a.GetSubresource() == "eviction", nil, apierrors.NewTooManyRequests("disruption budget", 10)
	})
	if err := k.Evict(context.Background(), "ns", "cg", "cg-uid"); !errors.Is(err, ErrEvictionRefused) {
		t.Errorf("Evict refused with 429: %v, want ErrEvictionRefused", err)
	}
}

// A hung API server holds no caller past its deadline.
func TestCallsHaveDeadlines(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	cfg := &rest.Config{Host: srv.URL}
	core, err := restClient(cfg, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	policy, err := restClient(cfg, policyv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	k := newClient(restEvents{core}, restPods(core), restStatus(core), restEvictions{policy}, "node1", quiet(), timeouts{call: 300 * time.Millisecond, lookup: 100 * time.Millisecond})
	t.Cleanup(k.Close)

	start := time.Now()
	k.Event("ns", "cg", "cg-uid", corev1.EventTypeWarning, "Over", "over")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Event held its caller %s", d)
	}
	start = time.Now()
	err = k.Evict(context.Background(), "ns", "cg", "cg-uid")
	if err == nil {
		t.Error("Evict on a hung API server succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Evict held its caller %s", d)
	}
	// The Event's write is bounded too.
	sink := &eventSink{events: restEvents{core}, timeout: 100 * time.Millisecond}
	start = time.Now()
	if _, err := sink.Create(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "e"}}); err == nil {
		t.Error("Event write to a hung API server succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Event write took %s", d)
	}
}

// An API server that is starting answers 503 for a few seconds: the recorder must retry
// those Events (it gives up on any *StatusError), and still give up on a rejection.
func TestEventsRefusedByAStartingAPIServerAreRetried(t *testing.T) {
	cs := fake.NewClientset()
	answer := apierrors.NewServiceUnavailable("apiserver not ready")
	cs.PrependReactor("create", "events", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, answer
	})
	sink := &eventSink{events: cs.CoreV1().Events("ns"), timeout: time.Second}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "ns"}}

	_, err := sink.Create(ev)
	var status *apierrors.StatusError
	if err == nil || !errors.Is(err, errTransient) || reflect.TypeOf(err) == reflect.TypeOf(status) {
		t.Errorf("503: %T %v, want an error the recorder retries", err, err)
	}
	answer = apierrors.NewBadRequest("malformed")
	_, err = sink.Create(ev)
	if !errors.As(err, &status) || reflect.TypeOf(err) != reflect.TypeOf(status) {
		t.Errorf("400: %T %v, want the *StatusError the recorder gives up on", err, err)
	}
	// A namespace being deleted refuses for good, and the recorder's retries of it would
	// hold up every Event after it: it is final, unlike another 403.
	terminating := apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "e", errors.New("namespace ns is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Message: "namespace ns is being terminated"}}
	answer = terminating
	_, err = sink.Create(ev)
	if !errors.As(err, &status) || reflect.TypeOf(err) != reflect.TypeOf(status) {
		t.Errorf("403 of a namespace being deleted: %T %v, want the *StatusError the recorder gives up on", err, err)
	}
	answer = apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "e", errors.New("RBAC not synced"))
	if _, err = sink.Create(ev); !errors.Is(err, errTransient) {
		t.Errorf("another 403: %T %v, want an error the recorder retries", err, err)
	}
}

// typedEvictions posts Evictions with client-go's typed (fake) client.
type typedEvictions struct {
	policy policyv1client.PolicyV1Interface
}

func (e typedEvictions) Evict(ctx context.Context, namespace string, ev *policyv1.Eviction) error {
	return e.policy.Evictions(namespace).Evict(ctx, ev)
}
