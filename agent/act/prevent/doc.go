// SPDX-License-Identifier: Apache-2.0

// Package prevent keeps the kernel's budget gate (the bpf package's Gate) in step with
// the CGs: each CG whose allocation is known has its queues booked by its pod's cgroup,
// a pod gone is forgotten, and each sample's measurement settles the gate's count of a
// pod that was quiet while it was taken. It tells what the gate refused: a counter and
// a rate-limited Event per pod, and the opens a measurement then found within the
// booking (false refusals).
package prevent
