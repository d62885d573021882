// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// request is what the API server received.
type request struct {
	method, path, query, contentType string
	body                             map[string]any
}

// apiServer answers every request with an object of the kind asked for and records it.
func apiServer(t *testing.T) (*rest.Config, func() []request) {
	t.Helper()
	var mu sync.Mutex
	var got []request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		mu.Lock()
		got = append(got, request{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), body})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/resourceslices") && r.Method == http.MethodGet:
			_, _ = io.WriteString(w, `{"kind":"ResourceSliceList","apiVersion":"resource.k8s.io/v1","items":[{"metadata":{"name":"s1"},"spec":{"driver":"d","pool":{"name":"n","generation":3,"resourceSliceCount":1}}}]}`)
		case strings.Contains(r.URL.Path, "/resourceclaims/"):
			_, _ = io.WriteString(w, `{"kind":"ResourceClaim","apiVersion":"resource.k8s.io/v1","metadata":{"name":"c","namespace":"ml","uid":"claim-uid"}}`)
		case strings.Contains(r.URL.Path, "/nodes/"):
			_, _ = io.WriteString(w, `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n","uid":"node-uid"}}`)
		default:
			_, _ = w.Write(b)
		}
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}, func() []request {
		mu.Lock()
		defer mu.Unlock()
		return append([]request(nil), got...)
	}
}

// The agent's own REST calls reach the API server's paths with the objects' kinds, as
// client-go's typed clients would.
func TestRESTCalls(t *testing.T) {
	cfg, got := apiServer(t)
	core, err := restClient(cfg, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	policy, err := restClient(cfg, policyv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	res, err := restClient(cfg, resourceapi.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "e"}, Reason: "NR1Killed"}
	if _, err := (restEvents{core}).CreateWithEventNamespaceWithContext(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if _, err := (restEvents{core}).PatchWithEventNamespaceWithContext(ctx, ev, []byte(`{"count":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := (restEvictions{policy}).Evict(ctx, "ns", &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cg"}}); err != nil {
		t.Fatal(err)
	}
	r := &Resources{core: core, resource: res}
	if c, err := r.Claim(ctx, "ml", "c"); err != nil || c.UID != "claim-uid" {
		t.Fatalf("claim %+v %v", c, err)
	}
	if uid, err := r.NodeUID(ctx, "n"); err != nil || uid != "node-uid" {
		t.Fatalf("node UID %q %v", uid, err)
	}
	slices, err := r.Slices(ctx, "n", "nr1.neureality.ai")
	if err != nil || len(slices) != 1 || slices[0].Spec.Pool.Generation != 3 {
		t.Fatalf("slices %+v %v", slices, err)
	}
	if _, err := r.CreateSlice(ctx, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: "n-"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.UpdateSlice(ctx, &slices[0]); err != nil {
		t.Fatal(err)
	}
	if err := r.NodeEvent(ctx, "n", corev1.EventTypeWarning, "NR1ResourceSliceFieldsDropped", "enable it"); err != nil {
		t.Fatal(err)
	}
	want := []request{
		{method: "POST", path: "/api/v1/namespaces/ns/events", body: map[string]any{"kind": "Event", "apiVersion": "v1"}},
		{method: "PATCH", path: "/api/v1/namespaces/ns/events/e", contentType: "application/strategic-merge-patch+json"},
		{method: "POST", path: "/api/v1/namespaces/ns/pods/cg/eviction", body: map[string]any{"kind": "Eviction", "apiVersion": "policy/v1"}},
		{method: "GET", path: "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/c"},
		{method: "GET", path: "/api/v1/nodes/n"},
		{method: "GET", path: "/apis/resource.k8s.io/v1/resourceslices", query: "fieldSelector=" + url.QueryEscape("spec.driver=nr1.neureality.ai,spec.nodeName=n")},
		{method: "POST", path: "/apis/resource.k8s.io/v1/resourceslices", body: map[string]any{"kind": "ResourceSlice", "apiVersion": "resource.k8s.io/v1"}},
		{method: "PUT", path: "/apis/resource.k8s.io/v1/resourceslices/s1", body: map[string]any{"kind": "ResourceSlice"}},
		{method: "POST", path: "/api/v1/namespaces/default/events", body: map[string]any{"kind": "Event", "type": "Warning", "reason": "NR1ResourceSliceFieldsDropped", "message": "enable it"}},
	}
	have := got()
	if len(have) != len(want) {
		t.Fatalf("%d requests, want %d: %+v", len(have), len(want), have)
	}
	for i, w := range want {
		h := have[i]
		if h.method != w.method || h.path != w.path || w.query != "" && h.query != w.query || w.contentType != "" && h.contentType != w.contentType {
			t.Errorf("request %d: %s %s?%s (%s), want %s %s?%s", i, h.method, h.path, h.query, h.contentType, w.method, w.path, w.query)
		}
		for k, v := range w.body {
			if h.body[k] != v {
				t.Errorf("request %d (%s %s): body %s = %v, want %v", i, h.method, h.path, k, h.body[k], v)
			}
		}
	}
	if obj, _ := have[len(have)-1].body["involvedObject"].(map[string]any); obj["kind"] != "Node" || obj["name"] != "n" || obj["uid"] != "n" {
		t.Errorf("the node's Event is on %v", obj)
	}
}
