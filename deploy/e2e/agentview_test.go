// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

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
		var states []string
		for i := range pods.Items {
			states = append(states, podState(&pods.Items[i]))
		}
		return nil, fmt.Errorf("%d of %d agent pods ready: %s", len(ready), len(pods.Items), strings.Join(states, "; "))
	}
	return ready[0], nil
}

// podState says where a pod is, so that a test that waited for it in vain says why.
func podState(p *corev1.Pod) string {
	s := fmt.Sprintf("%s (uid %.8s) %s", p.Name, p.UID, p.Status.Phase)
	if p.DeletionTimestamp != nil {
		s += fmt.Sprintf(", deleting since %s", time.Since(p.DeletionTimestamp.Time).Round(time.Second))
	}
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		s += fmt.Sprintf(", %s ready=%v restarts=%d", cs.Name, cs.Ready, cs.RestartCount)
		switch st := cs.State; {
		case st.Waiting != nil:
			s += fmt.Sprintf(" waiting %s %q", st.Waiting.Reason, st.Waiting.Message)
		case st.Terminated != nil:
			s += fmt.Sprintf(" terminated %s exit %d %q", st.Terminated.Reason, st.Terminated.ExitCode, st.Terminated.Message)
		}
		if lt := cs.LastTerminationState.Terminated; lt != nil {
			s += fmt.Sprintf(" (last: %s exit %d)", lt.Reason, lt.ExitCode)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s += fmt.Sprintf(", %s: %s", c.Type, c.Message)
		}
	}
	return s
}

// logAgentsIfFailed, deferred with failedBefore the test's t.Failed() at the defer, logs
// the agents when the test failed since: a Fatal that gave up waiting on them runs the
// deferred call on its way out. A test that had failed before, and is waiting for the
// agent on its way out, is not made to bury what failed under the agents' logs.
func logAgentsIfFailed(t testing.TB, c kubernetes.Interface, failedBefore bool) {
	if t.Failed() && !failedBefore {
		logAgents(t, c)
	}
}

// logAgents logs the last lines of every agent pod's log, its previous run's too: what a
// test that gave up waiting for the agent needs to say why.
func logAgents(t testing.TB, c kubernetes.Interface) {
	t.Helper()
	pods, err := c.CoreV1().Pods("nr1-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=nr1-agent"})
	if err != nil {
		t.Logf("agent pods: %v", err)
		return
	}
	logKubeletOnPlugins(t)
	tail := int64(40)
	for _, p := range pods.Items {
		for _, previous := range []bool{true, false} {
			raw, err := c.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail, Previous: previous}).DoRaw(context.Background())
			if err != nil {
				continue
			}
			t.Logf("agent %s, %s run, last %d lines:\n%s", podState(&p), map[bool]string{true: "previous", false: "current"}[previous], tail, raw)
		}
	}
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
	if err := debugJSON(agent, "/debug/cgs?limit=500", &s); err != nil {
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
func overBy(usage nr1.Usage, alloc nr1.Amounts) string {
	var over []string
	for _, r := range nr1.All {
		if usage[r] > r.InBase(alloc[r]) {
			over = append(over, fmt.Sprintf("%s %s of %d %s", r, humanUnits(r, usage[r]), alloc[r], r.Unit()))
		}
	}
	return strings.Join(over, ", ")
}

func humanUnits(r nr1.Resource, v nr1.Base) string {
	if r.UnitBytes() == 1 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(r.InUnits(v), 'f', 2, 64)
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

// logKubeletOnPlugins logs the kubelet's last lines about its plugins (registration,
// the device plugins', the DRA driver's) and the agent's pod, from the local stack's log.
func logKubeletOnPlugins(t testing.TB) {
	t.Helper()
	audit := os.Getenv("NR1_AUDIT_LOG")
	if audit == "" {
		return
	}
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(audit), "kubelet.log"))
	if err != nil {
		t.Logf("the kubelet's log: %v", err)
		return
	}
	var lines []string
	for line := range strings.Lines(string(raw)) {
		l := strings.ToLower(line)
		if strings.Contains(l, "plugin") || strings.Contains(l, "nr1-agent") || strings.Contains(l, "neureality") {
			lines = append(lines, strings.TrimRight(line, "\n"))
		}
	}
	lines = lines[max(0, len(lines)-40):]
	t.Logf("the kubelet on plugins and the agent, last %d lines:\n%s", len(lines), strings.Join(lines, "\n"))
}
