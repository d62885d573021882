// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/agent/view"
)

const floodNS = "nr1-flood"

// The flood: so many processes, each holding so many fds on /dev/null, ten million in
// all. A container's fd limit is the runtime's (20000 on the local stack): past it, a
// pod floods with processes (each of which nr1-load keeps a pidfd of).
const (
	floodFDs   = 18_000
	floodProcs = 10_000_000/floodFDs + 1
)

// TestAFloodingNeighbourSlowsNobody runs, with the agent held to its CPU request (its
// limit set to it), a CG holding ten million ordinary descriptors beside a CG that stays
// within its booking and one that goes over it. Walking the flood is the flooder's cost:
// the CG going over is acted on within 30 s, neither it nor the steady one is ever
// uncertain (every scan reads them whole), the flooder is uncertain by its own doing
// only (fd-table) and never killed, and the agent's memory stays within 64 MiB.
func TestAFloodingNeighbourSlowsNobody(t *testing.T) {
	c := client(t)
	holdAgentToItsCPURequest(t, c)

	flooder := floodBeside(t, c)
	watch := watchCauses(t, c)

	steady := faultPod(t, c, floodNS, loadPod("steady", "--compute-dma-mb=3", "--queues=7"))
	overAt := 12 * time.Second
	over := faultPod(t, c, floodNS, loadPod("over", "--compute-dma-mb=3", "--queues=7",
		fmt.Sprintf("--step=%s:queues=10", overAt)))

	eventually(t, 60*time.Second, "the flooder seen uncertain by its own doing", func() error {
		if causes := watch.of(flooder.UID); causes[view.CauseFDTable] == 0 {
			return fmt.Errorf("its causes so far: %v", causes)
		}
		return nil
	})
	var wentOver time.Time
	eventually(t, overAt+10*time.Second, "over holding 10 queues", func() error {
		at, ok := podLogLineAt(t, c, over, "holding", 2)
		if !ok {
			return fmt.Errorf("not over yet")
		}
		wentOver = at
		return nil
	})
	acted := firstAction(t, c, over, 30*time.Second)
	after := acted.Sub(wentOver)
	t.Logf("over: went over at %s (its log), acted on at %s, %v after (negative: before its log said so)", wentOver.Format(time.TimeOnly), acted.Format(time.TimeOnly), after.Round(time.Millisecond))
	if after > 30*time.Second {
		t.Errorf("over acted on %v after going over, want within 30 s", after)
	}

	// A while more of the flood, the others judged throughout.
	time.Sleep(10 * time.Second)
	for _, p := range []*corev1.Pod{steady, over} {
		for cause, n := range watch.of(p.UID) {
			t.Errorf("%s uncertain (%s) in %d samples beside the flood: the flooder's cost fell on it", p.Name, cause, n)
		}
	}
	for cause := range watch.of(flooder.UID) {
		if !view.OwnCause(cause) {
			t.Errorf("the flooder uncertain by the node's cause %s: its cost is its own", cause)
		}
	}
	for _, ev := range nr1Events(t, c, flooder) {
		if ev.Reason == "NR1Killed" || ev.Reason == "NR1Evicted" {
			t.Errorf("the flooder, within its booking, %s: %s", ev.Reason, ev.Message)
		}
	}
	if r := reasons(nr1Events(t, c, steady)); r != "" {
		t.Errorf("steady holds its booking and was acted on: %s", r)
	}
	rss, hwm := agentMemory(t)
	throttled := agentThrottled(t)
	t.Logf("under the flood: agent RSS %d MiB (peak %d MiB), CPU %s; samples %s", rss>>20, hwm>>20, throttled, watch.samples())
	if hwm > 64<<20 {
		t.Errorf("the agent's peak RSS %d MiB under the flood, want at most 64 MiB", hwm>>20)
	}
}

// floodBeside starts the flooder, a CG holding ten million ordinary fds, in a namespace of
// its own, and waits until all of them are held.
func floodBeside(tb testing.TB, c kubernetes.Interface) *corev1.Pod {
	tb.Helper()
	newNamespace(tb, c, floodNS)
	flooder := loadPod("flooder", "--queues=1", "--null-fds="+strconv.Itoa(floodFDs), "--fork="+strconv.Itoa(floodProcs-1))
	flooder.Namespace = floodNS
	created, err := c.CoreV1().Pods(floodNS).Create(context.Background(), flooder, metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	eventually(tb, 3*time.Minute, "the flood in place", func() error {
		if _, ok := podLogLineAt(tb, c, created, fmt.Sprintf("holding compute_dma_mb=0 cpu_dma_mb=0 queues=1 write_mb=0 workers=%d", floodProcs-1), 1); !ok {
			return fmt.Errorf("the flooder's workers not all started")
		}
		return nil
	})
	procs, fds := podFDs(tb, created)
	tb.Logf("the flood: %d processes, %d fds in one", procs, fds)
	if procs < floodProcs || fds < floodFDs {
		tb.Fatalf("the flood: %d processes, %d fds in one; want %d of %d", procs, fds, floodProcs, floodFDs)
	}
	return created
}

// holdAgentToItsCPURequest sets the agent's CPU limit to its request, restarting it,
// and takes the limit away again (restarting it) when the test ends: its CPU is then
// what the node guarantees it, however idle the node.
func holdAgentToItsCPURequest(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	dss := c.AppsV1().DaemonSets("nr1-system")
	ds, err := dss.Get(ctx, "nr1-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res := ds.Spec.Template.Spec.Containers[0].Resources
	req, ok := res.Requests[corev1.ResourceCPU]
	if !ok {
		t.Fatal("the agent requests no CPU")
	}
	if _, limited := res.Limits[corev1.ResourceCPU]; limited {
		t.Fatalf("the agent's CPU is limited already: %v", res.Limits)
	}
	patch := func(p string) {
		old := mustReadyAgent(t, c).UID
		if _, err := dss.Patch(ctx, "nr1-agent", types.JSONPatchType, []byte(p), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		awaitNewAgent(t, c, old)
	}
	t.Cleanup(func() { patch(`[{"op":"remove","path":"/spec/template/spec/containers/0/resources/limits/cpu"}]`) })
	patch(fmt.Sprintf(`[{"op":"add","path":"/spec/template/spec/containers/0/resources/limits/cpu","value":%q}]`, req.String()))
	t.Logf("the agent's CPU limited to its request, %s", req.String())
}

// agentThrottled reads the CPU the agent's cgroup may use and how often the kernel
// held it back, failing the test if it may use more than a tenth of a core.
func agentThrottled(t *testing.T) string {
	t.Helper()
	pid := agentPID(t)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		var quota, stat string
		switch {
		case f[0] == "0" && f[1] == "":
			dir := filepath.Join("/sys/fs/cgroup", f[2])
			quota, stat = readTrim(filepath.Join(dir, "cpu.max")), readTrim(filepath.Join(dir, "cpu.stat"))
		case strings.Contains(","+f[1]+",", ",cpu,"):
			dir := filepath.Join("/sys/fs/cgroup", f[1], f[2])
			quota = readTrim(filepath.Join(dir, "cpu.cfs_quota_us")) + " " + readTrim(filepath.Join(dir, "cpu.cfs_period_us"))
			stat = readTrim(filepath.Join(dir, "cpu.stat"))
		default:
			continue
		}
		q := strings.Fields(quota)
		if len(q) == 2 {
			n, err1 := strconv.ParseFloat(q[0], 64)
			d, err2 := strconv.ParseFloat(q[1], 64)
			if err1 == nil && err2 == nil && d > 0 && n/d <= 0.1 {
				return fmt.Sprintf("quota %s, %s", quota, strings.Join(strings.Fields(stat), " "))
			}
		}
		if quota != " " && quota != "" {
			t.Fatalf("the agent's CPU quota is %q, not its request", quota)
		}
	}
	t.Fatalf("no CPU quota found for the agent (pid %d): %s", pid, b)
	return ""
}

func readTrim(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// agentPID is the agent process's PID on this node.
func agentPID(t *testing.T) int {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range dirs {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == "nr1-agent" {
			pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			if err == nil {
				return pid
			}
		}
	}
	t.Fatal("no nr1-agent process on this node")
	return 0
}

// podFDs counts the processes of pod's containers, found through their cgroup, and the
// fds of the first of them holding a flood's.
func podFDs(tb testing.TB, pod *corev1.Pod) (procs, fds int) {
	tb.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(strings.ReplaceAll(string(b), "_", "-"), string(pod.UID)) {
			continue
		}
		procs++
		if fds < floodFDs { // the pod's pause process holds few
			entries, _ := os.ReadDir(filepath.Join(filepath.Dir(p), "fd"))
			fds = max(fds, len(entries))
		}
	}
	return procs, fds
}

// firstAction waits up to timeout for the agent's first action on pod and returns its
// time.
func firstAction(t *testing.T, c kubernetes.Interface, pod *corev1.Pod, timeout time.Duration) time.Time {
	t.Helper()
	var at time.Time
	eventually(t, timeout, pod.Name+": acted on", func() error {
		for _, ev := range nr1Events(t, c, pod) {
			switch ev.Reason {
			case "NR1LimitExceeded", "NR1Throttled", "NR1Killed", "NR1Evicted", "NR1OpenRefused":
				if e := eventTime(ev); at.IsZero() || e.Before(at) {
					at = e
				}
			}
		}
		if at.IsZero() {
			return fmt.Errorf("events so far: %s", reasons(nr1Events(t, c, pod)))
		}
		return nil
	})
	return at
}

// causesSeen is every cause of uncertainty the agent's /debug/cgs gave each CG (by UID)
// while it watched, in how many samples, and how long each sample took.
type causesSeen struct {
	mu    sync.Mutex
	byCG  map[types.UID]map[string]int
	taken map[time.Time]time.Duration
}

func (s *causesSeen) of(uid types.UID) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for c, n := range s.byCG[uid] {
		out[c] = n
	}
	return out
}

// samples says how many samples were read and the longest one's time.
func (s *causesSeen) samples() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var longest time.Duration
	for _, d := range s.taken {
		longest = max(longest, d)
	}
	return fmt.Sprintf("%d read, the longest %v", len(s.taken), longest.Round(time.Millisecond))
}

// watchCauses reads the agent's view every 200 ms until the test ends.
func watchCauses(t *testing.T, c kubernetes.Interface) *causesSeen {
	t.Helper()
	s := &causesSeen{byCG: map[types.UID]map[string]int{}, taken: map[time.Time]time.Duration{}}
	everyView(t, c, func(snap *debugSnapshot) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, again := s.taken[snap.Taken]; again {
			return
		}
		s.taken[snap.Taken] = snap.Took
		for _, cg := range snap.CGs {
			if cg.UsageUncertain == "" {
				continue
			}
			uid := types.UID(cg.UID)
			if s.byCG[uid] == nil {
				s.byCG[uid] = map[string]int{}
			}
			s.byCG[uid][cg.UncertainCause]++
		}
	})
	return s
}
