// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/manifest"
)

// The bill benchmark's namespace.
const costNS = "nr1-cost"

// billCase is a state of the node whose bill is measured: its pods book nothing (the
// baseline), a little each, or the node's whole capacity between them, through the device
// plugin or DRA claims.
type billCase struct {
	name    string
	dra     bool
	booking string // "none", "small" or "full"
	prevent bool   // the budget gate on
}

var billCases = []billCase{
	{"baseline", false, "none", false},
	{"small-devicePlugin", false, "small", false}, {"small-devicePlugin-gate", false, "small", true},
	{"full-devicePlugin", false, "full", false},
	{"small-dra", true, "small", false}, {"small-dra-gate", true, "small", true},
	{"full-dra", true, "full", false},
}

// billProcesses are what the node runs for Kubernetes, whose CPU is the node's bill
// beside the agent's own.
var billProcesses = []string{"kubelet", "kube-apiserver", "etcd"}

// BenchmarkAgentCost is the node's NR1 bill: the CPU of the agent's process (user +
// system: the kernel's work for its iterators and syscalls included) and its resident
// memory, and the CPU of the kubelet, the API server and etcd, with NR1_COST_CGS
// (default 100) pods running: first pods booking nothing (the baseline), then CGs each
// booking a little (1 MB / 0 / 100 MB / 1 queue), then CGs booking the node's whole
// allocatable capacity between them, through the device plugin and then through DRA
// claims, each holding a part of what it booked, with nothing scraping or reading the
// agent; the small cases again with the budget gate on (-gate). Each iteration is one window of NR1_COST_WINDOW (default 20s); the metrics are
// the medians over the windows (-benchtime=5x: five). bill-%core is the agent's CPU and
// what the kubelet, the API server and etcd spend above the baseline. With
// NR1_COST_PROFILE set, CPU profiles of the agent and of the kubelet (10 s, after the
// windows; NR1_COST_AGENT_PROFILE_SECONDS and NR1_COST_KUBELET_PROFILE_SECONDS: a
// profile of an agent at rest needs a minute to say much) are written beside it,
// one per case.
//
// make bench-agent runs it on the local stack (the kubelet's resource health off, as the
// stack runs it); NR1_COST_CASES=full-devicePlugin,… runs some of the cases.
func BenchmarkAgentCost(b *testing.B) {
	c := client(b)
	n := envInt(b, "NR1_COST_CGS", 100)
	window, err := time.ParseDuration(envOr("NR1_COST_WINDOW", "20s"))
	if err != nil {
		b.Fatalf("NR1_COST_WINDOW: %v", err)
	}
	only := map[string]bool{}
	for name := range strings.SplitSeq(os.Getenv("NR1_COST_CASES"), ",") {
		if name != "" {
			only[name] = true
		}
	}
	var baseline map[string]float64
	for _, bc := range billCases {
		if len(only) > 0 && !only[bc.name] && bc.name != "baseline" {
			continue
		}
		b.Run(bc.name, func(b *testing.B) {
			if bc.dra {
				node := nodeName(b, c)
				b.Cleanup(func() { deleteNodeSlices(b, c, node) })
			}
			withDesign(b, c, design{name: bc.name, onChange: true, mode: map[bool]string{true: "dra"}[bc.dra], prevention: bc.prevent})
			newNamespace(b, c, costNS)
			b.Cleanup(func() { deleteNamespace(b, c, costNS) })
			booked, held := costCGs(b, c, n, costNS, bc)
			spent := agentCost(b, c, n, costNS, bc, booked, held, window)
			if bc.name == "baseline" {
				baseline = spent
				return
			}
			bill := spent["agent"]
			for _, p := range billProcesses {
				b.ReportMetric(spent[p]-baseline[p], p+"-above-baseline-%core")
				bill += spent[p] - baseline[p]
			}
			b.ReportMetric(bill, "bill-%core")
		})
	}
}

// deleteNamespace deletes a namespace and waits until it is gone.
func deleteNamespace(tb testing.TB, c kubernetes.Interface, name string) {
	tb.Helper()
	nss := c.CoreV1().Namespaces()
	eventually(tb, 3*time.Minute, "namespace "+name+" deleted", func() error {
		err := nss.Delete(context.Background(), name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("namespace %s still there (%w)", name, err)
	})
}

// agentCost measures the agent and the node's Kubernetes processes in windows, once the
// agent measures every CG, and returns the median %core of each ("agent" and
// billProcesses).
func agentCost(b *testing.B, c kubernetes.Interface, n int, ns string, bc billCase, booked, held nr1.Amounts, window time.Duration) map[string]float64 {
	agent := waitAgentSees(b, c, n, ns, bc.booking != "none", booked, held)
	id, err := agentContainerID(agent)
	if err != nil {
		b.Fatal(err)
	}
	pids := map[string]int{}
	if pids["agent"], err = pidOfContainer(id); err != nil {
		b.Fatal(err)
	}
	for _, p := range billProcesses {
		pids[p] = pidOf(b, p)
	}
	// What the node pays for the agent as it runs, not as it starts: its warm-ups (the
	// agent's 10 s, each container's 2 s), sampled at the interval, are over.
	up := processAge(b, pids["agent"])
	if up < settle {
		time.Sleep(settle - up)
	}
	b.Logf("%s: %d pods running, each booking %v and holding %v; processes %v; windows of %v", bc.name, n, booked, held, pids, window)

	cpu := map[string][]float64{}
	var rss, anon []float64
	for b.Loop() {
		t0, before := time.Now(), map[string]int64{}
		for name, pid := range pids {
			before[name] = cpuTicks(b, pid)
		}
		time.Sleep(window)
		secs := time.Since(t0).Seconds()
		for name, pid := range pids {
			cpu[name] = append(cpu[name], 100*float64(cpuTicks(b, pid)-before[name])/clockTicks/secs)
		}
		rss = append(rss, float64(statusKiB(b, pids["agent"], "VmRSS"))/1024)
		// The anonymous part (heap, stacks) is what the node cannot take back; the rest
		// is the binary's pages, page cache the kernel reclaims under pressure.
		anon = append(anon, float64(statusKiB(b, pids["agent"], "RssAnon"))/1024)
	}
	out := map[string]float64{}
	for name, v := range cpu {
		out[name] = median(v)
		b.ReportMetric(out[name], name+"-%core")
	}
	b.ReportMetric(median(rss), "agent-RSS-MiB")
	b.ReportMetric(float64(statusKiB(b, pids["agent"], "VmHWM"))/1024, "agent-peak-RSS-MiB")
	b.ReportMetric(median(anon), "agent-RSS-anon-MiB")
	b.Logf("%%core per window: %v; agent RSS MiB %.1f (anonymous %.1f)", cpu, rss, anon)
	if path := os.Getenv("NR1_COST_PROFILE"); path != "" {
		base := strings.TrimSuffix(path, ".pprof")
		if err := agentProfile(agent, base+"-"+bc.name+".pprof"); err != nil {
			b.Errorf("agent profile: %v", err)
		}
		if err := kubeletProfile(base + "-kubelet-" + bc.name + ".pprof"); err != nil {
			b.Errorf("kubelet profile: %v", err)
		}
		b.Logf("CPU profiles with %d pods (%s): %s-%s.pprof, %s-kubelet-%s.pprof", n, bc.name, base, bc.name, base, bc.name)
	}
	return out
}

// kubeletProfile writes a CPU profile of the kubelet (NR1_COST_KUBELET_PROFILE_SECONDS,
// 10 by default), read from its port on this node with the test's client certificate
// (the API server's node proxy refuses the local node's address).
func kubeletProfile(path string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return err
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return err
	}
	tlsCfg.InsecureSkipVerify = true
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	resp, err := hc.Get("https://127.0.0.1:10250/debug/pprof/profile?seconds=" + envOr("NR1_COST_KUBELET_PROFILE_SECONDS", "10"))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the kubelet's /debug/pprof/profile: %s", resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// costCGs runs n pods in ns: booking nothing, a little each (1 MB / 0 / 100 MB / 1
// queue), or the node's capacity between them, through the device plugin's
// extended resources or a DRA claim each, each CG holding a little (2 MB of compute DMA,
// 1 MB of CPU DMA, 2 queues and its image; a small one 1 / 0 / its image / 1), and
// returns what each books and holds.
func costCGs(b *testing.B, c kubernetes.Interface, n int, ns string, bc billCase) (booked, held nr1.Amounts) {
	image := nr1LoadImageMB(b) + 1 // the image and a writable layer
	switch bc.booking {
	case "small":
		booked, held = nr1.Amounts{1, 0, 100, 1}, nr1.Amounts{1, 0, image, 1}
	case "full":
		held = nr1.Amounts{2, 1, image, 2}
		node, err := c.CoreV1().Nodes().Get(context.Background(), nodeName(b, c), metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range nr1.All {
			q := node.Status.Capacity[corev1.ResourceName(r.Name())]
			booked[r] = nr1.Units(q.Value() / int64(n))
			if booked[r] < held[r] {
				b.Fatalf("%s: the node's %s split %d ways is %d each, less than the %d each CG holds", r.Name(), q.String(), n, booked[r], held[r])
			}
		}
	}
	var template *string
	if bc.dra && bc.booking != "none" {
		template = createTemplate(b, c, manifest.ClaimTemplate(ns, "cg", booked))
	}
	for i := range n {
		pod := bookingCG(ns, fmt.Sprintf("cg-%03d", i), booked, held, template)
		if bc.booking == "none" {
			pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
		}
		if _, err := c.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			b.Fatalf("pod %d: %v", i, err)
		}
	}
	return booked, held
}

func createTemplate(tb testing.TB, c kubernetes.Interface, tmpl *resourceapi.ResourceClaimTemplate) *string {
	tb.Helper()
	if _, err := c.ResourceV1().ResourceClaimTemplates(tmpl.Namespace).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	return &tmpl.Name
}

// bookingCG is a CG whose health-handler holds held and books booked: in its requests
// and limits, or, with a claim template, through the DRA claim made from it.
func bookingCG(ns, name string, booked, held nr1.Amounts, template *string) *corev1.Pod {
	hh := loadContainer("health-handler", holdArgs(held)...)
	grace := int64(1)
	noToken := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &grace, AutomountServiceAccountToken: &noToken},
	}
	if template != nil {
		hh.Resources.Claims = []corev1.ResourceClaim{{Name: manifest.RequestName}}
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: manifest.RequestName, ResourceClaimTemplateName: template}}
	} else {
		hh.Resources = nr1Requests(booked)
	}
	pod.Spec.Containers = []corev1.Container{hh}
	return pod
}

// waitAgentSees waits until every CG runs and the agent knows each one's booking and
// measures what it holds.
func waitAgentSees(b *testing.B, c kubernetes.Interface, n int, ns string, cgs bool, booked, held nr1.Amounts) *corev1.Pod {
	var agent *corev1.Pod
	eventually(b, time.Duration(n)*6*time.Second, fmt.Sprintf("%d CGs running and measured", n), func() error {
		pods, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		running := 0
		for i := range pods.Items {
			if pods.Items[i].Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running < n {
			return fmt.Errorf("%d of %d running", running, n)
		}
		if agent, err = readyAgent(c); err != nil || !cgs {
			return err
		}
		var s debugSnapshot
		if err := debugJSON(agent, "/debug/cgs?limit=500&namespace="+ns, &s); err != nil {
			return err
		}
		measured := 0
		for _, cg := range s.CGs {
			if cg.AllocationKnown && cg.Allocation == booked && cg.Usage[nr1.ComputeDMAMemory] == nr1.ComputeDMAMemory.InBase(held[nr1.ComputeDMAMemory]) &&
				cg.Usage[nr1.HypervisorQueue] == nr1.HypervisorQueue.InBase(held[nr1.HypervisorQueue]) {
				measured++
			}
		}
		if measured < n {
			return fmt.Errorf("%d of %d with their booking known and measured at what they hold", measured, n)
		}
		return nil
	})
	return agent
}

// settle is how long the agent runs before it is measured.
const settle = 60 * time.Second

// processAge is how long the process has run.
func processAge(b *testing.B, pid int) time.Duration {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// starttime is the 20th field after the command (22nd of the line), in clock ticks
	// since boot.
	f := strings.Fields(string(s[bytes.LastIndexByte(s, ')')+1:]))
	start, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano()) - time.Duration(start)*time.Second/clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times on every Linux architecture.
const clockTicks = 100

// cpuTicks is the process's user + system time so far, its exited threads included.
func cpuTicks(b *testing.B, pid int) int64 {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's closing parenthesis: state is the first, utime the
	// 12th, stime the 13th.
	f := strings.Fields(string(s[bytes.LastIndexByte(s, ')')+1:]))
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return u + st
}

// statusKiB is a kB field of /proc/PID/status, such as VmRSS.
func statusKiB(b *testing.B, pid int, field string) int64 {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(s)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("/proc/%d/status %s: %q", pid, field, v)
			}
			return kb
		}
	}
	b.Fatalf("/proc/%d/status: no %s", pid, field)
	return 0
}

// pidOf is the one process whose comm is name.
func pidOf(b *testing.B, name string) int {
	dirs, _ := os.ReadDir("/proc")
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(comm)) == name {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		b.Fatalf("processes named %s: %v", name, pids)
	}
	return pids[0]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(b *testing.B, name string, def int) int {
	v, err := strconv.Atoi(envOr(name, strconv.Itoa(def)))
	if err != nil || v <= 0 {
		b.Fatalf("%s: want a positive integer, got %q", name, os.Getenv(name))
	}
	return v
}

// agentProfile writes a 10 s CPU profile of the agent, read from its debug listener.
func agentProfile(agent *corev1.Pod, path string) error {
	seconds := envOr("NR1_COST_AGENT_PROFILE_SECONDS", "10")
	d, err := time.ParseDuration(seconds + "s")
	if err != nil {
		return fmt.Errorf("NR1_COST_AGENT_PROFILE_SECONDS=%q: %w", seconds, err)
	}
	hc, err := debugClient(agent, d+30*time.Second)
	if err != nil {
		return err
	}
	resp, err := hc.Get(debugURL("/debug/pprof/profile?seconds=" + seconds))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/debug/pprof/profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
