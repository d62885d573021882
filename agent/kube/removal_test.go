// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/neureality-sdk/nr1-agent/internal/clocktest"
)

// removalRig is an agent pod of the DaemonSet nr1-system/nr1-agent on a fake API server,
// followed by a Removal on a fake clock. Each watch of the DaemonSet is the test's: it
// sends the events.
type removalRig struct {
	cs      *fake.Clientset
	r       *Removal
	clk     *clocktest.Clock
	watches chan *testWatch
	ctx     context.Context
}

func newRemovalRig(t *testing.T, controlled bool) *removalRig {
	t.Helper()
	agentPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "nr1-system", Name: "nr1-agent-x7k2p", UID: "pod-uid"}}
	if controlled {
		yes := true
		agentPod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "nr1-agent", UID: "ds-uid", Controller: &yes}}
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "nr1-system", Name: "nr1-agent", UID: "ds-uid", Generation: 1}}
	rig := &removalRig{cs: fake.NewClientset(agentPod, ds), clk: clocktest.New(time.Unix(1000, 0)), watches: make(chan *testWatch, 8)}
	rig.cs.PrependWatchReactor("daemonsets", func(clienttesting.Action) (bool, watch.Interface, error) {
		w := &testWatch{result: make(chan watch.Event), stopped: make(chan struct{})}
		rig.watches <- w
		return true, w, nil
	})
	rig.r = newRemoval(typedPods(rig.cs), rig.cs.AppsV1().DaemonSets("nr1-system"), "nr1-system", "nr1-agent-x7k2p", quiet())
	rig.r.clock = rig.clk
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rig.ctx = ctx
	return rig
}

// run runs the Removal; the channel is closed when Run returns.
func (rig *removalRig) run(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() { rig.r.Run(ctx); close(done) }()
	return done
}

// testWatch is a watch whose events the test sends, one at a time: a send returns once
// the Removal has taken the event, so a second send returns only after it has dealt
// with the first and gone on watching.
type testWatch struct {
	result  chan watch.Event
	stopped chan struct{}
	once    sync.Once
}

func (w *testWatch) ResultChan() <-chan watch.Event { return w.result }

func (w *testWatch) Stop() { w.once.Do(func() { close(w.stopped) }) }

func (w *testWatch) send(t *testing.T, typ watch.EventType, obj runtime.Object) {
	t.Helper()
	select {
	case w.result <- watch.Event{Type: typ, Object: obj}:
	case <-w.stopped:
		t.Fatalf("the watch ended before taking the %s event", typ)
	case <-time.After(5 * time.Second):
		t.Fatalf("the %s event is never taken", typ)
	}
}

// end ends the watch as the API server does at its timeout.
func (w *testWatch) end() { close(w.result) }

// watching waits until the DaemonSet is watched, and returns the watch.
func (rig *removalRig) watching(t *testing.T) *testWatch {
	t.Helper()
	select {
	case w := <-rig.watches:
		return w
	case <-time.After(5 * time.Second):
		t.Fatal("the DaemonSet is never watched")
		return nil
	}
}

// update changes the DaemonSet as f says, and returns it changed.
func (rig *removalRig) update(t *testing.T, f func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	t.Helper()
	dss := rig.cs.AppsV1().DaemonSets("nr1-system")
	ds, err := dss.Get(context.Background(), "nr1-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f(ds)
	ds, err = dss.Update(context.Background(), ds, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// delete deletes the DaemonSet, and returns it as it was.
func (rig *removalRig) delete(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	dss := rig.cs.AppsV1().DaemonSets("nr1-system")
	ds, err := dss.Get(context.Background(), "nr1-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := dss.Delete(context.Background(), "nr1-agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	return ds
}

func (rig *removalRig) removed(t *testing.T) (bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rig.r.Removed(ctx)
}

// seen waits until Run returns, which it does once the watch has seen the DaemonSet
// deleted, and checks that it has.
func (rig *removalRig) seen(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run goes on after the DaemonSet is deleted")
	}
	rig.r.mu.Lock()
	defer rig.r.mu.Unlock()
	if !rig.r.removed {
		t.Fatal("Run returned, and the watch never saw the DaemonSet deleted")
	}
}

func TestRemovalSeenByTheWatchOutlivesTheAgentsCredentials(t *testing.T) {
	rig := newRemovalRig(t, true)
	done := rig.run(rig.ctx)
	w := rig.watching(t)
	w.send(t, watch.Deleted, rig.delete(t))
	rig.seen(t, done)
	// The uninstall goes on to delete the agent's ServiceAccount: nothing can be asked.
	rig.cs.PrependReactor("*", "*", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewUnauthorized("service account deleted")
	})
	if removed, err := rig.removed(t); !removed || err != nil {
		t.Errorf("Removed after the DaemonSet was deleted: %v %v, want true", removed, err)
	}
}

func TestRolloutIsNoRemoval(t *testing.T) {
	rig := newRemovalRig(t, true)
	done := rig.run(rig.ctx)
	w := rig.watching(t)
	ds := rig.update(t, func(ds *appsv1.DaemonSet) { ds.Generation = 2 }) // a new pod template
	w.send(t, watch.Modified, ds)
	// Taken only once the rollout's event is dealt with, and only by a watch going on.
	w.send(t, watch.Bookmark, ds)
	select {
	case <-done:
		t.Fatal("Run ended after a rollout")
	default:
	}
	if removed, err := rig.removed(t); removed || err != nil {
		t.Errorf("Removed after a rollout: %v %v, want false", removed, err)
	}
}

// Deleted with --cascade=foreground, the DaemonSet stays until its pods are gone.
func TestDaemonSetBeingDeletedIsRemoval(t *testing.T) {
	rig := newRemovalRig(t, true)
	done := rig.run(rig.ctx)
	w := rig.watching(t)
	w.send(t, watch.Modified, rig.update(t, func(ds *appsv1.DaemonSet) { now := metav1.Now(); ds.DeletionTimestamp = &now }))
	rig.seen(t, done)
}

// When the watch missed the deletion, Removed asks the API server.
func TestRemovedAsksWhenTheWatchSawNothing(t *testing.T) {
	rig := newRemovalRig(t, true)
	ctx, cancel := context.WithCancel(rig.ctx)
	done := rig.run(ctx)
	rig.watching(t)
	cancel() // the agent is stopping
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run goes on after the agent stopped")
	}
	if removed, err := rig.removed(t); removed || err != nil {
		t.Errorf("Removed with the DaemonSet in place: %v %v, want false", removed, err)
	}
	rig.delete(t)
	if removed, err := rig.removed(t); !removed || err != nil {
		t.Errorf("Removed with the DaemonSet gone: %v %v, want true", removed, err)
	}
}

func TestNotADaemonSetPod(t *testing.T) {
	rig := newRemovalRig(t, false)
	done := rig.run(rig.ctx)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run goes on for a pod no DaemonSet runs")
	}
	if removed, err := rig.removed(t); removed || err == nil || !strings.Contains(err.Error(), "never found") {
		t.Errorf("Removed: %v %v, want false and an error", removed, err)
	}
}

// failing makes the next n requests to verb resource fail as a starting API server's do.
func (rig *removalRig) failing(verb, resource string, n int32) {
	var calls atomic.Int32
	rig.cs.PrependReactor(verb, resource, func(clienttesting.Action) (bool, runtime.Object, error) {
		if calls.Add(1) > n {
			return false, nil, nil
		}
		return true, nil, apierrors.NewServiceUnavailable("the API server is starting")
	})
}

// TestFailuresAreRetriedWithBackoff: the wait after each failure doubles up to 30 s; a
// watch that ran its course starts the waits afresh.
func TestFailuresAreRetriedWithBackoff(t *testing.T) {
	rig := newRemovalRig(t, true)
	rig.failing("get", "pods", 7)
	rig.run(rig.ctx)
	var waits []time.Duration
	for range 7 {
		d := rig.clk.Next(t, clocktest.After, 5*time.Second)
		waits = append(waits, d)
		rig.clk.Step(d)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	if !slices.Equal(waits, want) {
		t.Fatalf("waits after the failures %v, want %v", waits, want)
	}
	w := rig.watching(t)

	rig.failing("get", "daemonsets", 1)
	w.end()
	if d := rig.clk.Next(t, clocktest.After, 5*time.Second); d != time.Second {
		t.Fatalf("after a watch that ran its course the wait is %v, want 1s", d)
	} else {
		rig.clk.Step(d)
	}
	rig.watching(t)
}

// The REST clients the agent uses, against an HTTP server answering as the API server
// does: the agent's pod, its DaemonSet, and a watch that sees it deleted.
func TestRemovalOverREST(t *testing.T) {
	const ds = `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"namespace":"nr1-system","name":"nr1-agent","uid":"ds-uid","resourceVersion":"7"}}`
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/namespaces/nr1-system/pods/nr1-agent-x7k2p", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"nr1-system","name":"nr1-agent-x7k2p","uid":"pod-uid",`+
			`"ownerReferences":[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"nr1-agent","uid":"ds-uid","controller":true}]}}`)
	})
	deleted, watching := make(chan struct{}), make(chan struct{})
	watched := sync.OnceFunc(func() { close(watching) })
	mux.HandleFunc("GET /apis/apps/v1/namespaces/nr1-system/daemonsets/nr1-agent", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		select {
		case <-deleted:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"NotFound","code":404}`)
		default:
			fmt.Fprint(w, ds)
		}
	})
	mux.HandleFunc("GET /apis/apps/v1/namespaces/nr1-system/daemonsets", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("watch") != "true" || q.Get("fieldSelector") != "metadata.name=nr1-agent" || q.Get("resourceVersion") != "7" {
			http.Error(w, "unexpected query "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		watched()
		<-deleted
		fmt.Fprintf(w, `{"type":"DELETED","object":%s}`+"\n", ds)
		w.(http.Flusher).Flush()
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\ncurrent-context: c\n", srv.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	api, err := Connect(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	r := api.Removal("nr1-system", "nr1-agent-x7k2p", quiet())
	done := make(chan struct{})
	go func() { r.Run(context.Background()); close(done) }()
	select {
	case <-watching: // the DaemonSet was found first
	case <-time.After(5 * time.Second):
		t.Fatal("the DaemonSet is never watched")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if removed, err := r.Removed(ctx); removed || err != nil {
		t.Fatalf("Removed before the deletion: %v %v", removed, err)
	}
	close(deleted)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the watch never saw the deletion")
	}
	if removed, err := r.Removed(ctx); !removed || err != nil {
		t.Errorf("Removed after the deletion: %v %v", removed, err)
	}
}
