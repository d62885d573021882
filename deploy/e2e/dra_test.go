// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/neureality-sdk/nr1-agent/agent/offer/dra"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/manifest"
)

const draNS = "nr1-dra"

// draCG is a CG of the DRA tests: a ResourceClaimTemplate for booked, and a pod whose
// health-handler runs nr1-load with args and uses the claim.
func draCG(t *testing.T, c kubernetes.Interface, name string, booked nr1.Amounts, args ...string) *corev1.Pod {
	t.Helper()
	hh := loadContainer("health-handler", args...)
	hh.Resources.Claims = []corev1.ResourceClaim{{Name: manifest.RequestName}}
	return createDRAPod(t, c, name, booked, corev1.PodSpec{Containers: []corev1.Container{hh}})
}

// createDRAPod creates the pod of spec claiming booked through a template of its name;
// its containers name the claim themselves.
func createDRAPod(t *testing.T, c kubernetes.Interface, name string, booked nr1.Amounts, spec corev1.PodSpec) *corev1.Pod {
	t.Helper()
	template := createTemplate(t, c, manifest.ClaimTemplate(draNS, name, booked))
	grace := int64(1)
	noToken := false
	spec.RestartPolicy, spec.TerminationGracePeriodSeconds, spec.AutomountServiceAccountToken = corev1.RestartPolicyAlways, &grace, &noToken
	spec.ResourceClaims = []corev1.PodResourceClaim{{Name: manifest.RequestName, ResourceClaimTemplateName: template}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: draNS}, Spec: spec}
	created, err := c.CoreV1().Pods(draNS).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	diagnose(t, c, created)
	return created
}

// initClaimCG checks a CG whose claim only its init container uses: the kubelet's
// pod-resources answer leaves the init container out, and the agent reads the claim
// from the share the kubelet gave it, never as nothing. It holds within the claim,
// then exits, and the CG runs on untouched.
func initClaimCG(t *testing.T, c kubernetes.Interface, agent *corev1.Pod, imageMB nr1.Units) {
	t.Helper()
	booked := nr1.Amounts{2, 0, imageMB + 1, 1}
	load := loadContainer("load-model", "--compute-dma-mb=2", "--queues=1", "--step=25s:queues=1", "--exit")
	load.Resources.Claims = []corev1.ResourceClaim{{Name: manifest.RequestName}}
	p := createDRAPod(t, c, "init-claim", booked, corev1.PodSpec{
		InitContainers: []corev1.Container{load},
		Containers:     []corev1.Container{loadContainer("health-handler")},
	})
	eventually(t, 60*time.Second, "init-claim's init container measured against its claim", func() error {
		cg, err := cgView(agent, p)
		if err != nil {
			return err
		}
		if !cg.AllocationKnown || cg.Allocation != booked {
			return fmt.Errorf("allocation %v known %v (%s), want the init container's claim %v", cg.Allocation, cg.AllocationKnown, cg.AllocationUnknown, booked)
		}
		if cg.Usage[nr1.HypervisorQueue] != 1 {
			return fmt.Errorf("usage %v: the init container not holding yet", cg.Usage)
		}
		return nil
	})
	runningPod(t, c, p)
	if evs := nr1Events(t, c, p); len(evs) > 0 {
		t.Errorf("init-claim, within its claim, got NR1 Event %s: %s", evs[0].Reason, evs[0].Message)
	}
}

// unreadSidecarCG checks a CG whose claim only a sidecar holds, a sidecar whose
// runtime status the agent cannot receive: its environment, from ConfigMaps of
// characters JSON escapes six-fold, makes containerd's verbose status, which carries it
// twice, larger than the agent's 16 MiB. What a CG shows the runtime never shields it:
// the sidecar's cgroup is found below its pod's by its ID, its claim is the kubelet's
// table's, and holding 12 queues of the 2 it booked it is killed.
func unreadSidecarCG(t *testing.T, c kubernetes.Interface, agent *corev1.Pod, imageMB nr1.Units) {
	t.Helper()
	if stackRuntime() != "containerd" {
		// CRI-O's status carries the environment once: what a process may be given
		// (execve's limit) stays under the agent's limit there.
		t.Logf("the unread sidecar: containerd's case, the stack runs %s", stackRuntime())
		return
	}
	from := bigEnvFrom(t, c, draNS)
	always := corev1.ContainerRestartPolicyAlways
	// The queues are taken once the pod is seen running, past the container warm-up.
	sidecar := loadContainer("model-server", "--compute-dma-mb=2", "--queues=1", "--step=5s:queues=12")
	sidecar.RestartPolicy, sidecar.EnvFrom = &always, from
	sidecar.Resources.Claims = []corev1.ResourceClaim{{Name: manifest.RequestName}}
	booking := nr1.Amounts{2, 0, imageMB + 1, 2}
	p := createDRAPod(t, c, "unread-sidecar", booking, corev1.PodSpec{
		InitContainers: []corev1.Container{sidecar},
		Containers:     []corev1.Container{loadContainer("health-handler")},
	})
	runningPod(t, c, p)
	eventually(t, 60*time.Second, "the unread sidecar's CG known with its booking, the sidecar in its cgroup", func() error {
		cg, err := cgView(agent, p)
		if err != nil {
			return err
		}
		if !cg.AllocationKnown || cg.Allocation != booking {
			return fmt.Errorf("allocation %v known %v (%s), want its booking %v", cg.Allocation, cg.AllocationKnown, cg.AllocationUnknown, booking)
		}
		for _, ctr := range cg.Containers {
			if ctr.Name == "model-server" && ctr.State == "running" && ctr.CgroupID == 0 {
				return fmt.Errorf("the sidecar runs without a cgroup: %+v", ctr)
			}
		}
		return nil
	})
	waitReason(t, c, p, "NR1Killed", 60*time.Second)
	if err := c.CoreV1().Pods(draNS).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

// bigEnvFrom creates in ns the ConfigMaps of an environment of 1.76 MB of characters
// JSON escapes six-fold: containerd's verbose status of a container given it, which
// carries it twice, is about 21 MB, past what the agent receives (16 MiB).
func bigEnvFrom(t *testing.T, c kubernetes.Interface, ns string) []corev1.EnvFromSource {
	var from []corev1.EnvFromSource
	for i := range 2 {
		data := map[string]string{}
		for k := range 8 {
			data[fmt.Sprintf("BIG_%d_%d", i, k)] = strings.Repeat("<", 110<<10)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-env-%d", i), Namespace: ns}, Data: data}
		if _, err := c.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		from = append(from, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}})
	}
	return from
}

// createExample creates a DRA example of deploy/examples, its ResourceClaimTemplate and
// pod, in the DRA tests' namespace, and returns the pod.
func createExample(t *testing.T, c kubernetes.Interface, name string) *corev1.Pod {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "deploy", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("%s: %d documents, want the template and the pod", name, len(docs))
	}
	var tmpl resourceapi.ResourceClaimTemplate
	var pod corev1.Pod
	if err := sigsyaml.UnmarshalStrict([]byte(docs[0]), &tmpl); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := sigsyaml.UnmarshalStrict([]byte(docs[1]), &pod); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	tmpl.Namespace, pod.Namespace = draNS, draNS
	createTemplate(t, c, &tmpl)
	created, err := c.CoreV1().Pods(draNS).Create(context.Background(), &pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	diagnose(t, c, created)
	return created
}

// runningPod waits for pod to run every container.
func runningPod(t *testing.T, c kubernetes.Interface, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	eventually(t, 90*time.Second, pod.Name+" runs", func() error {
		var err error
		if got, err = c.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{}); err != nil {
			return err
		}
		return allRunning(got)
	})
	return got
}

// nodeSlice is the NR1 driver's ResourceSlice of node.
func nodeSlice(c kubernetes.Interface, node string) (*resourceapi.ResourceSlice, error) {
	slices, err := c.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{
		FieldSelector: "spec.driver=" + dra.DriverName + ",spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	if len(slices.Items) != 1 {
		return nil, fmt.Errorf("%d ResourceSlices of %s on %s", len(slices.Items), dra.DriverName, node)
	}
	return &slices.Items[0], nil
}

// deleteNodeSlices deletes the driver's ResourceSlices of node: a node moved back to the
// device plugin keeps them otherwise (README, "Device plugin or DRA").
func deleteNodeSlices(t testing.TB, c kubernetes.Interface, node string) {
	err := c.ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{
		FieldSelector: "spec.driver=" + dra.DriverName + ",spec.nodeName=" + node})
	if err != nil {
		t.Errorf("deleting the DRA ResourceSlices: %v", err)
	}
}

// cgView is the agent's view of one CG, from /debug/cgs.
func cgView(agent *corev1.Pod, pod *corev1.Pod) (*debugCG, error) {
	var s debugSnapshot
	if err := debugJSON(agent, "/debug/cgs?namespace="+pod.Namespace+"&pod="+pod.Name, &s); err != nil {
		return nil, err
	}
	cg := s.CG(string(pod.UID))
	if cg == nil {
		return nil, fmt.Errorf("%s not in /debug/cgs", pod.Name)
	}
	return cg, nil
}

// TestDRA runs the agent in DRA mode: the NR1 published as one device with four
// consumable capacities, claims prepared with their budget, CGs sharing the device,
// the oversized claim left pending, the over-allocation cases acted on as with the
// device plugin, claims kept prepared through kubelet and agent restarts, and the NR1's
// health in the pods' status and the device's taints.
func TestDRA(t *testing.T) {
	c := client(t)
	node := nodeName(t, c)
	imageMB := nr1LoadImageMB(t)
	// Registered first, run last: after the agent is back in device-plugin mode.
	t.Cleanup(func() { deleteNodeSlices(t, c, node) })
	withConfig(t, c, func(cfg map[string]any) { cfg["mode"] = "dra" })
	newNamespace(t, c, draNS)
	agent := mustReadyAgent(t, c)

	var slice *resourceapi.ResourceSlice
	eventually(t, 30*time.Second, "the node's NR1 ResourceSlice", func() error {
		var err error
		slice, err = nodeSlice(c, node)
		return err
	})
	if len(slice.Spec.Devices) != 1 || slice.Spec.Devices[0].Name != dra.DeviceName {
		t.Fatalf("slice devices %+v", slice.Spec.Devices)
	}
	dev := slice.Spec.Devices[0]
	for _, r := range nr1.All {
		got := dev.Capacity[manifest.CapacityName(r)].Value
		want := resource.NewQuantity(simCapacity[corev1.ResourceName(r.Name())]*r.UnitBytes(), resource.BinarySI)
		if got.Cmp(*want) != 0 {
			t.Errorf("capacity %s = %s, want %s", manifest.CapacityName(r), got.String(), want.String())
		}
	}
	t.Logf("ResourceSlice %s: device %s, shareable %v, attributes %v", slice.Name, dev.Name, *dev.AllowMultipleAllocations, dev.Attributes)

	// The ResNet-50 CG of deploy/examples: 3 / 0 / 2392 / 7 claimed once, used by both
	// of its containers (1 MB and the queues, and 2 MB more).
	resnet := nr1.Amounts{3, 0, 2392, 7}
	rn := runningPod(t, c, createExample(t, c, "dra/resnet50-cg.yaml"))
	eventually(t, 20*time.Second, "resnet50 known and measured", func() error {
		cg, err := cgView(agent, rn)
		if err != nil {
			return err
		}
		if !cg.AllocationKnown || cg.Allocation != resnet {
			return fmt.Errorf("allocation %v known %v (%s)", cg.Allocation, cg.AllocationKnown, cg.AllocationUnknown)
		}
		if cg.Usage[nr1.ComputeDMAMemory] != nr1.ComputeDMAMemory.InBase(3) || cg.Usage[nr1.HypervisorQueue] != 7 {
			return fmt.Errorf("usage %v", cg.Usage)
		}
		return nil
	})
	budget, ok := logLineAt(t, c, rn, "health-handler", "budget")
	if !ok {
		t.Fatal("nr1-load logged no budget")
	}
	raw, err := c.CoreV1().Pods(draNS).GetLogs(rn.Name, &corev1.PodLogOptions{Container: "health-handler"}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	logs := string(raw)
	for _, env := range []string{"NR1_COMPUTE_DMA_MEMORY_MB=3", "NR1_CPU_DMA_MEMORY_MB=0", "NR1_DOCKER_PARTITION_MB=2392", "NR1_AI_HYPERVISOR_QUEUES=7"} {
		if !strings.Contains(logs, env) {
			t.Errorf("resnet50's budget (logged %s) lacks %s:\n%s", clock(budget), env, logs)
		}
	}

	// Five CGs share the one device; what the claims consumed is what they booked.
	small := nr1.Amounts{2, 1, imageMB + 1, 2}
	var shared []*corev1.Pod
	for i := range 5 {
		shared = append(shared, draCG(t, c, fmt.Sprintf("shared-%d", i), small, holdArgs(small)...))
	}
	for _, p := range shared {
		runningPod(t, c, p)
	}
	claims, err := c.ResourceV1().ResourceClaims(draNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var consumed, want nr1.Amounts
	want = nr1.Add(resnet, nr1.Amounts{5 * small[0], 5 * small[1], 5 * small[2], 5 * small[3]})
	shares := map[string]bool{}
	for _, cl := range claims.Items {
		if cl.Status.Allocation == nil {
			continue
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			a, err := manifest.Amounts(r.ConsumedCapacity)
			if err != nil {
				t.Errorf("claim %s: %v", cl.Name, err)
			}
			consumed = nr1.Add(consumed, a)
			if r.Device != dra.DeviceName || r.ShareID == nil {
				t.Errorf("claim %s allocated %s (share %v)", cl.Name, r.Device, r.ShareID)
			} else {
				shares[string(*r.ShareID)] = true
			}
		}
	}
	if consumed != want || len(shares) != 6 {
		t.Errorf("six claims on one device consumed %v in %d shares, want %v in 6", consumed, len(shares), want)
	}
	t.Logf("six CGs share %s: consumed %v in %d shares", dra.DeviceName, consumed, len(shares))

	// kubectl nr1 inject --mode dra: a CG's pod spec and its resources.yaml become a
	// template and a pod claiming it, which the cluster runs and the agent knows.
	injectDRA(t, c)
	initClaimCG(t, c, agent, imageMB)
	unreadSidecarCG(t, c, agent, imageMB)
	sharedClaimCGs(t, c, agent, imageMB)

	// The oversized CG: more compute DMA than the NR1 has; the scheduler says why.
	big := createExample(t, c, "dra/oversized-cg.yaml")
	eventually(t, 30*time.Second, "the oversized CG unschedulable", func() error {
		p, err := c.CoreV1().Pods(draNS).Get(context.Background(), big.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				t.Logf("oversized: %s", cond.Message)
				return nil
			}
		}
		return fmt.Errorf("phase %s, conditions %v", p.Status.Phase, p.Status.Conditions)
	})

	// Over its claim: a queue hog and a compute DMA ramp (the hard ratio: killed at
	// once), and a writable layer past the docker partition (evicted at once).
	var q nr1.Amounts
	q[nr1.HypervisorQueue], q[nr1.DockerPartition] = 2, imageMB+1
	hog := draCG(t, c, "queue-hog", q, "--queues=2", "--step=5s:queues=5")
	var m nr1.Amounts
	m[nr1.ComputeDMAMemory], m[nr1.DockerPartition] = 2, imageMB+1
	ramp := draCG(t, c, "dma-ramp", m, "--compute-dma-mb=2", "--step=5s:compute=5")
	var w nr1.Amounts
	w[nr1.DockerPartition] = imageMB + 2
	writer := draCG(t, c, "writer", w, "--write-mb=1", "--step=5s:write="+fmt.Sprint(2*(imageMB+2)))
	for _, p := range []*corev1.Pod{hog, ramp} {
		waitReason(t, c, p, "NR1LimitExceeded", 60*time.Second)
		waitReason(t, c, p, "NR1Killed", 60*time.Second)
	}
	waitReason(t, c, writer, "NR1Evicted", 90*time.Second)

	// Restarts keep prepared claims prepared: no pod disturbed, the agent knows them.
	steady := append([]*corev1.Pod{rn}, shared...)
	restarts := func() map[string]int32 {
		out := map[string]int32{}
		for _, p := range steady {
			got, err := c.CoreV1().Pods(draNS).Get(context.Background(), p.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := allRunning(got); err != nil {
				t.Errorf("%s after a restart: %v", p.Name, err)
			}
			out[p.Name] = got.Status.ContainerStatuses[0].RestartCount
		}
		return out
	}
	before := restarts()
	knownAgain := func(after string) {
		t.Helper()
		agent = mustReadyAgent(t, c)
		eventually(t, 30*time.Second, "every steady CG known again after "+after, func() error {
			for _, p := range steady {
				cg, err := cgView(agent, p)
				if err != nil {
					return err
				}
				if !cg.AllocationKnown {
					return fmt.Errorf("%s: %s", p.Name, cg.AllocationUnknown)
				}
			}
			return nil
		})
	}
	stack(t, "restart-kubelet")
	restartAgent(t, c)
	knownAgain("a kubelet and an agent restart")

	// A damaged checkpoint of prepared claims: the agent starts all the same, sets the
	// file aside and recovers the claims in use from the kubelet and the API server.
	checkpointFile := filepath.Join("/var/lib/kubelet/plugins", dra.DriverName, "claims.json")
	if err := os.WriteFile(checkpointFile, []byte(`{"version":2,"checksum":"00","sta`), 0o600); err != nil {
		t.Fatal(err)
	}
	restartAgent(t, c)
	knownAgain("a damaged claims checkpoint")
	if _, err := os.Stat(checkpointFile + ".damaged"); err != nil {
		t.Errorf("the damaged checkpoint was not set aside: %v", err)
	}
	if store, err := dra.OpenStore(checkpointFile); err != nil || len(store.Claims()) < len(steady) {
		t.Errorf("the checkpoint after recovery: %v", err)
	}
	time.Sleep(5 * time.Second)
	after := restarts()
	for name, n := range before {
		if after[name] != n {
			t.Errorf("%s restarted %d times through the kubelet and agent restarts", name, after[name]-n)
		}
		if evs := nr1Events(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: draNS}}); len(evs) > 0 {
			t.Errorf("%s, within its claim, got NR1 Event %s: %s", name, evs[0].Reason, evs[0].Message)
		}
	}
	specs, _ := filepath.Glob("/var/run/cdi/nr1.neureality.ai_*.json")
	t.Logf("through a kubelet and an agent restart and a damaged checkpoint: %d steady CGs undisturbed, %d CDI specs", len(steady), len(specs))

	// Health: a fault taints the device and reaches the pods' status; recovery untaints.
	// The pods' status is the kubelet's resource health, off on the local stack (one
	// status entry per device-plugin unit): on for this part.
	stack(t, "resource-health", "on")
	healthOff := sync.OnceFunc(func() {
		stack(t, "resource-health", "off")
		eventually(t, 60*time.Second, "the node's slice after the kubelet's restart", func() error {
			_, err := nodeSlice(c, node)
			return err
		})
	})
	t.Cleanup(healthOff)
	sim := func(args ...string) {
		run(t, filepath.Join(repo, "bin", "nr1-sim"), append([]string{"--dir", simDir()}, args...)...)
	}
	t.Cleanup(func() { sim("health", "ok") })
	sim("health", "fault")
	eventually(t, 30*time.Second, "the device tainted", func() error {
		s, err := nodeSlice(c, node)
		if err != nil {
			return err
		}
		if len(s.Spec.Devices[0].Taints) == 0 {
			return fmt.Errorf("no taint")
		}
		return nil
	})
	eventually(t, 60*time.Second, "resnet50's status shows the NR1 unhealthy", func() error {
		return resourceHealth(c, rn, corev1.ResourceHealthStatusUnhealthy)
	})
	sim("health", "ok")
	eventually(t, 30*time.Second, "the device untainted", func() error {
		s, err := nodeSlice(c, node)
		if err != nil {
			return err
		}
		if n := len(s.Spec.Devices[0].Taints); n != 0 {
			return fmt.Errorf("%d taints", n)
		}
		return nil
	})
	eventually(t, 60*time.Second, "resnet50's status shows the NR1 healthy", func() error {
		return resourceHealth(c, rn, corev1.ResourceHealthStatusHealthy)
	})
	healthOff()
}

// resourceHealth says why no allocated resource of pod's containers has health want.
func resourceHealth(c kubernetes.Interface, pod *corev1.Pod, want corev1.ResourceHealthStatus) error {
	p, err := c.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var seen []string
	for _, cs := range p.Status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			for _, r := range rs.Resources {
				seen = append(seen, fmt.Sprintf("%s %s %s", rs.Name, r.ResourceID, r.Health))
				if r.Health == want {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("allocated resources' health %v", seen)
}

// simDir is the simulated NR1's directory (deploy/local/stack.sh's NR1_SIM_DIR).
func simDir() string {
	if d := os.Getenv("NR1_SIM_DIR"); d != "" {
		return d
	}
	return "/run/nr1-sim"
}

// TestDRASlicesOnlyOwnNode: the admission policy lets an agent write its own node's
// ResourceSlices only, whatever its RBAC allows: as the agent's service account on node
// "elsewhere", writing node vm's slice is refused.
func TestDRASlicesOnlyOwnNode(t *testing.T) {
	node := nodeName(t, client(t))
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	as := func(onNode string) kubernetes.Interface {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:nr1-system:nr1-agent",
			Extra: map[string][]string{"authentication.kubernetes.io/node-name": {onNode}}}
		kc, err := kubernetes.NewForConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		return kc
	}
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "nr1-admission-test-"},
		Spec: resourceapi.ResourceSliceSpec{Driver: dra.DriverName, NodeName: &node,
			Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}},
	}
	_, err = as("elsewhere").ResourceV1().ResourceSlices().Create(context.Background(), slice, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil || !strings.Contains(err.Error(), "may not write the ResourceSlices of node "+node) {
		t.Errorf("the agent of another node writing %s's slice: %v", node, err)
	}
	if _, err := as(node).ResourceV1().ResourceSlices().Create(context.Background(), slice, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("the agent of %s writing its own slice (dry run): %v", node, err)
	}
}

// injectDRA runs a CG written by kubectl nr1 inject --mode dra from the toolchain's
// resources.yaml, and removes it.
func injectDRA(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	spec := `apiVersion: v1
kind: Pod
metadata: {name: injected, namespace: ` + draNS + `}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
    - name: health-handler
      image: nr1.local/nr1-load:dev
      imagePullPolicy: Never
      args: [--compute-dma-mb=1, --queues=7]
`
	t.Run("kubectl nr1 inject --mode dra", func(t *testing.T) { injectCG(t, c, spec, draNS, "injected", "--mode", "dra") })
}
