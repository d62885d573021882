// SPDX-License-Identifier: Apache-2.0

// Package actuate carries out enforcement actions: Events, the device-cgroup throttle
// (and optionally the freezer), CRI StopContainer, and the Eviction API. A kill ends as a
// failure where Kubernetes users look: the pod is marked with the DisruptionTarget
// condition (reason NR1Killed) before its containers are stopped, and with the default
// killTimeout of 0 they are killed at once, by SIGKILL to every process of their cgroup
// (then the runtime's stop), so a workload that would exit 0 on SIGTERM never ends
// Completed, whichever runtime.
//
// Carries actions out: Events, throttle (`bpf.Throttle`) and freezer, CRI
// `StopContainer`, Eviction; a kill first marks the pod `DisruptionTarget` (reason
// `NR1Killed`, `kube.MarkDisrupted`; not marked, it kills all the same), then stops with
// `killTimeout` (0: at once, every process of the container's v2 cgroup ended by SIGKILL
// through `cgroup.kill` — a runtime may send its stop signal first, CRI-O does — then
// the runtime's stop; so it ends a failure, never `Completed`, on either runtime);
// interfaces at the consumer; any part may be missing: a throttle, kill or eviction
// needing it fails with `ErrUnavailable` (logged, retried, reported), without Events the
// actions are only logged, without a throttler there is no throttle to lift.
package actuate
