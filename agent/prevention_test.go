// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"testing"

	"github.com/neureality-sdk/nr1-agent/agent/observe/allocation"
	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

type sandboxes []*runtime.Pod

func (s *sandboxes) ReadyPods(context.Context) ([]*runtime.Pod, error) { return *s, nil }

// kubeletPods answers Get as the kubelet does, and counts the questions.
type kubeletPods struct {
	listed map[allocation.PodKey]map[string]allocation.Listed
	asked  map[allocation.PodKey]int
}

func (k *kubeletPods) Get(_ context.Context, pod allocation.PodKey) (map[string]allocation.Listed, error) {
	k.asked[pod]++
	l, ok := k.listed[pod]
	if !ok {
		return nil, errors.New("pod not found")
	}
	return l, nil
}

type knownUIDs map[string]bool

func (k knownUIDs) Knows(uid string) bool { return k[uid] }

// Before a container given queues is made, every ready pod the gate does not know and
// the kubelet lists with an NR1 allocation is booked with its queues summed over its
// containers; a known pod is not asked about, a pod listed with nothing is asked once
// while it runs, and a pod the kubelet cannot answer for is asked again next time.
func TestStartBookerBooksThePodsTheGateDoesNotKnow(t *testing.T) {
	key := func(name string) allocation.PodKey { return allocation.PodKey{Namespace: "ml", Name: name} }
	pods := sandboxes{
		{UID: "cg", Namespace: "ml", Name: "cg", Ready: true},
		{UID: "known", Namespace: "ml", Name: "known", Ready: true},
		{UID: "web", Namespace: "ml", Name: "web", Ready: true},
		{UID: "racing", Namespace: "ml", Name: "racing", Ready: true},
	}
	kubelet := &kubeletPods{asked: map[allocation.PodKey]int{}, listed: map[allocation.PodKey]map[string]allocation.Listed{
		key("cg"): {
			"health-handler": {Units: nr1.Amounts{3, 0, 2392, 7}},
			"sidecar":        {Units: nr1.Amounts{0, 0, 0, 2}},
		},
		key("known"): {"health-handler": {Units: nr1.Amounts{0, 0, 0, 1}}},
		key("web"):   {"nginx": {}},
	}}
	booked := map[string]nr1.Units{}
	known := knownUIDs{"known": true}
	b := &startBooker{keeper: known, pods: &pods, alloc: kubelet, none: map[string]bool{}, log: slog.New(slog.DiscardHandler),
		book: func(uid string, queues nr1.Units) { booked[uid] = queues; known[uid] = true }}

	b.run(context.Background())
	if want := map[string]nr1.Units{"cg": 9}; !maps.Equal(booked, want) {
		t.Fatalf("booked %v, want %v", booked, want)
	}
	b.run(context.Background())
	want := map[allocation.PodKey]int{key("cg"): 1, key("web"): 1, key("racing"): 2}
	if !maps.Equal(kubelet.asked, want) {
		t.Errorf("asked %v, want %v", kubelet.asked, want)
	}
	// The pod listed with nothing ends; one of its name, listed with queues, replaces it.
	pods[2] = &runtime.Pod{UID: "web-2", Namespace: "ml", Name: "web", Ready: true}
	kubelet.listed[key("web")] = map[string]allocation.Listed{"nginx": {Units: nr1.Amounts{0, 0, 0, 4}}}
	b.run(context.Background())
	if booked["web-2"] != 4 || b.none["web"] {
		t.Errorf("the new pod booked %d (want 4); the ended one still remembered: %v", booked["web-2"], b.none["web"])
	}
}

// initPods answers InitLimit as the API server's pods say, and counts the questions.
type initPods struct {
	limits map[string]int64 // pod UID → its largest run-to-completion init container's queues
	down   bool
	asked  int
}

func (p *initPods) InitLimit(_ context.Context, _, _, uid, resource string) (int64, error) {
	p.asked++
	if resource != nr1.HypervisorQueue.Name() {
		return 0, errors.New("asked about " + resource)
	}
	if p.down {
		return 0, errors.New("API server unreachable")
	}
	return p.limits[uid], nil
}

// A pod is booked with what Kubernetes books for it, its largest init container's
// queues when more than its listed containers' sum: such an init container starts first
// and the kubelet does not list it. A pod listed with nothing whose init containers are
// unread is asked about again, not remembered as booking nothing.
func TestStartBookerBooksTheLargestInitContainer(t *testing.T) {
	key := func(name string) allocation.PodKey { return allocation.PodKey{Namespace: "ml", Name: name} }
	pods := sandboxes{
		{UID: "staged", Namespace: "ml", Name: "staged", Ready: true},
		{UID: "init-only", Namespace: "ml", Name: "init-only", Ready: true},
		{UID: "small-init", Namespace: "ml", Name: "small-init", Ready: true},
	}
	kubelet := &kubeletPods{asked: map[allocation.PodKey]int{}, listed: map[allocation.PodKey]map[string]allocation.Listed{
		key("staged"):     {"health-handler": {Units: nr1.Amounts{3, 0, 2392, 1}}},
		key("init-only"):  {"web": {}},
		key("small-init"): {"health-handler": {Units: nr1.Amounts{0, 0, 0, 5}}},
		key("unread"):     {"web": {}},
	}}
	api := &initPods{limits: map[string]int64{"staged": 4, "init-only": 3, "small-init": 2}}
	booked := map[string]nr1.Units{}
	known := knownUIDs{}
	b := &startBooker{keeper: known, pods: &pods, alloc: kubelet, inits: api, none: map[string]bool{}, log: slog.New(slog.DiscardHandler),
		book: func(uid string, queues nr1.Units) { booked[uid] = queues; known[uid] = true }}

	b.run(context.Background())
	if want := map[string]nr1.Units{"staged": 4, "init-only": 3, "small-init": 5}; !maps.Equal(booked, want) {
		t.Fatalf("booked %v, want %v", booked, want)
	}

	pods = append(pods, &runtime.Pod{UID: "unread", Namespace: "ml", Name: "unread", Ready: true})
	api.down = true
	b.run(context.Background())
	if b.none["unread"] {
		t.Fatal("a pod whose init containers were unread is remembered as booking nothing")
	}
	api.down = false
	api.limits["unread"] = 2
	b.run(context.Background())
	if booked["unread"] != 2 {
		t.Errorf("the pod unread before booked %d once read, want 2", booked["unread"])
	}
}
