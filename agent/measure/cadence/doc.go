// SPDX-License-Identifier: Apache-2.0

// Package cadence decides when the node is sampled: every interval; at rest, every idle
// interval, while nothing needs more; and at once (never twice within a gap) when
// something new is seen. The parts that need samples say what they need (a reason, now)
// and what wakes them; this package alone decides, and a test drives it with a clock.
// The kubelet's allocations are read at a cadence of their own, woken by new pods.
//
// When the node is sampled, decided in one place, and the kubelet's reads at a cadence
// of their own (`WakesSuffice`: at once when a pod starts or a read fails, every
// interval while a read fails or a pod is not in the table, otherwise only at the
// table's refresh, each sample having the kubelet vouch for it just before): every
// `sampling.interval`; at rest, every `sampling.idleInterval`, while no `Need` gives a
// reason (the sampler's `Unsettled`, the enforcement's `Needs` — a ladder under way, a
// warm-up —, the tracker's `Needs` — the kubelet not answering) and the kernel's changes
// are followed; at once, never twice within `sampling.changeGap`, on a change or a
// `Wake` (a new container, docker-partition reading or allocation table, a ladder
// starting, the kubelet failing); never at rest once the changes stop;
// `nr1_sampling_interval_seconds` and the changes' counters.
package cadence
