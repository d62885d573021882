//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/agent/enforce"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// noFalseNS is TestNoFalseAction's namespace, deleted at its end.
const noFalseNS = "nr1-nofalse"

// actionKinds are the enforcement actions that must not happen to a CG within its
// allocation.
var actionKinds = []string{"warn", "throttle", "kill", "evict"}

// exactCG is a CG of TestNoFalseAction: its processes hold exactly its allocation of
// DMA memory and queues, and stay within its docker partition (the image, what it
// writes, and a MB for its status files).
type exactCG struct {
	name        string
	alloc       nr1.Amounts // the docker partition is set from the image's size
	writeMB     int64
	fork        int  // health-handler's --fork
	sidecar     bool // a second container mapping the same ranges of the same DMA files
	sidecarFork int
	init        bool // an init container running nr1-load briefly
	pod         *corev1.Pod
}

func exactCGs() []*exactCG {
	a := func(compute, cpu, queues int64) nr1.Amounts {
		var x nr1.Amounts
		x[nr1.ComputeDMAMemory], x[nr1.CPUDMAMemory], x[nr1.HypervisorQueue] = compute, cpu, queues
		return x
	}
	return []*exactCG{
		{name: "plain-a", alloc: a(3, 0, 7), writeMB: 4},
		{name: "plain-b", alloc: a(8, 2, 1)},
		{name: "fork-a", alloc: a(2, 1, 4), fork: 4},
		{name: "fork-b", alloc: a(5, 0, 2), fork: 4, writeMB: 2},
		{name: "fork-c", alloc: a(1, 0, 16), fork: 4},
		{name: "sidecar-a", alloc: a(3, 0, 3), sidecar: true},
		{name: "sidecar-b", alloc: a(6, 2, 5), sidecar: true, writeMB: 2},
		{name: "sidecar-c", alloc: a(4, 1, 1), sidecar: true},
		{name: "fork-sidecar", alloc: a(2, 1, 6), fork: 4, sidecar: true, sidecarFork: 2},
		{name: "init", alloc: a(3, 1, 4), init: true, writeMB: 1},
	}
}

// holdArgs are nr1-load's flags to hold a's DMA memory and queues.
func holdArgs(a nr1.Amounts) []string {
	return []string{
		"--compute-dma-mb=" + strconv.FormatInt(a[nr1.ComputeDMAMemory], 10),
		"--cpu-dma-mb=" + strconv.FormatInt(a[nr1.CPUDMAMemory], 10),
		"--queues=" + strconv.FormatInt(a[nr1.HypervisorQueue], 10),
	}
}

// simDMAFiles are the simulated NR1's DMA files (deploy/local/stack.sh's NR1_SIM_DIR),
// by the path containers see them at.
var simDMAFiles = map[string]string{
	"/dev/nr1_0_compute_dma": "/run/nr1-sim/dev/nr1_0_compute_dma",
	"/dev/nr1_0_cpu_dma":     "/run/nr1-sim/dev/nr1_0_cpu_dma",
}

func (cg *exactCG) build(imageMB int64) *corev1.Pod {
	cg.alloc[nr1.DockerPartition] = imageMB + cg.writeMB + 1
	hh := loadContainer("health-handler", append(holdArgs(cg.alloc), "--write-mb="+strconv.FormatInt(cg.writeMB, 10), "--fork="+strconv.Itoa(cg.fork))...)
	hh.Resources = nr1Requests(cg.alloc)
	grace := int64(1)
	noToken := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: cg.name, Namespace: noFalseNS, Labels: map[string]string{"neureality.ai/compute-graph": cg.name}},
		Spec: corev1.PodSpec{
			// A container the agent stopped is started again: its restart count tells, and
			// the agent's /metrics must survive it.
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken: &noToken,
			Containers:                   []corev1.Container{hh},
		},
	}
	if cg.sidecar {
		// The pod sharing its DMA buffers: the same ranges of the same files, reached
		// through hostPath as the ResNet-50 example's second container does.
		var dma nr1.Amounts
		dma[nr1.ComputeDMAMemory], dma[nr1.CPUDMAMemory] = cg.alloc[nr1.ComputeDMAMemory], cg.alloc[nr1.CPUDMAMemory]
		side := loadContainer("dma-sharer", append(holdArgs(dma), "--fork="+strconv.Itoa(cg.sidecarFork))...)
		fileType := corev1.HostPathFile
		for _, inCtr := range []string{"/dev/nr1_0_compute_dma", "/dev/nr1_0_cpu_dma"} {
			vol := strings.ReplaceAll(strings.TrimPrefix(inCtr, "/dev/"), "_", "-")
			side.VolumeMounts = append(side.VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: inCtr})
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: simDMAFiles[inCtr], Type: &fileType},
			}})
		}
		pod.Spec.Containers = append(pod.Spec.Containers, side)
	}
	if cg.init {
		// Given nothing and holding nothing: a kubelet restart fails a pod whose init
		// container was given device-plugin resources when the plugin's devices are not
		// back yet (UnexpectedAdmissionError, kubernetes/kubernetes#124345 and #138446),
		// whatever the agent does.
		pod.Spec.InitContainers = []corev1.Container{loadContainer("setup", "--exit")}
	}
	return pod
}

// allRunning says why pod is not running every container, nil when it is.
func allRunning(p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("%s: phase %s %s %s", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	if len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return fmt.Errorf("%s: %d container statuses", p.Name, len(p.Status.ContainerStatuses))
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Running == nil {
			return fmt.Errorf("%s/%s: %s", p.Name, s.Name, containerState(s))
		}
	}
	return nil
}

func containerState(s corev1.ContainerStatus) string {
	switch {
	case s.State.Waiting != nil:
		return "waiting: " + s.State.Waiting.Reason + " " + s.State.Waiting.Message
	case s.State.Terminated != nil:
		return fmt.Sprintf("terminated: %s exit %d", s.State.Terminated.Reason, s.State.Terminated.ExitCode)
	}
	return "running"
}

// readyAgent is the agent pod that is Ready and not going away.
func readyAgent(c kubernetes.Interface) (*corev1.Pod, error) {
	pods, err := c.CoreV1().Pods("nr1-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=nr1-agent"})
	if err != nil {
		return nil, fmt.Errorf("agent pods: %w", err)
	}
	var ready []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && isReady(p) && p.Status.PodIP != "" {
			ready = append(ready, p)
		}
	}
	if len(ready) != 1 {
		return nil, fmt.Errorf("%d of %d agent pods ready", len(ready), len(pods.Items))
	}
	return ready[0], nil
}

// agentInstance names one run of the agent: counters start again with each.
func agentInstance(p *corev1.Pod) string {
	var restarts int32
	for _, s := range p.Status.ContainerStatuses {
		restarts += s.RestartCount
	}
	return fmt.Sprintf("%s (uid %.8s, restarts %d)", p.Name, p.UID, restarts)
}

// viewState is how the agent's /debug/cgs shows the ten CGs.
type viewState int

const (
	viewKnown   viewState = iota // every CG with allocationKnown and its allocation
	viewUnknown                  // some CG missing or not known (or no agent to ask)
	viewWrong                    // some CG known with another allocation: the defect
)

// observation is one read of /debug/cgs.
type observation struct {
	at     time.Time
	agent  types.UID
	state  viewState
	detail string
	over   []string // CGs the agent measured over their allocation
}

// observer reads /debug/cgs every 250 ms.
type observer struct {
	cgs []*exactCG
	mu  sync.Mutex
	obs []observation
}

func (o *observer) observe(c kubernetes.Interface) observation {
	ob := observation{at: time.Now(), state: viewUnknown}
	agent, err := readyAgent(c)
	if err != nil {
		ob.detail = err.Error()
		return ob
	}
	ob.agent = agent.UID
	var s debugSnapshot
	if err := getJSON("http://"+agent.Status.PodIP+":9470/debug/cgs", &s); err != nil {
		ob.detail = err.Error()
		return ob
	}
	ob.state = viewKnown
	var unknown, wrong []string
	for _, cg := range o.cgs {
		seen := s.CG(string(cg.pod.UID))
		switch {
		case seen == nil:
			unknown = append(unknown, cg.name+" absent")
		case !seen.AllocationKnown:
			unknown = append(unknown, cg.name+" not known")
		case seen.Allocation != cg.alloc:
			wrong = append(wrong, fmt.Sprintf("%s known as %v", cg.name, seen.Allocation))
		}
		if seen != nil {
			if over := overBy(seen.Usage, cg.alloc); over != "" {
				ob.over = append(ob.over, cg.name+": "+over)
			}
		}
	}
	switch {
	case len(wrong) > 0:
		ob.state, ob.detail = viewWrong, strings.Join(append(wrong, unknown...), "; ")
	case len(unknown) > 0:
		ob.state, ob.detail = viewUnknown, strings.Join(unknown, "; ")
	}
	return ob
}

// overBy says what usage (base units) holds over allocation (units), "" when nothing.
func overBy(usage, alloc nr1.Amounts) string {
	var over []string
	for _, r := range nr1.All {
		if usage[r] > alloc[r]*r.UnitBytes() {
			over = append(over, fmt.Sprintf("%s %s of %d %s", r, humanUnits(r, usage[r]), alloc[r], r.Unit()))
		}
	}
	return strings.Join(over, ", ")
}

func humanUnits(r nr1.Resource, v int64) string {
	if r.UnitBytes() == 1 {
		return strconv.FormatInt(v, 10)
	}
	return strconv.FormatFloat(float64(v)/float64(r.UnitBytes()), 'f', 2, 64)
}

func (o *observer) run(ctx context.Context, c kubernetes.Interface) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		ob := o.observe(c)
		o.mu.Lock()
		o.obs = append(o.obs, ob)
		o.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// since returns the observations from t on.
func (o *observer) since(t time.Time) []observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := sort.Search(len(o.obs), func(i int) bool { return !o.obs[i].at.Before(t) })
	return append([]observation(nil), o.obs[i:]...)
}

// recovery is how the agent's view went through one disruption.
type recovery struct {
	knownAfter       time.Duration // from the disruption's start to the view known for good
	recovered        bool
	unknown, wrong   int // observations in which some CG was not known / known wrong
	firstWrong, over string
}

// recovery reads the observations since start; those of the agent notAgent (replaced by
// the disruption) count as not known.
func (o *observer) recovery(start time.Time, notAgent types.UID) recovery {
	var r recovery
	var good time.Time // the first read known after the last one that was not
	for _, ob := range o.since(start) {
		state := ob.state
		if notAgent != "" && ob.agent == notAgent {
			state = viewUnknown
		}
		switch state {
		case viewKnown:
			if good.IsZero() {
				good = ob.at
			}
		case viewWrong:
			r.wrong++
			if r.firstWrong == "" {
				r.firstWrong = ob.at.Format("15:04:05.000") + " " + ob.detail
			}
			good = time.Time{}
		default:
			r.unknown++
			good = time.Time{}
		}
		if len(ob.over) > 0 && r.over == "" {
			r.over = ob.at.Format("15:04:05.000") + " " + strings.Join(ob.over, "; ")
		}
	}
	r.recovered = !good.IsZero()
	r.knownAfter = good.Sub(start)
	return r
}

// awaitKnown waits until the view is known after t, from an agent other than notAgent,
// and says why not when timeout passes.
func (o *observer) awaitKnown(after time.Time, notAgent types.UID, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		obs := o.since(after)
		err := fmt.Errorf("no observation yet")
		if len(obs) > 0 {
			last := obs[len(obs)-1]
			if last.state == viewKnown && last.agent != notAgent {
				return nil
			}
			err = fmt.Errorf("agent %.8s: %s", last.agent, last.detail)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent's /debug/cgs does not show every CG with its allocation within %v: %w", timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// scraper reads the agent's /metrics every second.
type scraper struct {
	mu       sync.Mutex
	ok, away int      // away: no Ready agent to ask (being replaced)
	failures []string // scrapes that did not answer 200 with a sound exposition
	// actions per agent instance and kind (dry_run="false"): first and highest value seen.
	instances []string
	first     map[string]map[string]float64
	highest   map[string]map[string]float64
}

func newScraper() *scraper {
	return &scraper{first: map[string]map[string]float64{}, highest: map[string]map[string]float64{}}
}

func (s *scraper) run(ctx context.Context, c kubernetes.Interface) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		s.scrape(c)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *scraper) scrape(c kubernetes.Interface) {
	agent, err := readyAgent(c)
	if err != nil {
		s.mu.Lock()
		s.away++
		s.mu.Unlock()
		return
	}
	answered, body, err := getMetrics(agent.Status.PodIP)
	var actions map[string]float64
	if err == nil {
		actions, err = checkExposition(body)
	}
	if err != nil && !answered {
		// Unreachable because it went away meanwhile is no answer.
		if now, rerr := readyAgent(c); rerr != nil || now.UID != agent.UID {
			s.mu.Lock()
			s.away++
			s.mu.Unlock()
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.failures = append(s.failures, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05"), agent.Name, err))
		return
	}
	s.ok++
	inst := agentInstance(agent)
	if _, ok := s.first[inst]; !ok {
		s.instances = append(s.instances, inst)
		s.first[inst], s.highest[inst] = actions, map[string]float64{}
	}
	for k, v := range actions {
		s.highest[inst][k] = max(s.highest[inst][k], v)
	}
}

// getMetrics reads /metrics; answered says whether the agent answered at all.
func getMetrics(ip string) (answered bool, body string, err error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + ip + ":9470/metrics")
	if err != nil {
		return false, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return true, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return true, "", fmt.Errorf("HTTP %d: %.400s", resp.StatusCode, strings.Join(strings.Fields(string(b)), " "))
	}
	return true, string(b), nil
}

// checkExposition refuses duplicate families or series and an exposition without the
// enforcement counters; it returns nr1_enforcement_actions_total{dry_run="false"} by
// action.
func checkExposition(body string) (map[string]float64, error) {
	families, series := map[string]bool{}, map[string]bool{}
	actions := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			if families[f[2]] {
				return nil, fmt.Errorf("family %s twice", f[2])
			}
			families[f[2]] = true
		}
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("line %q", line)
		}
		key := line[:i]
		if series[key] {
			return nil, fmt.Errorf("series %s twice", key)
		}
		series[key] = true
		if strings.HasPrefix(key, "nr1_enforcement_actions_total{") && strings.Contains(key, `dry_run="false"`) {
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err != nil {
				return nil, fmt.Errorf("line %q: %w", line, err)
			}
			for _, k := range actionKinds {
				if strings.Contains(key, `action="`+k+`"`) {
					actions[k] = v
				}
			}
		}
	}
	for _, k := range actionKinds {
		if _, ok := actions[k]; !ok {
			return nil, fmt.Errorf(`no nr1_enforcement_actions_total{action=%q,dry_run="false"}`, k)
		}
	}
	return actions, nil
}

func newNamespace(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	nss := c.CoreV1().Namespaces()
	gone := func() error {
		_, err := nss.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("namespace %s: %w", name, err)
		}
		return fmt.Errorf("namespace %s still there", name)
	}
	// Deleted again at every try, should the API server have been away at the first.
	deleted := func() error {
		_ = nss.Delete(ctx, name, metav1.DeleteOptions{})
		return gone()
	}
	eventually(t, 90*time.Second, "leftover namespace "+name+" gone", deleted)
	if _, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eventually(t, 90*time.Second, "namespace "+name+" deleted", deleted) })
	eventually(t, 30*time.Second, "default ServiceAccount in "+name, func() error {
		_, err := c.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// TestNoFalseAction: ten CGs holding exactly their allocation — plain, forking, sharing
// their DMA with a sidecar, with an init container — live through three kubelet
// restarts, a containerd restart, the agent's pod deleted and its DaemonSet rolled. The
// agent must not act on any of them, and its /metrics must answer every scrape.
//
// Before the first disruption and after each one, a CG in the same namespace goes to
// twice its allocation of compute DMA memory, CPU DMA memory or queues (in turn): the
// agent must still warn and kill it at once (the hard ratio), within overKillWithin of
// going over. The docker partition's ladder (evicted 20 s over) is too slow to repeat
// after every disruption: TestEnforcement and TestFaultAPIServerDownDuringEviction
// cover it.
func TestNoFalseAction(t *testing.T) {
	c := client(t)
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	t.Cleanup(func() { cancel(); bg.Wait() })
	stack := filepath.Join(repo, "deploy", "local", "stack.sh")

	began := time.Now()
	eventually(t, 60*time.Second, "the agent answers /debug/cgs", func() error {
		agent, err := readyAgent(c)
		if err != nil {
			return err
		}
		return getJSON("http://"+agent.Status.PodIP+":9470/debug/cgs", &debugSnapshot{})
	})

	scr := newScraper()
	bg.Add(1)
	go func() { defer bg.Done(); scr.run(ctx, c) }()

	newNamespace(t, c, noFalseNS)
	node := nodeName(t, c)
	imageMB := (imageSize(t, nr1LoadImage) + 1<<20 - 1) >> 20
	cgs := exactCGs()
	for _, cg := range cgs {
		created, err := c.CoreV1().Pods(noFalseNS).Create(ctx, cg.build(imageMB), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cg.pod = created
	}
	eventually(t, 90*time.Second, "the ten CGs run every container", func() error {
		for _, cg := range cgs {
			p, err := c.CoreV1().Pods(noFalseNS).Get(ctx, cg.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := allRunning(p); err != nil {
				return err
			}
		}
		return nil
	})

	obs := &observer{cgs: cgs}
	bg.Add(1)
	go func() { defer bg.Done(); obs.run(ctx, c) }()
	start := time.Now()
	if err := obs.awaitKnown(start, "", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("the agent knows the ten CGs' allocations %v after they all ran", time.Since(start).Round(100*time.Millisecond))
	checkMeasured(t, c, cgs)

	// The disruptions, each followed by time for the agent to take several samples.
	type step struct {
		name   string
		settle time.Duration
		do     func() (replaced types.UID)
	}
	restartKubelet := func() types.UID { run(t, stack, "restart-kubelet"); return "" }
	steps := []step{
		{"kubelet restart 1", 15 * time.Second, restartKubelet},
		{"kubelet restart 2", 15 * time.Second, restartKubelet},
		{"kubelet restart 3", 15 * time.Second, restartKubelet},
		{"containerd restart", 10 * time.Second, func() types.UID { run(t, stack, "restart-containerd"); return "" }},
		{"agent pod deleted", 10 * time.Second, func() types.UID {
			agent := mustReadyAgent(t, c)
			if err := c.CoreV1().Pods("nr1-system").Delete(ctx, agent.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			return agent.UID
		}},
		// The new agent's warm-up and the longest ladder step fit in its settle time.
		{"agent DaemonSet rolled", 25 * time.Second, func() types.UID {
			agent := mustReadyAgent(t, c)
			patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"nr1.neureality.ai/e2e-rolled":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
			if _, err := c.AppsV1().DaemonSets("nr1-system").Patch(ctx, "nr1-agent", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			run(t, "kubectl", "-n", "nr1-system", "rollout", "status", "daemonset/nr1-agent", "--timeout=120s")
			return agent.UID
		}},
	}
	// An over-budget CG after each disruption, and one before the first, while the
	// agent takes samples of the ten.
	var overs []*overCase
	overBudget := func(after string, settle time.Duration) {
		from := time.Now()
		oc := runOverBudget(t, c, node, len(overs), after, imageMB)
		overs = append(overs, oc)
		t.Log(oc.line())
		time.Sleep(time.Until(from.Add(settle)))
	}
	overBudget("before the disruptions", 10*time.Second) // samples before the first disruption
	var timeline []string
	for _, s := range steps {
		began := time.Now()
		replaced := s.do()
		took := time.Since(began)
		// Not fatal: what the agent did to the CGs meanwhile is the finding.
		if err := obs.awaitKnown(began, replaced, 45*time.Second); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
		overBudget("after "+s.name, s.settle)
		r := obs.recovery(began, replaced)
		line := fmt.Sprintf("%s at %s (took %v): ", s.name, began.Format("15:04:05"), took.Round(100*time.Millisecond))
		if r.recovered {
			line += fmt.Sprintf("every allocation known %v after it began", r.knownAfter.Round(100*time.Millisecond))
		} else {
			line += "allocations not all known at the end of its settle time"
		}
		line += fmt.Sprintf("; %d reads not known, %d known with a wrong allocation", r.unknown, r.wrong)
		if r.firstWrong != "" {
			line += " (first: " + r.firstWrong + ")"
		}
		if r.over != "" {
			line += "; measured over: " + r.over
		}
		timeline = append(timeline, line)
		t.Log(line)
	}
	cancel()
	bg.Wait()

	t.Logf("/metrics: %d scrapes answered 200 of %d (%d while no agent was Ready)", scr.ok, scr.ok+len(scr.failures), scr.away)
	if n := len(scr.failures); n > 0 {
		t.Errorf("/metrics: %d scrapes failed; the first: %s; the last: %s", n, scr.failures[0], scr.failures[n-1])
	}
	checkOverBudget(t, c, overs)
	checkActions(t, c, scr, began, overs)
	checkUntouched(t, c, cgs, timeline)
}

// actionReasons are the Events of the actions, by kind.
var actionReasons = map[string]string{"NR1LimitExceeded": "warn", "NR1Throttled": "throttle", "NR1Killed": "kill", "NR1Evicted": "evict"}

// checkActions: each agent instance counted exactly the actions that the Events of the
// over-budget CGs it acted on tell of, and no other but for actions on CGs outside the
// test (the stack may be shared) that its Events tell of.
func checkActions(t *testing.T, c kubernetes.Interface, scr *scraper, since time.Time, overs []*overCase) {
	t.Helper()
	// The over-budget CGs' actions by the agent instance that took them; those of a CG
	// during which the agent changed are counted for the test as a whole.
	want := map[string]map[string]float64{}
	unattributed := map[string]float64{}
	for _, oc := range overs {
		if oc.pod == nil {
			continue
		}
		taken, _ := actionCounts(nr1Events(t, c, oc.pod))
		into := unattributed
		if oc.agentAtStart != "" && oc.agentAtStart == oc.agentAtKill {
			if want[oc.agentAtKill] == nil {
				want[oc.agentAtKill] = map[string]float64{}
			}
			into = want[oc.agentAtKill]
		}
		for k, n := range taken {
			into[k] += n
		}
	}
	excess := map[string]float64{}
	for i, inst := range scr.instances {
		var taken, expected []string
		for _, k := range actionKinds {
			n := scr.highest[inst][k]
			if i == 0 {
				n -= scr.first[inst][k] // the agent that ran before the test may have acted then
			}
			if n < want[inst][k] {
				t.Errorf("agent %s: nr1_enforcement_actions_total{action=%q,dry_run=\"false\"} rose by %g during the test; its Events on the over-budget CGs tell of %g", inst, k, n, want[inst][k])
			}
			excess[k] += n - want[inst][k]
			taken = append(taken, fmt.Sprintf("%s=%g", k, n))
			expected = append(expected, fmt.Sprintf("%s=%g", k, want[inst][k]))
		}
		t.Logf("agent %s: nr1_enforcement_actions_total{dry_run=\"false\"} during the test: %s; Events on the over-budget CGs: %s", inst, strings.Join(taken, " "), strings.Join(expected, " "))
	}
	for inst := range want {
		if _, ok := scr.first[inst]; !ok {
			t.Errorf("agent %s acted on over-budget CGs, but no scrape of its /metrics answered", inst)
		}
	}
	evs, err := c.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := map[string]float64{}
	var others []string
	for _, ev := range evs.Items {
		kind, ok := actionReasons[ev.Reason]
		last := ev.LastTimestamp.Time
		if ev.EventTime.After(last) {
			last = ev.EventTime.Time
		}
		if !ok || ev.Source.Component != "nr1-agent" || ev.InvolvedObject.Namespace == noFalseNS || last.Before(since) {
			continue
		}
		elsewhere[kind] += float64(max(ev.Count, 1))
		others = append(others, ev.InvolvedObject.Namespace+"/"+ev.InvolvedObject.Name+" "+ev.Reason)
	}
	if len(others) > 0 {
		t.Logf("the agent acted on CGs outside the test meanwhile: %s", strings.Join(others, ", "))
	}
	for _, k := range actionKinds {
		switch extra := excess[k] - unattributed[k]; {
		case extra < 0:
			t.Errorf("nr1_enforcement_actions_total{action=%q,dry_run=\"false\"}: %g fewer than the over-budget CGs' Events tell of", k, -extra)
		case extra > elsewhere[k]:
			t.Errorf("nr1_enforcement_actions_total{action=%q,dry_run=\"false\"} rose by %g more than the over-budget CGs' Events tell of; Events explain %g, on CGs outside the test", k, extra, elsewhere[k])
		}
	}
}

// actionCounts counts Events by action kind, and lists the agent's other Events.
func actionCounts(evs []corev1.Event) (map[string]float64, []string) {
	taken := map[string]float64{}
	var other []string
	for _, ev := range evs {
		if kind, ok := actionReasons[ev.Reason]; ok {
			taken[kind] += float64(max(ev.Count, 1))
		} else {
			other = append(other, ev.Reason+": "+ev.Message)
		}
	}
	return taken, other
}

// overKinds are the resources the over-budget CGs go over, in turn: each is allocated
// alloc units, holds them from its start, and twice as many after its step, the hard
// ratio, which takes the ladder's warning and kill at once.
var overKinds = []struct {
	key, logged string // nr1-load's --step key, and its field in nr1-load's log
	r           nr1.Resource
	alloc       int64
}{
	{"compute", "compute_dma_mb", nr1.ComputeDMAMemory, 2},
	{"cpu", "cpu_dma_mb", nr1.CPUDMAMemory, 1},
	{"queues", "queues", nr1.HypervisorQueue, 3},
}

const (
	// overAfter: an over-budget CG goes over this long after nr1-load starts, past the
	// container warm-up (2 s), with its pod Running in the API.
	overAfter = 5 * time.Second
	// overKillWithin bounds the time from going over to the container's exit.
	overKillWithin = 10 * time.Second
)

// overCase is one over-budget CG of TestNoFalseAction.
type overCase struct {
	after       string // the disruption it followed, or "before the disruptions"
	r           nr1.Resource
	alloc, over int64         // units allocated, held after going over
	offset      time.Duration // nr1-load's step
	pod         *corev1.Pod
	// The agent instances Ready when it was created and when its kill was seen.
	agentAtStart, agentAtKill string
	running                   time.Time            // its pod seen Running
	wentOver                  time.Time            // by nr1-load's log
	warned, killed            time.Time            // the Events' first timestamps (to the second)
	logged                    map[string]time.Time // actions, when the agent logged them taken
	exited                    time.Time            // the container's exit, from CRI
	exitCode                  int32
	failures                  []string
}

func (oc *overCase) fail(format string, args ...any) {
	oc.failures = append(oc.failures, fmt.Sprintf(format, args...))
}

// since formats the delay from going over to t, "-" when unknown.
func (oc *overCase) since(t time.Time) string {
	if t.IsZero() || oc.wentOver.IsZero() {
		return "-"
	}
	return t.Sub(oc.wentOver).Round(10 * time.Millisecond).String()
}

func (oc *overCase) line() string {
	name := "(not created)"
	if oc.pod != nil {
		name = oc.pod.Name
	}
	l := fmt.Sprintf("over-budget %s (%s): %s %d → %d", name, oc.after, oc.r.Name(), oc.alloc, oc.over)
	if !oc.wentOver.IsZero() {
		l += fmt.Sprintf(" at %s (step %v)", oc.wentOver.Local().Format("15:04:05.000"), oc.offset)
	}
	l += fmt.Sprintf("; NR1LimitExceeded %s, NR1Killed %s (Events, to the second); warning logged %s, kill logged %s; container exited %s (code %d)",
		oc.since(oc.warned), oc.since(oc.killed), oc.since(oc.logged["warn"]), oc.since(oc.logged["kill"]), oc.since(oc.exited), oc.exitCode)
	if !oc.running.IsZero() && !oc.wentOver.IsZero() && oc.running.After(oc.wentOver) {
		l += fmt.Sprintf("; Running seen only %v after going over", oc.running.Sub(oc.wentOver).Round(10*time.Millisecond))
	}
	if len(oc.failures) > 0 {
		l += "; FAILED: " + strings.Join(oc.failures, "; ")
	}
	return l
}

// poll runs cond every 250 ms until it returns nil or timeout passes, and returns its
// last error.
func poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// agentStarted is when the agent pod's containers last started (to the second).
func agentStarted(p *corev1.Pod) time.Time {
	var t time.Time
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Running != nil && s.State.Running.StartedAt.After(t) {
			t = s.State.Running.StartedAt.Time
		}
	}
	return t
}

// runOverBudget starts the i-th over-budget CG within its budget, lets it go over, waits
// for the agent to kill it, measures the delays and deletes it. What the agent did
// wrong is recorded in the case, not fatal, so that the test goes on.
func runOverBudget(t *testing.T, c kubernetes.Interface, node string, i int, after string, imageMB int64) *overCase {
	t.Helper()
	ctx := context.Background()
	k := overKinds[i%len(overKinds)]
	oc := &overCase{after: after, r: k.r, alloc: k.alloc, over: 2 * k.alloc}
	// After a kubelet restart, a CG is admitted once the agent's plugins are registered
	// again.
	if err := poll(60*time.Second, func() error { return checkNodeAdvertises(c, node) }); err != nil {
		oc.fail("the node does not advertise NR1: %v", err)
		return oc
	}
	agent, err := readyAgent(c)
	if err != nil {
		oc.fail("%v", err)
		return oc
	}
	oc.agentAtStart = agentInstance(agent)
	// Over only once the agent's own warm-up has passed as well (a replaced agent's), so
	// that the delay measured is the ladder's.
	oc.offset = overAfter
	if d := time.Until(agentStarted(agent).Add(enforce.DefaultPolicy().Warmup.Duration + 2*time.Second)); d > oc.offset {
		oc.offset = d.Round(100 * time.Millisecond)
	}
	var alloc, hold nr1.Amounts
	alloc[k.r], hold[k.r] = k.alloc, k.alloc
	alloc[nr1.DockerPartition] = imageMB + 1 // the image and nr1-load's status files
	hh := loadContainer("health-handler", append(holdArgs(hold), fmt.Sprintf("--step=%v:%s=%d", oc.offset, k.key, oc.over))...)
	hh.Resources = nr1Requests(alloc)
	grace, noToken := int64(1), false
	name := fmt.Sprintf("over-%d-%s", i, k.key)
	pods := c.CoreV1().Pods(noFalseNS)
	created, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: noFalseNS, Labels: map[string]string{"neureality.ai/compute-graph": name}},
		Spec: corev1.PodSpec{
			// Killed once and not started again: its actions are the ones counted.
			RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken: &noToken,
			Containers:                   []corev1.Container{hh},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		oc.fail("creating %s: %v", name, err)
		return oc
	}
	oc.pod = created
	defer func() {
		zero := int64(0)
		_ = pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err := poll(30*time.Second, func() error {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return nil
			case err != nil:
				return err
			}
			return fmt.Errorf("still there, phase %s", p.Status.Phase)
		}); err != nil {
			oc.fail("not deleted: %v", err)
		}
	}()

	var last *corev1.Pod
	if err := poll(60*time.Second, func() error {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		last = p
		if p.Status.Phase == corev1.PodPending {
			return fmt.Errorf("phase %s %s", p.Status.Phase, p.Status.Reason)
		}
		return nil
	}); err != nil {
		oc.fail("not Running: %v", err)
		return oc
	}
	oc.running = time.Now()
	if last.Status.Phase != corev1.PodRunning && last.Status.Reason != "" {
		oc.fail("not admitted: %s %s", last.Status.Reason, last.Status.Message)
		return oc
	}

	var evs []corev1.Event
	err = poll(time.Until(oc.running.Add(oc.offset+overKillWithin+10*time.Second)), func() error {
		evs = nr1Events(t, c, created)
		for _, ev := range evs {
			if ev.Reason == "NR1Killed" {
				return nil
			}
		}
		return fmt.Errorf("Events so far: %q", reasons(evs))
	})
	if a, aerr := readyAgent(c); aerr == nil {
		oc.agentAtKill = agentInstance(a)
		oc.logged = agentLogged(c, a.Name, name, created.CreationTimestamp.Add(-2*time.Second))
	}
	if err != nil {
		oc.fail("no NR1Killed: %v", err)
	}
	for _, ev := range evs {
		switch {
		case ev.Reason == "NR1LimitExceeded" && oc.warned.IsZero():
			oc.warned = ev.FirstTimestamp.Time
		case ev.Reason == "NR1Killed" && oc.killed.IsZero():
			oc.killed = ev.FirstTimestamp.Time
		}
	}
	h := holdings(t, c, created)
	if len(h) < 2 || !strings.Contains(h[1].line, fmt.Sprintf(" %s=%d ", k.logged, oc.over)) {
		oc.fail("nr1-load did not go over: %+v", h)
		return oc
	}
	oc.wentOver = h[1].at
	if err == nil {
		var term *corev1.ContainerStateTerminated
		if err := poll(15*time.Second, func() error {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, s := range p.Status.ContainerStatuses {
				if s.State.Terminated != nil {
					term = s.State.Terminated
					return nil
				}
			}
			return fmt.Errorf("container not terminated, phase %s", p.Status.Phase)
		}); err != nil {
			oc.fail("killed, but %v", err)
		} else {
			oc.exited, oc.exitCode = criFinishedAt(t, term.ContainerID), term.ExitCode
		}
	}
	switch {
	case oc.warned.IsZero():
		oc.fail("no NR1LimitExceeded")
	case !oc.killed.IsZero() && oc.killed.Before(oc.warned):
		oc.fail("killed (%s) before it was warned (%s)", oc.killed.Format("15:04:05"), oc.warned.Format("15:04:05"))
	}
	if !oc.killed.IsZero() && oc.killed.Sub(oc.wentOver) > overKillWithin {
		oc.fail("NR1Killed %v after going over, want within %v", oc.killed.Sub(oc.wentOver).Round(10*time.Millisecond), overKillWithin)
	}
	if !oc.exited.IsZero() {
		if d := oc.exited.Sub(oc.wentOver); d < 0 || d > overKillWithin {
			oc.fail("container exited %v after going over, want within %v", d.Round(10*time.Millisecond), overKillWithin)
		}
		if oc.exitCode != 143 {
			oc.fail("container ended with %d, want 143 (SIGTERM)", oc.exitCode)
		}
	}
	return oc
}

// agentLogged reads when the agent pod agentPod logged each action taken on pod (to the
// millisecond), in its log since since; a read that fails gives nothing.
func agentLogged(c kubernetes.Interface, agentPod, pod string, since time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	from := metav1.NewTime(since)
	b, err := c.CoreV1().Pods("nr1-system").GetLogs(agentPod, &corev1.PodLogOptions{SinceTime: &from}).DoRaw(context.Background())
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, `msg="enforcement action taken"`) || !strings.Contains(line, " pod="+pod+" ") {
			continue
		}
		var at time.Time
		var action string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "time="); ok {
				at, _ = time.Parse(time.RFC3339Nano, v)
			}
			if v, ok := strings.CutPrefix(f, "action="); ok {
				action = v
			}
		}
		if _, seen := out[action]; !seen && !at.IsZero() {
			out[action] = at
		}
	}
	return out
}

// checkOverBudget: every over-budget CG was warned and killed in time, and nothing else
// (the hard ratio skips the throttle), by its Events at the end of the test; the delays
// are logged as a table.
func checkOverBudget(t *testing.T, c kubernetes.Interface, overs []*overCase) {
	t.Helper()
	var table strings.Builder
	table.WriteString("over-budget CGs: delays from going over (nr1-load's log) to the agent's Events (to the second), its \"enforcement action taken\" log lines (written once an action is done: a kill's after the container stopped) and the container's exit (CRI)\n")
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  when\tresource\talloc → held\tstep\tNR1LimitExceeded\tNR1Killed\twarn logged\tkill logged\texited\t")
	for _, oc := range overs {
		fmt.Fprintf(tw, "  %s\t%s\t%d → %d\t%v\t%s\t%s\t%s\t%s\t%s\t\n", oc.after, oc.r.Short(), oc.alloc, oc.over, oc.offset,
			oc.since(oc.warned), oc.since(oc.killed), oc.since(oc.logged["warn"]), oc.since(oc.logged["kill"]), oc.since(oc.exited))
		for _, f := range oc.failures {
			t.Errorf("over-budget CG (%s): %s", oc.after, f)
		}
		if oc.pod == nil {
			continue
		}
		taken, other := actionCounts(nr1Events(t, c, oc.pod))
		if len(taken) != 2 || taken["warn"] != 1 || taken["kill"] != 1 || len(other) > 0 {
			t.Errorf("over-budget %s (%s): the agent's Events: actions %v, others %q; want one warning and one kill", oc.pod.Name, oc.after, taken, other)
		}
	}
	_ = tw.Flush()
	t.Log(table.String())
}

func mustReadyAgent(t *testing.T, c kubernetes.Interface) *corev1.Pod {
	t.Helper()
	agent, err := readyAgent(c)
	if err != nil {
		t.Fatal(err)
	}
	return agent
}

// checkMeasured compares what the agent measures of each CG with what it holds: DMA
// memory and queues exactly, the docker partition within the allocation.
func checkMeasured(t *testing.T, c kubernetes.Interface, cgs []*exactCG) {
	t.Helper()
	var last string
	ok := func() error {
		agent, err := readyAgent(c)
		if err != nil {
			return err
		}
		var s debugSnapshot
		if err := getJSON("http://"+agent.Status.PodIP+":9470/debug/cgs", &s); err != nil {
			return err
		}
		var bad []string
		for _, cg := range cgs {
			seen := s.CG(string(cg.pod.UID))
			if seen == nil {
				bad = append(bad, cg.name+" absent")
				continue
			}
			want := cg.alloc
			for _, r := range nr1.All {
				want[r] *= r.UnitBytes()
			}
			got := seen.Usage
			if got[nr1.DockerPartition] == 0 || got[nr1.DockerPartition] > want[nr1.DockerPartition] {
				bad = append(bad, fmt.Sprintf("%s docker partition %s MB of %d", cg.name, humanUnits(nr1.DockerPartition, got[nr1.DockerPartition]), cg.alloc[nr1.DockerPartition]))
			}
			got[nr1.DockerPartition], want[nr1.DockerPartition] = 0, 0
			if got != want {
				bad = append(bad, fmt.Sprintf("%s holds %v, the agent measures %v", cg.name, want, got))
			}
		}
		if len(bad) > 0 {
			last = strings.Join(bad, "; ")
			return fmt.Errorf("%s", last)
		}
		return nil
	}
	deadline := time.Now().Add(30 * time.Second) // the docker partition is measured every 10 s
	for ok() != nil {
		if time.Now().After(deadline) {
			t.Errorf("the agent does not measure what the CGs hold: %s", last)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Log("the agent measures every CG holding exactly its DMA memory and queues, within its docker partition")
}

// checkUntouched: no Event from the agent on any CG, every container still running and
// never restarted, every pod the one created.
func checkUntouched(t *testing.T, c kubernetes.Interface, cgs []*exactCG, timeline []string) {
	t.Helper()
	failed := false
	for _, cg := range cgs {
		if evs := nr1Events(t, c, cg.pod); len(evs) > 0 {
			failed = true
			sort.Slice(evs, func(i, j int) bool { return evs[i].FirstTimestamp.Before(&evs[j].FirstTimestamp) })
			count := map[string]int32{}
			for _, ev := range evs {
				count[ev.Reason] += max(ev.Count, 1)
			}
			var by []string
			for r, n := range count {
				by = append(by, fmt.Sprintf("%s×%d", r, n))
			}
			sort.Strings(by)
			t.Errorf("%s: Events from nr1-agent %s; the first at %s: %s", cg.name, strings.Join(by, " "),
				evs[0].FirstTimestamp.Format("15:04:05"), evs[0].Message)
		}
		p, err := c.CoreV1().Pods(noFalseNS).Get(context.Background(), cg.name, metav1.GetOptions{})
		if err != nil || p.UID != cg.pod.UID {
			failed = true
			t.Errorf("%s: the pod created is gone (evicted?): %v", cg.name, err)
			continue
		}
		for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if s.RestartCount != 0 {
				failed = true
				t.Errorf("%s/%s restarted %d times (last: %s)", cg.name, s.Name, s.RestartCount, lastTermination(s))
			}
		}
		if err := allRunning(p); err != nil {
			failed = true
			t.Errorf("not running: %v", err)
		}
	}
	if failed {
		t.Logf("disruptions:\n  %s", strings.Join(timeline, "\n  "))
	}
}

func lastTermination(s corev1.ContainerStatus) string {
	if term := s.LastTerminationState.Terminated; term != nil {
		return fmt.Sprintf("%s exit %d at %s", term.Reason, term.ExitCode, term.FinishedAt.Format("15:04:05"))
	}
	return "unknown"
}
