// SPDX-License-Identifier: Apache-2.0

// Package nodelabels owns the node's NR1 labels: those the agent writes to say what it
// found (the mode it runs in, the NR1's capacities, its driver's version), as GPU feature
// discovery does for GPUs, so that workloads and operators select NR1 nodes by them; and
// the one an operator writes to choose a node's mode, so that a cluster moves from the
// device plugin to DRA node by node.
//
// The node's NR1 labels: those the agent writes to say what it found
// (`neureality.ai/nr1.mode`, each resource's capacity as `neureality.ai/nr1.<resource
// name>`, `neureality.ai/nr1.driver-version` from the driver module's sysfs version),
// kept by a `Publisher` that writes only what differs, removes its own labels no longer
// found and touches no other, looks again every 5 minutes and backs off while the API
// server fails; and the operator's label selecting the node's mode (`node.modeLabel`,
// `nr1.neureality.ai/mode`), with the last one read remembered in the state directory
// for a restart without the API server.
package nodelabels
