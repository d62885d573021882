// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/neureality-sdk/nr1-agent/cli/agents"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/manifest"
)

func newExplain(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "explain POD",
		Short: "A CG's enforcement story: allocation, usage, every NR1 Event in order, and what happens next",
		Long: `Tells what nr1-agent knows and did about one CG (pod): what it was allocated and holds
of each NR1 resource, where its enforcement ladder stands (over since when, steps taken,
the throttle), every NR1 Event on the pod oldest first with its ladder step, and what
happens next if nothing changes.`,
		Example: `  # Pod hog of namespace ml
  kubectl nr1 explain -n ml hog

  # A pod of the kubeconfig context's namespace
  kubectl nr1 explain resnet50`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completePods,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			pod, err := c.Pods(ns).Get(ctx, args[0], metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("pod %s/%s: %w", ns, args[0], err)
			}
			events, err := c.Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
				"involvedObject.kind": "Pod", "involvedObject.name": pod.Name, "involvedObject.uid": string(pod.UID),
			}.String()})
			if err != nil {
				return fmt.Errorf("events of pod %s/%s: %w", ns, pod.Name, err)
			}
			s := story{pod: pod, events: events.Items, now: o.now()}
			if len(pod.Status.ResourceClaimStatuses) > 0 {
				rc, err := o.claims()
				if err != nil {
					return err
				}
				for _, st := range pod.Status.ResourceClaimStatuses {
					if st.ResourceClaimName == nil {
						continue
					}
					// What the claims booked is shown only when the agent has no figures:
					// a claim that cannot be read is said, not fatal.
					cl, err := rc.ResourceClaims(ns).Get(ctx, *st.ResourceClaimName, metav1.GetOptions{})
					if err != nil {
						fmt.Fprintf(o.errOut, "warning: claim %s/%s of pod %s: %v\n", ns, *st.ResourceClaimName, pod.Name, err)
						continue
					}
					s.claims = append(s.claims, *cl)
				}
			}
			if pod.Spec.NodeName != "" {
				agentsOn, err := o.source(c).Agents(ctx, pod.Spec.NodeName)
				switch {
				case err != nil:
					s.agentErr = err.Error()
				case len(agentsOn) == 0:
					s.agentErr = fmt.Sprintf("no nr1-agent runs on node %s", pod.Spec.NodeName)
				default:
					s.node = o.source(c).Read(ctx, &agentsOn[0])
				}
			}
			return s.write(o.out)
		},
	}
}

// story is what explain tells about one pod.
type story struct {
	pod      *corev1.Pod
	claims   []resourceapi.ResourceClaim // the pod's, in DRA mode
	events   []corev1.Event
	node     *agents.Node // the agent's report of the pod's node; nil when unread
	agentErr string
	now      time.Time
}

func (s story) cg() *agents.CG {
	if s.node == nil {
		return nil
	}
	for _, c := range s.node.CGs {
		if c.Namespace == s.pod.Namespace && c.Pod == s.pod.Name {
			return c
		}
	}
	return nil
}

func (s story) write(w io.Writer) error {
	p := s.pod
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Pod:\t%s/%s (uid %s)\n", p.Namespace, p.Name, p.UID)
	fmt.Fprintf(tw, "Phase:\t%s\n", p.Status.Phase)
	fmt.Fprintf(tw, "Node:\t%s\n", or(p.Spec.NodeName, "<not scheduled>"))
	switch {
	case s.node == nil && s.agentErr != "":
		fmt.Fprintf(tw, "Agent:\t<unknown>: %s\n", s.agentErr)
	case s.node == nil:
	case s.node.Error != "":
		fmt.Fprintf(tw, "Agent:\t%s: <unknown>: %s\n", s.node.Agent, s.node.Error)
	default:
		fmt.Fprintf(tw, "Agent:\t%s, enforcement mode %s\n", s.node.Agent, or(s.node.Mode, "<unknown>"))
	}
	for _, c := range p.Status.ContainerStatuses {
		fmt.Fprintf(tw, "Container %s:\t%s\n", c.Name, containerState(c, s.now))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	cg := s.cg()
	var e *agents.Enforcement
	if cg != nil {
		e = cg.EnforcementOf(string(p.UID))
	}
	fmt.Fprintln(w)
	s.writeResources(w, cg, e)
	if e != nil && e.Throttled {
		fmt.Fprintln(w, "\nThrottle: attached: new opens of NR1 devices by the CG's processes are refused.")
	}
	if cg != nil && cg.Gate != nil {
		fmt.Fprintf(w, "\nGate: the kernel holds the CG to the %g queues it booked: it holds %g; %g opens refused.\n", cg.Gate.Booked, cg.Gate.Held, cg.Gate.Refused)
	}
	fmt.Fprintln(w)
	s.writeEvents(w)
	fmt.Fprintln(w)
	_, err := fmt.Fprintf(w, "Next: %s\n", s.next(cg, e))
	return err //nolint:wrapcheck // the command's output
}

func (s story) writeResources(w io.Writer, cg *agents.CG, e *agents.Enforcement) {
	switch {
	case cg == nil && s.ended():
		fmt.Fprintf(w, "Resources: the pod has ended (%s): the agent measures running CGs only.%s\n", s.pod.Status.Phase, s.booked())
		return
	case cg == nil && s.agentRead():
		fmt.Fprintf(w, "Resources: <unknown>: the agent's latest sample has no such pod yet (just started, or not running).%s\n", s.booked())
		return
	case cg == nil:
		fmt.Fprintf(w, "Resources: <unknown>: the pod's agent could not be read.%s\n", s.booked())
		return
	case cg.AllocationUnknown:
		fmt.Fprintln(w, "Resources: <unknown>: the agent does not know this pod's allocation (not in the kubelet's answer yet, an answer too old, or Allocate annotations that disagree); it is not measured against one, nor acted on")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tALLOCATED\tUSED\tRATIO\tLADDER")
	for _, r := range nr1.All {
		used := amount(cg.Usage[r])
		if cg.UsageUncertain {
			used = "<uncertain>"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Short(), withUnit(cg.Allocation[r], r), withUnit2(used, r), ratio(cg.Ratio[r]), s.rung(e, r))
	}
	_ = tw.Flush()
	if cg.UsageUncertain {
		fmt.Fprintln(w, "The agent's last scan could not read all of the CG's processes in its time: what it holds is at least what was read, and is acted on only when even that is over.")
	}
}

// rung tells where the ladder of r stands.
func (s story) rung(e *agents.Enforcement, r nr1.Resource) string {
	if e == nil || e.Rungs[r].Over.IsZero() {
		return "-"
	}
	g := e.Rungs[r]
	out := fmt.Sprintf("over since %s, %d step%s taken", s.when(g.Over), g.Steps, plural(g.Steps))
	if !g.ResetAt.IsZero() {
		out += fmt.Sprintf("; back under, ladder resets at %s", s.when(g.ResetAt))
	}
	if g.Next != "" {
		out += fmt.Sprintf("; next %s at %s", g.Next, s.when(g.NextAt))
	}
	return out
}

// steps name the ladder step each NR1 Event reason reports.
var steps = map[string]string{
	"NR1LimitExceeded":     "warn",
	"NR1Killed":            "kill",
	"NR1Evicted":           "evict",
	"NR1EnforcementFailed": "failed",
	"NR1BadAnnotation":     "-",
	"NR1OpenRefused":       "refused",
}

func step(ev corev1.Event) string {
	switch ev.Reason {
	case "NR1Throttled":
		if ev.Type == corev1.EventTypeNormal {
			return "unthrottle"
		}
		return "throttle"
	case "NR1EnforcementDryRun":
		// "dry-run, would kill: …"
		if _, rest, ok := strings.Cut(ev.Message, "would "); ok {
			if k, _, ok := strings.Cut(rest, ":"); ok {
				return "(" + k + ")"
			}
		}
		return "(dry-run)"
	}
	return steps[ev.Reason]
}

func (s story) writeEvents(w io.Writer) {
	var evs []corev1.Event
	for _, ev := range s.events {
		if strings.HasPrefix(ev.Reason, "NR1") {
			evs = append(evs, ev)
		}
	}
	if len(evs) == 0 {
		fmt.Fprintln(w, "Events: none from nr1-agent.")
		return
	}
	sort.SliceStable(evs, func(i, j int) bool { return first(evs[i]).Before(first(evs[j])) })
	fmt.Fprintln(w, "Events (oldest first):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TIME\tSTEP\tTYPE\tREASON\tMESSAGE")
	for _, ev := range evs {
		msg := ev.Message
		if ev.Count > 1 {
			msg += fmt.Sprintf(" (x%d, last %s)", ev.Count, s.when(last(ev)))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", s.when(first(ev)), step(ev), ev.Type, ev.Reason, msg)
	}
	_ = tw.Flush()
}

// next says what happens if nothing changes.
func (s story) next(cg *agents.CG, e *agents.Enforcement) string {
	switch {
	case cg == nil && s.ended():
		return "nothing: the pod has ended."
	case cg == nil && s.agentRead():
		return "nothing until the agent samples the pod: it is neither measured nor acted on before."
	case cg == nil:
		return "<unknown>: the pod's agent could not be read."
	case cg.AllocationUnknown:
		return "nothing: the agent does not act on a CG whose allocation it does not know."
	case e != nil && !e.Ended.IsZero():
		return fmt.Sprintf("nothing: the CG was ended (killed or evicted) at %s and is left alone until one of its containers starts again, with a new ladder.", s.when(e.Ended))
	}
	var soonest *agents.Rung
	var at nr1.Resource
	if e != nil {
		for _, r := range nr1.All {
			if g := &e.Rungs[r]; g.Next != "" && (soonest == nil || g.NextAt.Before(soonest.NextAt)) {
				soonest, at = g, r
			}
		}
	}
	dry := s.node != nil && s.node.Mode == "dry-run"
	over := false
	for _, r := range nr1.All {
		if v := float64(cg.Ratio[r]); !math.IsNaN(v) && v > 1 {
			over = true
		}
	}
	switch {
	case soonest != nil && dry:
		return fmt.Sprintf("the node is in dry-run: an Event saying it would %s at %s, for %s; nothing is done to the CG.", soonest.Next, s.when(soonest.NextAt), at.Short())
	case soonest != nil:
		return fmt.Sprintf("%s at %s, for %s (sooner, the ladder's last step, if it reaches the hard ratio).", soonest.Next, s.when(soonest.NextAt), at.Short())
	case e != nil && e.Throttled:
		return "the throttle is lifted once the CG has stayed back under its allocation for the policy's hold."
	case over:
		return "nothing: the CG is over, but no ladder is under way (exempt, in warm-up, or its usage or allocation not yet certain)."
	default:
		return "nothing: the CG is within its allocation."
	}
}

func (s story) ended() bool {
	return s.pod.Status.Phase == corev1.PodSucceeded || s.pod.Status.Phase == corev1.PodFailed
}

func (s story) agentRead() bool { return s.node != nil && s.node.Error == "" }

// booked is what the pod books of each NR1 resource, said when the agent's figures
// are missing: the device plugin's requests summed over its containers, and what its
// claims of the NR1's DRA driver consumed.
func (s story) booked() string {
	var total nr1.Amounts
	for _, r := range nr1.All {
		for _, c := range s.pod.Spec.Containers {
			if q, ok := c.Resources.Requests[corev1.ResourceName(r.Name())]; ok {
				total[r] += nr1.Units(q.Value())
			}
		}
	}
	for _, cl := range s.claims {
		if cl.Status.Allocation == nil {
			continue
		}
		for _, res := range cl.Status.Allocation.Devices.Results {
			if res.Driver != nr1.DRADriver {
				continue
			}
			if a, err := manifest.Amounts(res.ConsumedCapacity); err == nil {
				total = nr1.Add(total, a)
			}
		}
	}
	var parts []string
	for _, r := range nr1.All {
		if n := total[r]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", r.Short(), withUnit2(fmt.Sprint(n), r)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " Its spec books " + strings.Join(parts, ", ") + "."
}

func (s story) when(t time.Time) string {
	d := s.now.Sub(t).Round(time.Second)
	rel := d.String() + " ago"
	if d < 0 {
		rel = "in " + (-d).String()
	}
	return t.UTC().Format("15:04:05") + " (" + rel + ")"
}

func containerState(c corev1.ContainerStatus, now time.Time) string {
	var b strings.Builder
	switch st := c.State; {
	case st.Running != nil:
		b.WriteString("running")
	case st.Waiting != nil:
		b.WriteString("waiting: " + st.Waiting.Reason)
	case st.Terminated != nil:
		fmt.Fprintf(&b, "terminated: %s, exit code %d", or(st.Terminated.Reason, "?"), st.Terminated.ExitCode)
	}
	if c.RestartCount > 0 {
		fmt.Fprintf(&b, ", %d restart%s", c.RestartCount, plural(int(c.RestartCount)))
	}
	if t := c.LastTerminationState.Terminated; t != nil {
		fmt.Fprintf(&b, " (last ended: %s, exit code %d, %s ago)", or(t.Reason, "?"), t.ExitCode, now.Sub(t.FinishedAt.Time).Round(time.Second))
	}
	return b.String()
}

func first(ev corev1.Event) time.Time {
	switch {
	case !ev.FirstTimestamp.IsZero():
		return ev.FirstTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.LastTimestamp.Time
}

func last(ev corev1.Event) time.Time {
	if !ev.LastTimestamp.IsZero() {
		return ev.LastTimestamp.Time
	}
	return first(ev)
}

func withUnit(q agents.Quantity, r nr1.Resource) string { return withUnit2(amount(q), r) }

func withUnit2(s string, r nr1.Resource) string {
	if strings.HasPrefix(s, "<") {
		return s
	}
	if r.Unit() == "MB" {
		return s + " MB"
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func or(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}
