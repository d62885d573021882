// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

const adversaryNS = "nr1-adversary"

// adversary is a CG written to get more than it was given, and what the agent must make
// of it.
type adversary struct {
	name string
	args []string
	// want is what the agent must measure for the CG once it holds everything.
	want func(page int64) nr1.Usage
	// own, when set, is the cause of the CG's own uncertainty: its measure is a lower
	// bound the agent gives with that cause (a flood of fds a scan does not walk whole).
	own string
	// killed: over its allocation, so killed (by the ladder or at once); else left alone.
	killed bool
	// compute is its compute DMA allocation (MB) when not the ResNet-50's 3.
	compute nr1.Units
	// netAdmin: the pod may attach the simulated queue (tun's device) to an interface,
	// which a read of it needs to block; a real queue's read blocks without it.
	netAdmin bool
	pod      *corev1.Pod
}

// TestAdversaries runs CGs that hide what they hold or make measuring them costly, on
// the same node as a well-behaved CG and one that goes over at a known time:
//   - a flood of 400000 fds on one queue description beside its 7 queues (8 held), in
//     21 processes: more than a scan walks of one cgroup, so uncertain by its own doing
//     (fd-table), its 8 queues found first all the same, a lower bound over its booking;
//   - 60000 single-page mappings of compute DMA beside its 3 MB, within the 300 MB it
//     was given;
//   - 3 queue handles sent over a unix socket and closed, beside its 7 (10 held);
//   - 1000 O_PATH fds on the queue device beside its 7 queues (7 held, none extra);
//   - 2 queues held by reads blocked on them, their fds closed, beside its 7 (9 held);
//   - a worker moved into a child cgroup of its container, holding queues its main
//     process let go of, then the main process taking as many again (twice its 7).
//
// Each is measured exactly what it holds; the ones over are killed, the others left
// alone; the late CG is killed on time throughout; the agent's memory and sample time
// are logged under the floods.
func TestAdversaries(t *testing.T) {
	c := client(t)
	newNamespace(t, c, adversaryNS)
	agent := mustReadyAgent(t, c)
	const mb = 1 << 20
	advs := []*adversary{
		{name: "fd-flood", args: []string{"--compute-dma-mb=3", "--queues=7", "--dup-queues=19000", "--fork=20"},
			want: func(int64) nr1.Usage { return nr1.Usage{3 * mb, 0, 0, 8} }, own: view.CauseFDTable, killed: true},
		{name: "tiny-maps", args: []string{"--compute-dma-mb=3", "--queues=7", "--tiny-maps=60000"}, compute: 300,
			want: func(page int64) nr1.Usage { return nr1.Usage{nr1.Base(3*mb + 60000*page), 0, 0, 7} }},
		{name: "in-flight", args: []string{"--compute-dma-mb=3", "--queues=7", "--inflight-queues=3"},
			want: func(int64) nr1.Usage { return nr1.Usage{3 * mb, 0, 0, 10} }, killed: true},
		{name: "blocked", args: []string{"--compute-dma-mb=3", "--queues=7", "--blocked-queues=2"},
			want: func(int64) nr1.Usage { return nr1.Usage{3 * mb, 0, 0, 9} }, killed: true, netAdmin: true},
		{name: "path-only", args: []string{"--compute-dma-mb=3", "--queues=7", "--path-only-queues=1000"},
			want: func(int64) nr1.Usage { return nr1.Usage{3 * mb, 0, 0, 7} }},
		{name: "steady", args: []string{"--compute-dma-mb=3", "--queues=7"},
			want: func(int64) nr1.Usage { return nr1.Usage{3 * mb, 0, 0, 7} }},
	}
	page := int64(os.Getpagesize())
	// What the agent measures for each CG, read from before they start: one over
	// budget is killed 15 s after going over, and its measure must be caught before.
	seen := watchUsage(t, c)
	for _, a := range advs {
		p := loadPod(a.name, a.args...)
		if a.compute != 0 {
			p.Spec.Containers[0].Resources = nr1Requests(nr1.Amounts{a.compute, 0, 2392, 7})
		}
		if a.netAdmin {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}}
		}
		a.pod = faultPod(t, c, adversaryNS, p)
	}
	// The child-cgroup worker: its main process lets its 7 queues go at 40 s and opens 7
	// new ones at 60 s (time for the pods to start and the worker to move on a busy node);
	// the worker, moved below the container's cgroup first, keeps the
	// first 7 all along. The deep-cgroup worker the same, moved into a cgroup nested past
	// PATH_MAX, where no path reaches. Both moved as soon as they run.
	started := time.Now()
	mover := func(name string) *corev1.Pod {
		pod := loadPod(name, "--queues=7", "--fork=1", "--step=40s:queues=0", "--step=60s:queues=7")
		pod.Namespace = adversaryNS
		created := createPod(t, c, pod)
		diagnose(t, c, created)
		return created
	}
	child, deep := mover("child-cgroup"), mover("deep-cgroup")
	child, deep = running(t, c, child), running(t, c, deep)
	childCgroup(t, c, child, 1)
	removeDeep := childCgroup(t, c, deep, deepLevels)
	if time.Since(started) > 40*time.Second {
		t.Fatalf("the workers moved %v after their start, after their main processes let go", time.Since(started).Round(time.Second))
	}
	// The worker in its nested cgroup holds the first 7 for the CG when its main process
	// has let them go (40 s to 60 s).
	for _, pod := range []*corev1.Pod{child, deep} {
		eventually(t, 40*time.Second, pod.Name+": the worker's queues counted for the CG", func() error {
			if time.Since(started) < 45*time.Second {
				return fmt.Errorf("the main process lets its queues go at 40 s")
			}
			s, err := agentDebug(t, c)
			if err != nil {
				return err
			}
			cg := s.CG(string(pod.UID))
			if cg == nil || cg.Usage[nr1.HypervisorQueue] != 7 || cg.PerContainer["health-handler"][nr1.HypervisorQueue] != 7 {
				return fmt.Errorf("usage %+v", cg)
			}
			return nil
		})
	}
	late := faultPod(t, c, adversaryNS, loadPod("late-over", "--compute-dma-mb=3", "--queues=7", "--step=40s:queues=9"))
	lateStarted := time.Now()

	// Measured exactly what each holds, never more.
	for _, a := range advs {
		want := a.want(page)
		eventually(t, 60*time.Second, a.name+" measured", func() error {
			got := seen.of(string(a.pod.UID))
			if a.own != "" {
				got = seen.lowerOf(string(a.pod.UID), a.own)
			}
			for _, u := range got {
				for _, r := range nr1.All {
					if r != nr1.DockerPartition && u[r] > want[r] {
						return fmt.Errorf("measured %v, more than it holds (%v)", u, want)
					}
				}
			}
			for _, u := range got {
				u[nr1.DockerPartition] = 0
				if u == want {
					return nil
				}
			}
			return fmt.Errorf("measured %v, want %v", got, want)
		})
		t.Logf("%s: measured %v", a.name, want)
	}
	rss, hwm := agentMemory(t)
	s, err := agentDebug(t, c)
	if err != nil {
		t.Fatal(err)
	}
	// This kernel runs the BPF source; an agent that fell back to procfs here measures
	// what it must not (handles in flight are invisible to procfs).
	if s.Source != "bpf" {
		t.Errorf("the agent measures with %s, not bpf: see its log for why BPF was refused", s.Source)
	}
	t.Logf("under the floods: agent RSS %d MiB (peak %d MiB), one sample %v", rss>>20, hwm>>20, s.Took)

	for _, a := range advs {
		if a.killed {
			waitReason(t, c, a.pod, "NR1Killed", 60*time.Second)
		}
	}
	// At 60 s, its main process holding 7 again, each CG holds 14 of its 7.
	childKill := waitReason(t, c, child, "NR1Killed", 60*time.Second)
	deepKill := waitReason(t, c, deep, "NR1Killed", 60*time.Second)
	// The kill's effect, not its Event: killed, whatever it nests, the pod ends Failed.
	for _, pod := range []*corev1.Pod{child, deep} {
		eventually(t, 30*time.Second, pod.Name+" ended Failed", func() error {
			p, err := c.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
			if err == nil && p.Status.Phase != corev1.PodFailed {
				err = fmt.Errorf("phase %s", p.Status.Phase)
			}
			return err
		})
	}
	removeDeep()
	lateKill := waitReason(t, c, late, "NR1Killed", 90*time.Second)
	lateDelay := lateKill.FirstTimestamp.Sub(lateStarted.Add(40 * time.Second))
	if lateDelay > 25*time.Second {
		t.Errorf("late-over killed %v after going over, want within the ladder's 15 s and a few samples", lateDelay)
	}
	for _, a := range advs {
		if a.killed {
			continue
		}
		if r := reasons(nr1Events(t, c, a.pod)); r != "" {
			t.Errorf("%s holds its allocation and was acted on: %s", a.name, r)
		}
	}
	rss2, hwm2 := agentMemory(t)
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "agent memory\tRSS %d MiB\tpeak %d MiB\t\n", rss2>>20, hwm2>>20)
	fmt.Fprintf(tw, "child-cgroup killed\t%v after start\t\t\n", childKill.FirstTimestamp.Sub(started).Round(time.Second))
	fmt.Fprintf(tw, "deep-cgroup killed\t%v after start\t\t\n", deepKill.FirstTimestamp.Sub(started).Round(time.Second))
	fmt.Fprintf(tw, "late-over killed\t%v after going over\t\t\n", lateDelay.Round(time.Second))
	_ = tw.Flush()
	t.Logf("adversaries:\n%s", table.String())
	_ = agent
}

// childCgroup moves the CG's --fork worker into a cgroup it nests levels deep below
// the container's v2 cgroup (nestCgroups), and returns what removes the nest once the
// worker is gone (also at the test's end).
func childCgroup(t *testing.T, c kubernetes.Interface, pod *corev1.Pod, levels int) (remove func()) {
	t.Helper()
	var dir string
	var pids []int
	eventually(t, 30*time.Second, pod.Name+": container cgroup and worker", func() error {
		s, err := agentDebug(t, c)
		if err != nil {
			return err
		}
		cg := s.CG(string(pod.UID))
		if cg == nil || len(cg.Containers) == 0 || cg.Containers[0].Cgroup.V2 == "" || len(cg.Containers[0].PIDs) < 2 {
			return fmt.Errorf("not known yet: %+v", cg)
		}
		dir, pids = cg.Containers[0].Cgroup.V2, cg.Containers[0].PIDs
		return nil
	})
	worker := workerOf(t, pids)
	n, err := nestCgroups(dir, levels)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.remove)
	if err := n.move(worker); err != nil {
		t.Fatalf("%s: %v", pod.Name, err)
	}
	t.Logf("%s: worker %d moved %d levels below %s", pod.Name, worker, levels, dir)
	return n.remove
}

// workerOf picks nr1-load's --fork worker among the container's processes: the one
// whose command line names the worker mode.
func workerOf(t *testing.T, pids []int) int {
	t.Helper()
	for _, pid := range pids {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err == nil && bytes.Contains(b, []byte("__nr1-load-fork-worker")) {
			return pid
		}
	}
	t.Fatalf("no worker among %v", pids)
	return 0
}

// agentMemory reads the agent process's resident and peak resident memory on this node.
func agentMemory(t *testing.T) (rss, hwm int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", agentPID(t)))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		var kb int64
		if _, err := fmt.Sscanf(line, "VmRSS: %d kB", &kb); err == nil {
			rss = kb << 10
		}
		if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &kb); err == nil {
			hwm = kb << 10
		}
	}
	return rss, hwm
}

// usageSeen is every usage the agent's /debug/cgs showed for each CG (by UID), while
// certain, and as a lower bound by the cause of its uncertainty.
type usageSeen struct {
	mu    sync.Mutex
	byCG  map[string][]nr1.Usage
	lower map[string]map[string][]nr1.Usage
}

func (s *usageSeen) lowerOf(uid, cause string) []nr1.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lower[uid][cause])
}

func (s *usageSeen) of(uid string) []nr1.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.byCG[uid])
}

// watchUsage reads /debug/cgs every 200 ms until the test ends.
func watchUsage(t *testing.T, c kubernetes.Interface) *usageSeen {
	t.Helper()
	s := &usageSeen{byCG: map[string][]nr1.Usage{}, lower: map[string]map[string][]nr1.Usage{}}
	everyView(t, c, func(snap *debugSnapshot) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, cg := range snap.CGs {
			switch {
			case !cg.AllocationKnown:
			case cg.UsageUncertain == "" && !slices.Contains(s.byCG[cg.UID], cg.Usage):
				s.byCG[cg.UID] = append(s.byCG[cg.UID], cg.Usage)
			case cg.UsageUncertain != "":
				if s.lower[cg.UID] == nil {
					s.lower[cg.UID] = map[string][]nr1.Usage{}
				}
				if l := s.lower[cg.UID][cg.UncertainCause]; !slices.Contains(l, cg.Usage) {
					s.lower[cg.UID][cg.UncertainCause] = append(l, cg.Usage)
				}
			}
		}
	})
	return s
}

// everyView calls fn with the agent's /debug/cgs every 200 ms, from now until the test
// ends.
func everyView(t *testing.T, c kubernetes.Interface, fn func(*debugSnapshot)) {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if snap, err := agentDebug(t, c); err == nil {
				fn(snap)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}
