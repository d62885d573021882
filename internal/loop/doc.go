// SPDX-License-Identifier: Apache-2.0

// Package loop runs the agent's periodic stages: a step now, then at every interval of
// an injected clock, so that tests step a fake clock instead of sleeping.
//
// `loop.Every(ctx, clock, interval, step)`, the periodic loop (device health,
// allocations, docker partition, samples without the kernel's changes); `loop.Sooner`,
// the same woken early (never twice within a gap) and with its next interval asked after
// each step (the cadence's); on an injected `k8s.io/utils/clock`, so tests step a fake
// clock instead of sleeping; the agent's other periodic waits are on the same injected
// clock (the runtime watcher's resync, poll and reconnection backoff, the device-plugin
// manager's resync, retries and debounce, the served sockets' checks and backoff, the
// DRA driver's slice checks and health resends, the `Removal`'s backoff); on real time,
// each for its reason: deadlines of calls to real components (a gRPC server's graceful
// stop, the kubelet's gates read by `statusfit`), the kernel's freezer settling
// (`cgroup`), and the wait for the node's mode label at start
// (`wait.PollUntilContextCancel`, once, before the agent's clock drives anything).
package loop
