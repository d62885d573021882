// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/neureality-sdk/nr1-agent/cli/agents"
	goldenfile "github.com/neureality-sdk/nr1-agent/internal/golden"
)

// t0 is when the fixture's hog went over its queues.
var t0 = time.Unix(1764590400, 0)

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got)
}

func nodes(t *testing.T) []*agents.Node {
	t.Helper()
	f, err := os.Open("../../cli/agents/testdata/node-a.metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := agents.Parse("node-a", "nr1-system/nr1-agent-x7k2p", f)
	if err != nil {
		t.Fatal(err)
	}
	b := &agents.Node{Name: "node-b", Agent: "nr1-system/nr1-agent-9qz4m", Error: "agent pod is Pending"}
	return []*agents.Node{a, b}
}

func TestTopTables(t *testing.T) {
	for _, tc := range []struct{ name, ns, output string }{
		{"top-all.golden", "", ""},
		{"top-ml.golden", "ml", ""},
		{"top-empty.golden", "nothing-here", ""},
		{"top-all.golden.json", "", "json"},
		{"top-ml.golden.yaml", "ml", "yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := writeTop(&out, nodes(t), topOptions{namespace: tc.ns, output: tc.output}); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, out.Bytes())
		})
	}
}

// The CG most over comes first; a CG whose ratio is unknown comes last.
func TestTopSortsByRatio(t *testing.T) {
	var out bytes.Buffer
	if err := writeTop(&out, nodes(t), topOptions{}); err != nil {
		t.Fatal(err)
	}
	var order []string
	inCGs := false
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "NAMESPACE":
			inCGs = true
		case inCGs && len(f) > 1:
			order = append(order, f[1])
		}
	}
	if got := strings.Join(order, " "); got != "rogue hog resnet50 starting" {
		t.Errorf("CGs in order %q", got)
	}
}

func hogPod() *corev1.Pod {
	ended := metav1.NewTime(t0.Add(-44 * time.Second)) // the first round's kill
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "hog", UID: "u-hog"},
		Spec:       corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "graph", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{Name: "health-handler", RestartCount: 1, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 137, FinishedAt: ended}}},
		}},
	}
}

func event(at time.Duration, typ, reason, msg string) corev1.Event {
	return corev1.Event{Type: typ, Reason: reason, Message: msg, Count: 1,
		FirstTimestamp: metav1.NewTime(t0.Add(at)), LastTimestamp: metav1.NewTime(t0.Add(at))}
}

// The hog's story: warned, throttled, killed (the kubelet restarted it), over again,
// warned and throttled again; the events arrive out of order and are told in order.
func TestExplainStory(t *testing.T) {
	n := nodes(t)[0]
	evs := []corev1.Event{
		event(16*time.Second, "Warning", "NR1Killed", "container health-handler stopped: hog holds 20 of ai_hypervisor_queue, allocated 7 queue (ratio 2.86), over for 15s: kill"),
		event(0, "Warning", "NR1LimitExceeded", "hog holds 20 of ai_hypervisor_queue, allocated 7 queue (ratio 2.86), over for 0s: warn"),
		event(5*time.Second, "Warning", "NR1Throttled", "hog holds 20 of ai_hypervisor_queue, allocated 7 queue (ratio 2.86), over for 5s: throttle: new opens of NR1 devices are refused"),
		event(16*time.Second, "Normal", "NR1Throttled", "CG killed: throttle lifted"),
		{Type: "Normal", Reason: "Started", Message: "Started container health-handler", FirstTimestamp: metav1.NewTime(t0.Add(18 * time.Second))},
	}
	// The fixture's ladder: over again since t0, throttled, kill due at t0+15s; the
	// events above are of the first round, moved back a minute.
	for i := range evs {
		evs[i].FirstTimestamp = metav1.NewTime(evs[i].FirstTimestamp.Add(-time.Minute))
		evs[i].LastTimestamp = evs[i].FirstTimestamp
	}
	evs = append(evs,
		event(0, "Warning", "NR1LimitExceeded", "hog holds 20 of ai_hypervisor_queue, allocated 7 queue (ratio 2.86), over for 0s: warn"),
		event(5*time.Second, "Warning", "NR1Throttled", "hog holds 20 of ai_hypervisor_queue, allocated 7 queue (ratio 2.86), over for 5s: throttle: new opens of NR1 devices are refused"))
	var out bytes.Buffer
	s := story{pod: hogPod(), events: evs, node: n, now: t0.Add(12 * time.Second)}
	if err := s.write(&out); err != nil {
		t.Fatal(err)
	}
	golden(t, "explain-hog.golden", out.Bytes())
	got := out.String()
	for _, want := range []string{"next kill at 12:00:15 (in 3s)", "Next: kill at 12:00:15 (in 3s), for ai_hypervisor_queue", "Throttle: attached"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	var told []string
	for _, line := range strings.Split(got, "\n") {
		if f := strings.Fields(line); len(f) > 5 && strings.HasPrefix(f[5], "NR1") && strings.Count(f[0], ":") == 2 {
			told = append(told, f[0]+" "+f[3])
		}
	}
	if want := []string{"11:59:00 warn", "11:59:05 throttle", "11:59:16 kill", "11:59:16 unthrottle", "12:00:00 warn", "12:00:05 throttle"}; strings.Join(told, ",") != strings.Join(want, ",") {
		t.Errorf("events told %v, want %v", told, want)
	}
	if strings.Contains(got, "Started container") {
		t.Error("an Event not from the agent is told")
	}
}

// A CG the budget gate held to its booking: within it, its refused opens told.
func TestExplainWithin(t *testing.T) {
	p := hogPod()
	p.Name, p.Namespace, p.UID = "resnet50", "default", "u-r"
	evs := []corev1.Event{event(-30*time.Second, "Warning", "NR1OpenRefused", "the kernel refused 3 open(s) of neureality.ai/ai_hypervisor_queue: the pod holds 7 of the 7 it booked")}
	var out bytes.Buffer
	if err := (story{pod: p, node: nodes(t)[0], now: t0, events: evs}).write(&out); err != nil {
		t.Fatal(err)
	}
	golden(t, "explain-resnet50.golden", out.Bytes())
}

func TestExplainUnknown(t *testing.T) {
	for _, tc := range []struct {
		name, ns, pod string
		node          *agents.Node
		want          string
	}{
		{"allocation unknown", "ml", "starting", nodes(t)[0], "Next: nothing: the agent does not act on a CG whose allocation it does not know."},
		{"agent unread", "ml", "hog", nodes(t)[1], "Next: <unknown>: the pod's agent could not be read."},
		{"pod not sampled", "ml", "new", nodes(t)[0], "Resources: <unknown>: the agent's latest sample has no such pod yet (just started, or not running). Its spec books compute_dma_memory 3 MB, ai_hypervisor_queue 7."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := hogPod()
			p.Namespace, p.Name = tc.ns, tc.pod
			p.Spec.Containers = []corev1.Container{{Name: "health-handler", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				"neureality.ai/compute_dma_memory_in_mb": resource.MustParse("3"), "neureality.ai/ai_hypervisor_queue": resource.MustParse("7"),
			}}}}
			var out bytes.Buffer
			if err := (story{pod: p, node: tc.node, now: t0}).write(&out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("no %q in\n%s", tc.want, out.String())
			}
		})
	}
}

// The DRA example is what inject writes from the device-plugin example and the CG's
// resources.yaml: the same template, and the pod claiming it from both containers.
func TestInjectWritesTheDRAExample(t *testing.T) {
	var out, errOut bytes.Buffer
	cmd := newRoot(nil, &out, &errOut)
	cmd.SetArgs([]string{"inject", "-f", "../../nr1/testdata/resnet50-resources.yaml", "--mode", "dra", "-c", "health-handler,graph", "../../deploy/examples/device-plugin/resnet50-cg.yaml"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v: %s", err, errOut.String())
	}
	b, err := os.ReadFile("../../deploy/examples/dra/resnet50-cg.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, want := strings.Split(out.String(), "---\n"), strings.Split(string(b), "\n---\n")
	var injected, example resourceapi.ResourceClaimTemplate
	if err := sigsyaml.UnmarshalStrict([]byte(got[0]), &injected); err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.UnmarshalStrict([]byte(want[0]), &example); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(injected, example) {
		t.Errorf("the example's template differs from inject's:\n%s", got[0])
	}
	var pod, examplePod corev1.Pod
	if err := sigsyaml.UnmarshalStrict([]byte(got[1]), &pod); err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.UnmarshalStrict([]byte(want[1]), &examplePod); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(pod.Spec.ResourceClaims, examplePod.Spec.ResourceClaims) {
		t.Errorf("pod claims %+v, the example's %+v", pod.Spec.ResourceClaims, examplePod.Spec.ResourceClaims)
	}
	for i, c := range pod.Spec.Containers {
		if !equality.Semantic.DeepEqual(c.Resources, examplePod.Spec.Containers[i].Resources) {
			t.Errorf("container %s resources %+v, the example's %+v", c.Name, c.Resources, examplePod.Spec.Containers[i].Resources)
		}
	}
}

// A CG killed and not restarted has ended: the agent has nothing of it, nothing is next.
func TestExplainEnded(t *testing.T) {
	p := hogPod()
	p.Name, p.Status.Phase = "ramp", corev1.PodFailed
	var out bytes.Buffer
	if err := (story{pod: p, node: nodes(t)[0], now: t0}).write(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Resources: the pod has ended (Failed)", "Next: nothing: the pod has ended."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
}

// A DRA CG the agent has not sampled yet books what its claims of the NR1 consumed.
func TestExplainBookedByClaims(t *testing.T) {
	p := hogPod()
	p.Name = "dra-cg"
	consumed := map[resourceapi.QualifiedName]resource.Quantity{"computeDMA": resource.MustParse("3Mi"), "hvQueues": resource.MustParse("7")}
	claims := []resourceapi.ResourceClaim{
		{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{
				{Driver: "nr1.neureality.ai", Pool: "node-a", Device: "nr1-0", ConsumedCapacity: consumed},
				{Driver: "gpu.example.com", Pool: "node-a", Device: "gpu-0", ConsumedCapacity: consumed},
			},
		}}}},
		{}, // not allocated yet
	}
	var out bytes.Buffer
	if err := (story{pod: p, claims: claims, node: nodes(t)[0], now: t0}).write(&out); err != nil {
		t.Fatal(err)
	}
	if want := "Its spec books compute_dma_memory 3 MB, ai_hypervisor_queue 7."; !strings.Contains(out.String(), want) {
		t.Errorf("no %q in\n%s", want, out.String())
	}
}
