// SPDX-License-Identifier: Apache-2.0

package actuate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/act/enforce"
	"github.com/neureality-sdk/nr1-agent/agent/kube"
)

// Events records Kubernetes Events on pods.
type Events interface {
	Event(namespace, pod, uid, eventType, reason, message string)
}

// Evictor evicts pods through the Eviction API.
type Evictor interface {
	Evict(ctx context.Context, namespace, pod, uid string) error
}

// Stopper stops containers through CRI.
type Stopper interface {
	StopContainer(ctx context.Context, id string, timeout time.Duration) error
}

// Disruptor marks a pod with the DisruptionTarget condition before it is stopped.
type Disruptor interface {
	MarkDisrupted(ctx context.Context, namespace, pod, uid, reason, message string) error
}

// Killer ends every process of a cgroup by SIGKILL at once.
type Killer interface {
	Kill(dir string) error
}

// Throttler denies the NR1 character devices to a pod's cgroup, keyed by the pod's UID.
type Throttler interface {
	Attach(name, cgroupDir string) error
	Detach(name string) error
}

// Freezer pauses and resumes a cgroup.
type Freezer interface {
	Freeze(dir string) error
	Thaw(dir string) error
}

// Event reasons on the pod.
const (
	ReasonLimitExceeded = "NR1LimitExceeded"
	ReasonUncertain     = "NR1Uncertain"
	ReasonThrottled     = "NR1Throttled"
	ReasonKilled        = "NR1Killed"
	ReasonEvicted       = "NR1Evicted"
	ReasonDryRun        = "NR1EnforcementDryRun"
	ReasonBadAnnotation = "NR1BadAnnotation"
	ReasonIgnoredMark   = "NR1IgnoredShareMark"
	ReasonFailed        = "NR1EnforcementFailed"
)

// Actuator carries out actions. Any of its parts may be nil: a throttle, kill or eviction
// needing a missing part fails with ErrUnavailable (logged, retried, reported); without
// Events the actions are only logged; with no throttler there is no throttle to lift.
type Actuator struct {
	Events      Events
	Evictor     Evictor
	Stopper     Stopper
	Disruptor   Disruptor // nil: no condition is set (no API server)
	Killer      Killer    // nil: a kill is the runtime's stop alone
	Throttler   Throttler
	Freezer     Freezer // nil unless the policy freezes throttled CGs
	KillTimeout time.Duration
	Log         *slog.Logger
}

// ErrUnavailable is returned for an action whose means the agent does not have.
var ErrUnavailable = errors.New("not available on this node")

// Act carries out one action.
func (a *Actuator) Act(ctx context.Context, act enforce.Action) error {
	log := a.Log.With("action", act.Kind, "namespace", act.Namespace, "pod", act.Pod, "resource", act.Resource.Name(),
		"usage", act.Usage, "allocation", act.Allocation, "ratio", act.Ratio, "sampled", act.Sampled, "decided", act.Decided)
	if act.DryRun {
		log.Info("dry-run: enforcement action not taken", "message", act.Message)
		a.event(act, "Warning", ReasonDryRun, fmt.Sprintf("dry-run, would %s: %s", act.Kind, act.Message))
		return nil
	}
	var err error
	switch act.Kind {
	case enforce.Warn:
		reason := ReasonLimitExceeded
		if act.Cause != "" {
			reason = ReasonUncertain
		}
		a.event(act, "Warning", reason, act.Message)
	case enforce.BadAnnotation:
		a.event(act, "Warning", ReasonBadAnnotation, act.Message)
	case enforce.IgnoredMark:
		a.event(act, "Warning", ReasonIgnoredMark, act.Message)
	case enforce.Throttle:
		err = a.throttle(act)
	case enforce.Unthrottle:
		err = a.unthrottle(act)
	case enforce.Kill:
		err = a.kill(ctx, act)
	case enforce.Evict:
		err = a.evict(ctx, act)
	default:
		err = fmt.Errorf("unknown action %q", act.Kind)
	}
	if err != nil {
		log.Error("enforcement action failed", "err", err)
		if !errors.Is(err, enforce.ErrEvictionRefused) && !errors.Is(err, enforce.ErrThrottleKept) {
			a.event(act, "Warning", ReasonFailed, fmt.Sprintf("could not %s (retried with backoff): %v", act.Kind, err))
		}
		return err
	}
	log.Info("enforcement action taken", "message", act.Message)
	return nil
}

func (a *Actuator) event(act enforce.Action, typ, reason, msg string) {
	if a.Events != nil && act.Pod != "" {
		a.Events.Event(act.Namespace, act.Pod, act.UID, typ, reason, msg)
	}
}

func (a *Actuator) throttle(act enforce.Action) error {
	if a.Throttler == nil || act.PodCgroup == "" {
		return fmt.Errorf("throttling %s/%s: %w", act.Namespace, act.Pod, ErrUnavailable)
	}
	if err := a.Throttler.Attach(act.UID, act.PodCgroup); err != nil {
		return err
	}
	if a.Freezer != nil {
		if err := a.Freezer.Freeze(act.PodCgroup); err != nil {
			// A failed throttle is undone whole: the ladder takes it as not done and
			// tries again, and nothing must be left attached that it does not know of.
			undo := []error{fmt.Errorf("freezing %s/%s: %w", act.Namespace, act.Pod, err)}
			if err := a.Freezer.Thaw(act.PodCgroup); err != nil {
				undo = append(undo, fmt.Errorf("thawing after the failed freeze: %w", err))
			}
			if err := a.Throttler.Detach(act.UID); err != nil {
				undo = append(undo, fmt.Errorf("detaching after the failed freeze: %w", err))
			}
			return errors.Join(undo...)
		}
	}
	a.event(act, "Warning", ReasonThrottled, act.Message+": new opens of NR1 devices are refused")
	return nil
}

func (a *Actuator) unthrottle(act enforce.Action) error {
	if a.Throttler == nil {
		return nil
	}
	if a.Freezer != nil && act.PodCgroup != "" {
		if err := a.Freezer.Thaw(act.PodCgroup); err != nil {
			return err
		}
	}
	if err := a.Throttler.Detach(act.UID); err != nil {
		return err
	}
	a.event(act, "Normal", ReasonThrottled, act.Message)
	return nil
}

func (a *Actuator) kill(ctx context.Context, act enforce.Action) error {
	if a.Stopper == nil {
		return fmt.Errorf("killing %s/%s: %w", act.Namespace, act.Pod, ErrUnavailable)
	}
	if a.Freezer != nil && act.PodCgroup != "" {
		_ = a.Freezer.Thaw(act.PodCgroup) // a frozen container cannot handle its SIGTERM
	}
	// The condition comes first: a Job's controller reads it when the pod fails, which
	// the stop below makes it do. Not set (no API server, a static pod), the stop goes on:
	// ending what the CG holds matters more than how its end is told.
	if a.Disruptor != nil && act.UID != "" {
		if err := a.Disruptor.MarkDisrupted(ctx, act.Namespace, act.Pod, act.UID, ReasonKilled, act.Message); err != nil {
			a.Log.Warn("the pod's DisruptionTarget condition not set; stopping it all the same", "namespace", act.Namespace, "pod", act.Pod, "err", err)
		}
	}
	var errs []error
	for _, c := range act.Containers {
		// At once, the kernel ends the container's processes, not the runtime: a runtime
		// may still send the stop signal first (CRI-O does, whatever the timeout), and a
		// workload taking it as the end of its work would end Completed. The runtime's
		// stop then records the end.
		if a.KillTimeout == 0 && a.Killer != nil && c.Cgroup != "" {
			if err := a.Killer.Kill(c.Cgroup); err != nil {
				a.Log.Warn("the container's cgroup not killed; the runtime stops it", "namespace", act.Namespace, "pod", act.Pod, "container", c.Name, "err", err)
			}
		}
		if err := a.Stopper.StopContainer(ctx, c.ID, a.KillTimeout); err != nil {
			errs = append(errs, fmt.Errorf("stopping container %s of %s/%s: %w", c.Name, act.Namespace, act.Pod, err))
			continue
		}
		a.event(act, "Warning", ReasonKilled, fmt.Sprintf("container %s stopped: %s", c.Name, act.Message))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return a.liftAfter(act)
}

// liftAfter lifts the throttle of a killed or evicted CG: a container the kubelet
// restarts must not be born throttled.
func (a *Actuator) liftAfter(act enforce.Action) error {
	if !act.LiftThrottle || a.Throttler == nil {
		return nil
	}
	if err := a.Throttler.Detach(act.UID); err != nil {
		return fmt.Errorf("lifting the throttle of %s/%s after %s: %w: %w", act.Namespace, act.Pod, act.Kind, enforce.ErrThrottleKept, err)
	}
	return nil
}

func (a *Actuator) evict(ctx context.Context, act enforce.Action) error {
	if a.Evictor == nil {
		return fmt.Errorf("evicting %s/%s: %w (no API server)", act.Namespace, act.Pod, ErrUnavailable)
	}
	if err := a.Evictor.Evict(ctx, act.Namespace, act.Pod, act.UID); err != nil {
		switch {
		case errors.Is(err, kube.ErrEvictionRefused):
			return fmt.Errorf("%w: %w", enforce.ErrEvictionRefused, err)
		case errors.Is(err, kube.ErrStaticPod) && len(act.Containers) > 0:
			// The API server cannot remove a static pod; stopping its container is the
			// one way to end what it holds (the kubelet restarts it).
			a.Log.Info("static pod: killing instead of evicting", "namespace", act.Namespace, "pod", act.Pod)
			return a.kill(ctx, act)
		}
		return err
	}
	a.event(act, "Warning", ReasonEvicted, act.Message)
	return a.liftAfter(act)
}
