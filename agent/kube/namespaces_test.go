// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

const maxLabelAge = 30 * time.Second

var start = time.Unix(1_000_000, 0)

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// namespacesRig follows the namespaces of a fake API server: team-a labelled exempt
// (and with a label of someone else's), team-b unlabelled.
type namespacesRig struct {
	cs    *fake.Clientset
	clock *clocktesting.FakeClock
	n     *Namespaces
}

func newNamespacesRig(t *testing.T) *namespacesRig {
	t.Helper()
	rig := &namespacesRig{
		cs:    fake.NewClientset(namespace("team-a", map[string]string{"nr1.neureality.ai/enforcement": "disabled", "team": "a"}), namespace("team-b", nil)),
		clock: clocktesting.NewFakeClock(start),
	}
	rig.n = newNamespaces(rig.cs.CoreV1().Namespaces(), maxLabelAge, rig.clock, quiet())
	return rig
}

// run runs the watch until the test ends.
func (rig *namespacesRig) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() { rig.n.Run(ctx); close(done) }()
}

// streams answers every watch with a new fake stream, which the test drives.
type streams struct {
	mu     sync.Mutex
	opened []*watch.FakeWatcher
	err    error // when set, watches are refused with it
}

func (s *streams) react(clienttesting.Action) (bool, watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return true, nil, s.err
	}
	w := watch.NewFake()
	s.opened = append(s.opened, w)
	return true, w, nil
}

// last returns the stream opened last, once n have been.
func (s *streams) last(t *testing.T, n int) *watch.FakeWatcher {
	t.Helper()
	var w *watch.FakeWatcher
	until(t, "watched", func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.opened) < n {
			return errors.New("not yet")
		}
		w = s.opened[len(s.opened)-1]
		return nil
	})
	return w
}

func (s *streams) refuse(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// until polls cond for 5 s.
func until(t *testing.T, what string, cond func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if err = cond(); err == nil {
			return
		}
	}
	t.Fatalf("%s: %v", what, err)
}

// watched waits until the namespaces have been watched n times.
func (rig *namespacesRig) watched(t *testing.T, n int) {
	t.Helper()
	until(t, "namespaces watched", func() error {
		got := 0
		for _, a := range rig.cs.Actions() {
			if a.GetVerb() == "watch" && a.GetResource().Resource == "namespaces" {
				got++
			}
		}
		if got < n {
			return errors.New("not yet")
		}
		return nil
	})
}

func (rig *namespacesRig) labels(name string) (map[string]string, error) {
	return rig.n.Labels(name, rig.clock.Now())
}

func TestNamespaceLabelsFollowTheAPIServer(t *testing.T) {
	cs := fake.NewClientset()
	n := newNamespaces(cs.CoreV1().Namespaces(), maxLabelAge, clocktesting.NewFakeClock(start), quiet())
	if _, err := n.Labels("team-a", start); !errors.Is(err, errNotListed) {
		t.Fatalf("before the list: %v, want %v", err, errNotListed)
	}

	rig := newNamespacesRig(t)
	rig.run(t)
	rig.watched(t, 1)
	if l, err := rig.labels("team-a"); err != nil || len(l) != 1 || l["nr1.neureality.ai/enforcement"] != "disabled" {
		t.Errorf("team-a: %v %v, want only the agent's label", l, err)
	}
	if l, err := rig.labels("team-b"); err != nil || l != nil {
		t.Errorf("team-b: %v %v, want known and unlabelled", l, err)
	}
	if _, err := rig.labels("team-c"); err == nil || !strings.Contains(err.Error(), "team-c not seen yet") {
		t.Errorf("a namespace not seen: %v, want it unknown", err)
	}
	if last, err := rig.n.Health(); err != nil || !last.Equal(start) {
		t.Errorf("health %v %v, want current", last, err)
	}

	nss := rig.cs.CoreV1().Namespaces()
	ctx := context.Background()
	if _, err := nss.Create(ctx, namespace("team-c", map[string]string{"nr1.neureality.ai/allow-pod-exemption": "true"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nss.Update(ctx, namespace("team-a", map[string]string{"team": "a"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := nss.Delete(ctx, "team-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, "the changes followed", func() error {
		if l, err := rig.labels("team-c"); err != nil || l["nr1.neureality.ai/allow-pod-exemption"] != "true" {
			return errors.New("team-c created, not seen")
		}
		if l, err := rig.labels("team-a"); err != nil || l != nil {
			return errors.New("team-a unlabelled, still labelled")
		}
		if _, err := rig.labels("team-b"); err == nil {
			return errors.New("team-b deleted, still known")
		}
		return nil
	})
}

// While the watch fails, the labels last seen stand for maxAge, then are unknown; they
// are current again as soon as the watch is back.
func TestNamespaceLabelsAgeIntoUnknownWhileTheWatchFails(t *testing.T) {
	rig := newNamespacesRig(t)
	var s streams
	rig.cs.PrependWatchReactor("namespaces", s.react)
	rig.run(t)
	first := s.last(t, 1)

	refused := apierrors.NewServiceUnavailable("connection refused")
	s.refuse(refused)
	first.Stop() // the API server goes away
	until(t, "the failure noticed", func() error {
		if _, err := rig.n.Health(); err == nil {
			return errors.New("still healthy")
		}
		return nil
	})
	if l, err := rig.n.Labels("team-a", start.Add(maxLabelAge)); err != nil || l == nil {
		t.Errorf("within maxAge of the failure: %v %v, want the labels last seen", l, err)
	}
	_, err := rig.n.Labels("team-a", start.Add(maxLabelAge+time.Second))
	if err == nil || !strings.Contains(err.Error(), "limit 30s") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("past maxAge: %v, want unknown, with the limit and the failure", err)
	}
	if last, err := rig.n.Health(); !last.Equal(start) || err == nil {
		t.Errorf("health %v %v, want current until the failure, and the failure", last, err)
	}

	s.refuse(nil)
	// Health, not Labels: the labels last seen still read within maxAge of the failure,
	// before the watch has resumed, and a step taken before the retry starts to wait
	// would be lost to it; the clock steps until the watch is back.
	until(t, "the labels current again", func() error {
		rig.clock.Step(maxNamespaceRetry) // past the backoff
		_, err := rig.n.Health()
		return err
	})
	s.last(t, 2).Modify(namespace("team-a", map[string]string{"nr1.neureality.ai/allow-pod-exemption": "true"}))
	until(t, "a change after the watch resumed", func() error {
		l, err := rig.labels("team-a")
		if err == nil && l["nr1.neureality.ai/allow-pod-exemption"] != "true" {
			err = fmt.Errorf("labels %v", l)
		}
		return err
	})
	lists := 0
	for _, a := range rig.cs.Actions() {
		if a.GetVerb() == "list" {
			lists++
		}
	}
	if lists != 1 {
		t.Errorf("listed %d times, want the watch resumed without a new list", lists)
	}
}

// A watch too old to resume is no failure: the namespaces are listed again at once.
func TestExpiredWatchListsAgain(t *testing.T) {
	rig := newNamespacesRig(t)
	var s streams
	rig.cs.PrependWatchReactor("namespaces", s.react)
	rig.run(t)
	s.last(t, 1).Error(&apierrors.NewResourceExpired("too old resource version").ErrStatus)
	s.last(t, 2)
	lists := 0
	for _, a := range rig.cs.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "namespaces" {
			lists++
		}
	}
	if lists != 2 {
		t.Errorf("listed %d times, want again after the expired watch", lists)
	}
	if _, err := rig.n.Health(); err != nil {
		t.Errorf("health %v, want no failure", err)
	}
}

func TestNamespacesNeverListedAreUnknown(t *testing.T) {
	cs := fake.NewClientset(namespace("team-a", nil))
	cs.PrependReactor("list", "namespaces", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("namespaces"), "", errors.New("RBAC: no list"))
	})
	n := newNamespaces(cs.CoreV1().Namespaces(), maxLabelAge, clocktesting.NewFakeClock(start), quiet())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	until(t, "the failure noticed", func() error {
		_, err := n.Labels("team-a", start)
		if err == nil || !strings.Contains(err.Error(), "forbidden") {
			return errors.New("no failure yet")
		}
		return nil
	})
	if _, err := n.Labels("team-a", start); !errors.Is(err, errNotListed) {
		t.Errorf("%v, want %v", err, errNotListed)
	}
	if last, err := n.Health(); !last.IsZero() || err == nil {
		t.Errorf("health %v %v, want no success and the failure", last, err)
	}
}
