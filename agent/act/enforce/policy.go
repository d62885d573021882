// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Kind is an enforcement action.
type Kind string

// The actions, mildest first.
const (
	Warn       Kind = "warn"
	Throttle   Kind = "throttle"
	Kill       Kind = "kill"
	Evict      Kind = "evict"
	Unthrottle Kind = "unthrottle"
)

// Kinds lists every action kind, for counters that must exist before the first action.
var Kinds = []Kind{Warn, Throttle, Kill, Evict, Unthrottle, BadAnnotation, IgnoredMark}

// Mode is whether actions are carried out.
type Mode string

// The modes.
const (
	Enforce Mode = "enforce"
	DryRun  Mode = "dry-run"
)

// Duration is a time.Duration written as "5s".
type Duration = metav1.Duration

// Step is one rung of a ladder: an action taken once the CG has been over for After.
type Step struct {
	Action Kind     `json:"action" enum:"warn|throttle|kill|evict"`
	After  Duration `json:"after"`
}

// ResourcePolicy is the ladder of one resource.
type ResourcePolicy struct {
	Ladder []Step `json:"ladder"`
	// HardRatio, when usage/allocation reaches it, takes the ladder's last step at once.
	// Zero disables it.
	HardRatio float64 `json:"hardRatio"`
}

// UncertainPolicy is the ladder of a CG whose usage is uncertain by its own doing.
type UncertainPolicy struct {
	Ladder []Step `json:"ladder"`
}

// Resources is the policy of each resource, keyed by short name.
type Resources = nr1.PerResource[ResourcePolicy]

// Policy is the enforcement configuration.
type Policy struct {
	Mode Mode `json:"mode" enum:"enforce|dry-run"`
	// Warmup is how long after the agent starts nothing is done: its first samples may
	// not yet know every container.
	Warmup Duration `json:"warmup"`
	// ContainerWarmup is how long after a container starts its CG is left alone.
	ContainerWarmup Duration `json:"containerWarmup"`
	// Margin and Hold are the hysteresis: a CG is back under once its ratio stays at or
	// below 1-Margin for Hold; only then does its ladder start again.
	Margin float64  `json:"margin"`
	Hold   Duration `json:"hold"`
	// MaxActionsPerMinute bounds actions on the node (lifting a throttle is not counted).
	MaxActionsPerMinute int `json:"maxActionsPerMinute"`
	// MaxSampleAge: an older sample is not acted on.
	MaxSampleAge Duration `json:"maxSampleAge"`
	// MaxAllocationAge: allocations read from the kubelet longer ago are unknown.
	MaxAllocationAge Duration `json:"maxAllocationAge"`
	// MaxPartitionAge: an older docker-partition measurement is unknown.
	MaxPartitionAge Duration `json:"maxPartitionAge"`
	// ExemptNamespaces are never acted on, nor are namespaces labelled
	// nr1.neureality.ai/enforcement=disabled.
	ExemptNamespaces []string `json:"exemptNamespaces"`
	// PodExemptionNamespaces let their pods exempt themselves with the annotation
	// nr1.neureality.ai/enforcement=disabled, as do namespaces labelled
	// nr1.neureality.ai/allow-pod-exemption=true; elsewhere the annotation is ignored.
	PodExemptionNamespaces []string `json:"podExemptionNamespaces"`
	// MaxNamespaceAge: namespace labels last known current longer ago (the watch on
	// namespaces failing) are unknown, and so is every exemption that hangs on them.
	MaxNamespaceAge Duration `json:"maxNamespaceAge"`
	// NoAllocation is what usage by a CG with no allocation of the resource means:
	// "enforce" (over a zero allocation) or "ignore".
	NoAllocation string `json:"noAllocation" enum:"enforce|ignore"`
	// KillScope is "container" (the container most over its own allocation) or "cg".
	KillScope string `json:"killScope" enum:"container|cg"`
	// KillTimeout is the grace StopContainer gives before SIGKILL. 0, the default, kills
	// at once: the container ends as a failure (exit 137, as an OOM kill), and its pod, if
	// not restarted, Failed. With a grace, a workload that exits 0 on SIGTERM ends
	// Completed, its pod Succeeded, a Job counting it a success; the ladder's earlier
	// steps are the CG's time to let go.
	KillTimeout Duration `json:"killTimeout"`
	// EvictFallback: when an eviction is refused (a PodDisruptionBudget) on a hard breach,
	// the CG is killed after this long.
	EvictFallback Duration `json:"evictFallback"`
	// Freeze also pauses a throttled CG with the cgroup freezer.
	Freeze    bool      `json:"freeze"`
	Resources Resources `json:"resources"`
	// SelfUncertain is the ladder of a CG whose usage is uncertain for a cause inside it
	// (view.OwnCause: handles in flight or io_uring files past what a scan reads, a process whose fds took the scan past its time), each
	// step once it has been so for After, whatever its booking: such uncertainty
	// protects nothing. By default a warning at once and a throttle after 30 s; a kill
	// only where the policy lists one.
	SelfUncertain UncertainPolicy `json:"selfUncertain"`
}

// DefaultPolicy warns at once, throttles after 5 s and kills after 15 s over an
// allocation of DMA memory or queues (at once at twice the allocation), and evicts a CG
// 20 s over its docker partition.
func DefaultPolicy() Policy {
	// Each resource its own ladder: a configuration decoded over the defaults reuses a
	// slice's array, and one shared would change every resource's ladder at once.
	memory := func() ResourcePolicy {
		return ResourcePolicy{Ladder: []Step{{Warn, Duration{Duration: 0}}, {Throttle, Duration{Duration: 5 * time.Second}}, {Kill, Duration{Duration: 15 * time.Second}}}, HardRatio: 2}
	}
	return Policy{
		Mode: Enforce, Warmup: Duration{Duration: 10 * time.Second}, ContainerWarmup: Duration{Duration: 2 * time.Second},
		Margin: 0.05, Hold: Duration{Duration: 10 * time.Second}, MaxActionsPerMinute: 30, MaxSampleAge: Duration{Duration: 5 * time.Second},
		MaxAllocationAge: Duration{Duration: 5 * time.Second}, MaxPartitionAge: Duration{Duration: 35 * time.Second}, MaxNamespaceAge: Duration{Duration: 30 * time.Second},
		ExemptNamespaces: []string{"kube-system", "nr1-system"}, NoAllocation: "enforce", KillScope: "container",
		KillTimeout: Duration{Duration: 0}, EvictFallback: Duration{Duration: 30 * time.Second},
		Resources: Resources{
			nr1.ComputeDMAMemory: memory(), nr1.CPUDMAMemory: memory(), nr1.HypervisorQueue: memory(),
			nr1.DockerPartition: {Ladder: []Step{{Warn, Duration{Duration: 0}}, {Evict, Duration{Duration: 20 * time.Second}}}, HardRatio: 2},
		},
		SelfUncertain: UncertainPolicy{Ladder: []Step{{Warn, Duration{Duration: 0}}, {Throttle, Duration{Duration: 30 * time.Second}}}},
	}
}

// ladder reports the invalid steps of a ladder: an unknown action, a throttle where
// there is no device to deny, a step earlier than the one before, or one ending the CG
// before the last.
func ladder(name string, steps []Step, throttles bool, field func(name, format string, args ...any)) {
	var last time.Duration
	for i, s := range steps {
		switch s.Action {
		case Warn, Throttle, Kill, Evict:
		default:
			field(fmt.Sprintf("%s.ladder[%d].action", name, i), "must be warn, throttle, kill or evict, got %q", s.Action)
		}
		if s.Action == Throttle && !throttles {
			field(fmt.Sprintf("%s.ladder[%d].action", name, i), "the docker partition cannot be throttled (no device to deny)")
		}
		if s.After.Duration < last {
			field(fmt.Sprintf("%s.ladder[%d].after", name, i), "must not be earlier than the step before (%s), got %s", last, s.After.Duration)
		}
		if (s.Action == Kill || s.Action == Evict) && i != len(steps)-1 {
			field(fmt.Sprintf("%s.ladder[%d].action", name, i), "%s ends the CG: it must be the last step", s.Action)
		}
		last = s.After.Duration
	}
}

// Validate reports every invalid field, prefixed with prefix.
func (p *Policy) Validate(prefix string) error {
	var errs []error
	field := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: "+format, append([]any{prefix, name}, args...)...))
	}
	if p.Mode != Enforce && p.Mode != DryRun {
		field("mode", "must be enforce or dry-run, got %q", p.Mode)
	}
	if p.Margin < 0 || p.Margin >= 1 {
		field("margin", "must be in [0, 1), got %g", p.Margin)
	}
	if p.MaxActionsPerMinute < 1 {
		field("maxActionsPerMinute", "must be at least 1, got %d", p.MaxActionsPerMinute)
	}
	for _, age := range []struct {
		name string
		d    Duration
	}{{"maxSampleAge", p.MaxSampleAge}, {"maxAllocationAge", p.MaxAllocationAge}, {"maxPartitionAge", p.MaxPartitionAge}, {"maxNamespaceAge", p.MaxNamespaceAge}} {
		if age.d.Duration <= 0 {
			field(age.name, "must be positive, got %s", age.d.Duration)
		}
	}
	for _, list := range []struct {
		name string
		nss  []string
	}{{"exemptNamespaces", p.ExemptNamespaces}, {"podExemptionNamespaces", p.PodExemptionNamespaces}} {
		for i, ns := range list.nss {
			// No namespace has an invalid name: such an entry would exempt nothing, silently.
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				field(fmt.Sprintf("%s[%d]", list.name, i), "%q is not a namespace name: %s", ns, strings.Join(errs, "; "))
			}
		}
	}
	if p.NoAllocation != "enforce" && p.NoAllocation != "ignore" {
		field("noAllocation", "must be enforce or ignore, got %q", p.NoAllocation)
	}
	if p.KillScope != "container" && p.KillScope != "cg" {
		field("killScope", "must be container or cg, got %q", p.KillScope)
	}
	for _, r := range nr1.All {
		rp := p.Resources[r]
		name := "resources." + r.Short()
		if rp.HardRatio != 0 && rp.HardRatio <= 1 {
			field(name+".hardRatio", "must be above 1 (or 0 to disable), got %g", rp.HardRatio)
		}
		ladder(name, rp.Ladder, r != nr1.DockerPartition, field)
	}
	ladder("selfUncertain", p.SelfUncertain.Ladder, true, field)
	return errors.Join(errs...)
}
