package kube

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
)

// removalRig is an agent pod of the DaemonSet nr1-system/nr1-agent on a fake API server.
type removalRig struct {
	cs  *fake.Clientset
	r   *Removal
	ctx context.Context
}

func newRemovalRig(t *testing.T, controlled bool) *removalRig {
	t.Helper()
	agentPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "nr1-system", Name: "nr1-agent-x7k2p", UID: "pod-uid"}}
	if controlled {
		yes := true
		agentPod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "nr1-agent", UID: "ds-uid", Controller: &yes}}
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "nr1-system", Name: "nr1-agent", UID: "ds-uid", Generation: 1}}
	rig := &removalRig{cs: fake.NewClientset(agentPod, ds)}
	rig.r = newRemoval(typedPods(rig.cs), rig.cs.AppsV1().DaemonSets("nr1-system"), "nr1-system", "nr1-agent-x7k2p", quiet())
	rig.r.retry = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rig.ctx = ctx
	return rig
}

// watching waits until the DaemonSet is being watched.
func (rig *removalRig) watching(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, a := range rig.cs.Actions() {
			if a.GetVerb() == "watch" && a.GetResource().Resource == "daemonsets" {
				return
			}
		}
	}
	t.Fatal("the DaemonSet is never watched")
}

// update changes the DaemonSet as f says.
func (rig *removalRig) update(t *testing.T, f func(*appsv1.DaemonSet)) {
	t.Helper()
	dss := rig.cs.AppsV1().DaemonSets("nr1-system")
	ds, err := dss.Get(context.Background(), "nr1-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f(ds)
	if _, err := dss.Update(context.Background(), ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (rig *removalRig) delete(t *testing.T) {
	t.Helper()
	if err := rig.cs.AppsV1().DaemonSets("nr1-system").Delete(context.Background(), "nr1-agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (rig *removalRig) removed(t *testing.T) (bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rig.r.Removed(ctx)
}

// seen waits until the watch has seen the DaemonSet deleted.
func (rig *removalRig) seen(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		rig.r.mu.Lock()
		removed := rig.r.removed
		rig.r.mu.Unlock()
		if removed {
			return
		}
	}
	t.Fatal("the watch never saw the DaemonSet deleted")
}

func TestRemovalSeenByTheWatchOutlivesTheAgentsCredentials(t *testing.T) {
	rig := newRemovalRig(t, true)
	done := make(chan struct{})
	go func() { rig.r.Run(rig.ctx); close(done) }()
	rig.watching(t)
	rig.delete(t)
	rig.seen(t)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run goes on after the DaemonSet is deleted")
	}
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
	go rig.r.Run(rig.ctx)
	rig.watching(t)
	rig.update(t, func(ds *appsv1.DaemonSet) { ds.Generation = 2 }) // a new pod template
	time.Sleep(50 * time.Millisecond)
	if removed, err := rig.removed(t); removed || err != nil {
		t.Errorf("Removed after a rollout: %v %v, want false", removed, err)
	}
}

// Deleted with --cascade=foreground, the DaemonSet stays until its pods are gone.
func TestDaemonSetBeingDeletedIsRemoval(t *testing.T) {
	rig := newRemovalRig(t, true)
	go rig.r.Run(rig.ctx)
	rig.watching(t)
	rig.update(t, func(ds *appsv1.DaemonSet) { now := metav1.Now(); ds.DeletionTimestamp = &now })
	rig.seen(t)
}

// When the watch missed the deletion, Removed asks the API server.
func TestRemovedAsksWhenTheWatchSawNothing(t *testing.T) {
	rig := newRemovalRig(t, true)
	ctx, cancel := context.WithCancel(rig.ctx)
	go rig.r.Run(ctx)
	rig.watching(t)
	cancel() // the agent is stopping
	time.Sleep(20 * time.Millisecond)
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
	done := make(chan struct{})
	go func() { rig.r.Run(rig.ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run goes on for a pod no DaemonSet runs")
	}
	if removed, err := rig.removed(t); removed || err == nil || !strings.Contains(err.Error(), "never found") {
		t.Errorf("Removed: %v %v, want false and an error", removed, err)
	}
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
	deleted := make(chan struct{})
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
		<-deleted
		fmt.Fprintf(w, `{"type":"DELETED","object":%s}`+"\n", ds)
		w.(http.Flusher).Flush()
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL}
	core, err := typedcorev1.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dss, err := newDaemonSets(cfg, "nr1-system")
	if err != nil {
		t.Fatal(err)
	}
	r := newRemoval(restPods(core.RESTClient()), dss, "nr1-system", "nr1-agent-x7k2p", quiet())
	done := make(chan struct{})
	go func() { r.Run(context.Background()); close(done) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r.mu.Lock()
		owner := r.owner
		r.mu.Unlock()
		if owner != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the DaemonSet is never found")
		}
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
