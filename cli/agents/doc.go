// SPDX-License-Identifier: Apache-2.0

// Package agents reads what nr1-agent knows about each NR1 node: capacity, the CGs,
// their allocations, what they hold and where their enforcement stands. It reads each
// agent's metrics through the API server (pod proxy), so that it needs nothing but the
// caller's kubeconfig and works wherever kubectl does.
//
// What `kubectl nr1` knows of each node: the agent pods found by label (of one node by
// field selector) and their `/metrics` read through the API server's pod proxy, a few at
// once, an agent unread or forbidden a node with its reason; `Parse` (Prometheus text →
// `Node`, amounts back in MB and queues from the agent's bytes and queues: capacity,
// allocatable, allocated and used sums — unknown, never smaller, when a CG's allocation
// or usage is —, CGs with their containers, allocation, usage, ratios and ladders by pod
// UID; a ladder's series alone make no CG); a fixture checked against the names and
// labels the agent's collectors describe.
package agents
