// SPDX-License-Identifier: Apache-2.0

// Package view is the node's compute graphs as the agent knows them: who each CG is and
// what it was given (the inventory builds it), what it holds (the sampler measures it),
// and how certain both are; what the policy judges. It does no I/O and imports nothing
// that talks to the kernel, the runtime or the kubelet, so that the policy does not.
//
// The data model the inventory builds, the sampler measures and the policy judges: `CG`
// (who a pod is, its containers with their cgroups and states — `ContainerState`, which
// the runtime watcher reports in too —, what it was given and how it is known, its
// claims, its namespace's labels), `Sample` and `Measured` (usage, ratios, per
// container, what is uncertain and why, pods sharing claims as `Shared`), `Inputs`; no
// I/O, nothing linked that talks to the kernel, the runtime or the kubelet (its Layers
// line forbids it).
package view
