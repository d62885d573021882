// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/agent/act/enforce"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

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
	alloc       nr1.Units
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
	alloc, over nr1.Units     // units allocated, held after going over
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
func runOverBudget(t *testing.T, c kubernetes.Interface, node string, i int, after string, imageMB nr1.Units) *overCase {
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
	// And once the agent is Ready again: a restarted runtime is reconnected to within
	// its backoff, then seen by the readiness probe.
	var agent *corev1.Pod
	if err := poll(30*time.Second, func() (err error) { agent, err = readyAgent(c); return err }); err != nil {
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
		if oc.exitCode != 137 {
			oc.fail("container ended with %d, want 137: killed at once, a failure", oc.exitCode)
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
