// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// podResourcesCalls reads the kubelet's own counts of the pod-resources List and Get
// calls it served, from its /metrics, with the admin's client certificate (the local
// API server does not proxy to the node's documentation-range address).
func podResourcesCalls(t *testing.T, c kubernetes.Interface) (lists, gets float64) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	node, err := c.CoreV1().Nodes().Get(context.Background(), nodeName(t, c), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var addr string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			addr = a.Address
		}
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	resp, err := hc.Get(fmt.Sprintf("https://%s:%d/metrics", addr, node.Status.DaemonEndpoints.KubeletEndpoint.Port))
	if err != nil {
		t.Fatalf("the kubelet's metrics: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the kubelet's metrics: %s %v", resp.Status, err)
	}
	found := map[string]bool{}
	for line := range strings.Lines(string(raw)) {
		name, rest, _ := strings.Cut(line, "{")
		if name != "kubelet_pod_resources_endpoint_requests_list" && name != "kubelet_pod_resources_endpoint_requests_get" {
			continue
		}
		_, value, _ := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			t.Fatalf("the kubelet's metrics: %q", line)
		}
		found[name] = true
		if strings.HasSuffix(name, "_list") {
			lists += v
		} else {
			gets += v
		}
	}
	if len(found) != 2 {
		t.Fatalf("the kubelet's metrics have no pod-resources List and Get counts (found %v)", found)
	}
	return lists, gets
}

// TestPodResourcesReadOnDemand: the agent reads the kubelet's whole pod-resources table
// only when a pod it runs is missing from it, and asks about one pod every interval
// otherwise; a new CG's allocation is known as soon as it runs, and a CG that takes the
// name of one just deleted, booking more, is never judged against the first one's
// booking.
func TestPodResourcesReadOnDemand(t *testing.T) {
	c := client(t)
	const ns = "nr1-podres-demand"
	newNamespace(t, c, ns)
	agent := mustReadyAgent(t, c)
	imageMB := nr1LoadImageMB(t)

	// At rest: about one Get a second, no List (one at most, the refresh every 30 s).
	const calm = 12 * time.Second
	l0, g0 := podResourcesCalls(t, c)
	time.Sleep(calm)
	l1, g1 := podResourcesCalls(t, c)
	t.Logf("in %v at rest: %.0f Lists, %.0f Gets", calm, l1-l0, g1-g0)
	if l1-l0 > 1 {
		t.Errorf("%.0f Lists of the whole table in %v at rest, want at most the one refresh", l1-l0, calm)
	}
	if g1-g0 < calm.Seconds()/2 {
		t.Errorf("%.0f Gets in %v: the agent does not ask the kubelet every interval", g1-g0, calm)
	}

	run := func(cg *exactCG) *corev1.Pod {
		t.Helper()
		p := cg.build(imageMB)
		p.Namespace = ns
		created, err := c.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		diagnose(t, c, created)
		var running *corev1.Pod
		eventually(t, 60*time.Second, cg.name+" runs", func() error {
			got, err := c.CoreV1().Pods(ns).Get(context.Background(), p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			running = got
			return allRunning(got)
		})
		return running
	}
	knownAs := func(pod *corev1.Pod, want nr1.Amounts) time.Time {
		t.Helper()
		var known time.Time
		eventually(t, 10*time.Second, pod.Name+"'s allocation known", func() error {
			var s debugSnapshot
			if err := debugJSON(agent, "/debug/cgs?namespace="+ns, &s); err != nil {
				return err
			}
			cg := s.CG(string(pod.UID))
			if cg == nil || !cg.AllocationKnown {
				return fmt.Errorf("not known")
			}
			if cg.Allocation != want {
				t.Fatalf("%s (UID %s) known as booking %v, want %v", pod.Name, pod.UID, cg.Allocation, want)
			}
			known = time.Now()
			return nil
		})
		return known
	}

	var x nr1.Amounts
	x[nr1.ComputeDMAMemory], x[nr1.HypervisorQueue] = 2, 3
	first := &exactCG{name: "reused", alloc: x}
	p1 := run(first)
	lBefore, _ := podResourcesCalls(t, c)
	known := knownAs(p1, first.alloc)
	started := p1.Status.ContainerStatuses[0].State.Running.StartedAt.Time
	t.Logf("%s started %s (the kubelet's second), known to the agent %s", p1.Name, clock(started), clock(known))
	// The kubelet's start time has whole seconds.
	if known.Sub(started) > 3*time.Second {
		t.Errorf("%s known %v after it started, want within the interval", p1.Name, known.Sub(started).Round(time.Millisecond))
	}

	if err := c.CoreV1().Pods(ns).Delete(context.Background(), p1.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, p1.Name+" gone", func() error {
		_, err := c.CoreV1().Pods(ns).Get(context.Background(), p1.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %w", err)
	})
	// The same name, booking and holding more: judged against the first pod's booking it
	// would be over.
	x[nr1.ComputeDMAMemory], x[nr1.HypervisorQueue] = 6, 9
	second := &exactCG{name: "reused", alloc: x}
	p2 := run(second)
	knownAs(p2, second.alloc)
	lAfter, _ := podResourcesCalls(t, c)
	if lAfter <= lBefore {
		t.Errorf("no List of the whole table after a new pod ran (%.0f before, %.0f after)", lBefore, lAfter)
	}
	time.Sleep(3 * time.Second)
	if evs := nr1Events(t, c, p2); len(evs) > 0 {
		t.Errorf("%s, holding exactly its booking, got %d NR1 Events; first: %s %s", p2.Name, len(evs), evs[0].Reason, evs[0].Message)
	}
}
