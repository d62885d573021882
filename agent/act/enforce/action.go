// SPDX-License-Identifier: Apache-2.0

package enforce

import (
	"fmt"
	"strings"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// ContainerRef names a container of a CG an action stops.
type ContainerRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Cgroup is its v2 cgroup directory, where a kill at once sends SIGKILL to every
	// process; empty when not known.
	Cgroup string `json:"cgroup,omitempty"`
}

// Action is one thing to do to a CG.
type Action struct {
	Kind   Kind `json:"kind"`
	DryRun bool `json:"dryRun,omitempty"`
	// Hard is true when the hard ratio, not the ladder's delay, called for it.
	Hard      bool   `json:"hard,omitempty"`
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// PodCgroup is the pod's cgroup v2 directory, for throttling.
	PodCgroup string `json:"podCgroup,omitempty"`
	// Containers are the ones a kill stops (and an eviction's fallback would): the one
	// most over its own allocation, or all of them by policy.
	Containers []ContainerRef `json:"containers,omitempty"`
	// LiftThrottle, on a kill or eviction, lifts the CG's throttle once it is done.
	LiftThrottle bool         `json:"liftThrottle,omitempty"`
	Resource     nr1.Resource `json:"resource"`
	// Cause, on a step of the selfUncertain ladder, names why the CG's usage is
	// uncertain by its own doing (a view.Cause); empty on every other action.
	Cause      string        `json:"cause,omitempty"`
	Usage      nr1.Base      `json:"usage"`
	Allocation nr1.Units     `json:"allocation"`
	Ratio      view.Fraction `json:"ratio"`
	Message    string        `json:"message"`
	// Sampled is when the sample that called for it began; Decided when it was decided.
	Sampled time.Time `json:"sampled"`
	Decided time.Time `json:"decided"`
}

func action(k Kind, r nr1.Resource, cg *view.Measured, p Policy, hard bool, msg string) Action {
	a := Action{Kind: k, DryRun: p.Mode == DryRun, Hard: hard, UID: cg.UID, Namespace: cg.Namespace, Pod: cg.Name,
		Resource: r, Usage: cg.Usage[r], Allocation: cg.Allocation[r], Ratio: cg.Ratio[r], Message: msg}
	a.PodCgroup = podCgroup(cg)
	if k == Kill || k == Evict {
		a.Containers = targets(cg, r, p)
	}
	return a
}

// lift is the action lifting a CG's throttle.
func lift(cg *view.Measured, c *cgState, msg string) Action {
	a := Action{Kind: Unthrottle, UID: cg.UID, Namespace: cg.Namespace, Pod: cg.Name, PodCgroup: podCgroup(cg), Message: msg}
	if a.PodCgroup == "" {
		a.PodCgroup = c.PodCgroup
	}
	return a
}

// podCgroup is the pod's v2 cgroup: the parent of a running container's, and only when
// it is named for the pod (pod<UID> with the cgroupfs driver, …-pod<UID>.slice with
// systemd's). A shallow cgroupsPath that stays inside the hierarchy must not make the
// agent throttle or freeze kubepods as a whole; without it, nothing is throttled.
func podCgroup(cg *view.Measured) string {
	if cg.PodCgroup != "" {
		return cg.PodCgroup
	}
	for _, c := range cg.Containers {
		if c.State != view.Running || c.Cgroup.V2 == "" {
			continue
		}
		parent := parentDir(c.Cgroup.V2)
		base := parent[strings.LastIndexByte(parent, '/')+1:]
		if base == "pod"+cg.UID || strings.HasSuffix(base, "-pod"+strings.ReplaceAll(cg.UID, "-", "_")+".slice") {
			return parent
		}
	}
	return ""
}

// targets are the running containers a kill of r stops: every one by policy, or the one
// most over its own allocation of r. Excess, not holding, decides: a health-handler
// within what it was given is not stopped for a sidecar's extra queue.
func targets(cg *view.Measured, r nr1.Resource, p Policy) []ContainerRef {
	var (
		out               []ContainerRef
		best              *ContainerRef
		bestExcess, bestU nr1.Base
	)
	for _, c := range cg.Containers {
		if c.State != view.Running {
			continue
		}
		ref := ContainerRef{ID: c.ID, Name: c.Name, Cgroup: c.Cgroup.V2}
		if p.KillScope == "cg" {
			out = append(out, ref)
			continue
		}
		used := cg.PerContainer[c.Name][r]
		excess := used - r.InBase(c.Allocation[r])
		if best == nil || excess > bestExcess || (excess == bestExcess && used > bestU) {
			best, bestExcess, bestU = &ref, excess, used
		}
	}
	if best != nil {
		out = append(out, *best)
	}
	return out
}

func human(r nr1.Resource, base nr1.Base) string {
	if r.UnitBytes() > 1 {
		return fmt.Sprintf("%.1f MB", r.InUnits(base))
	}
	return fmt.Sprintf("%d", base)
}

func parentDir(p string) string {
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return p
}
