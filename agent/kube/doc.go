// SPDX-License-Identifier: Apache-2.0

// Package kube is the agent's Kubernetes API client: Events on pods, the Eviction API,
// the namespaces' labels, the watch on its own DaemonSet that tells the agent it is
// being removed, and the DRA driver's claims and ResourceSlices. It is
// optional: on a standalone kubelet there is no API server, and the agent's actions are
// then only logged. Every API call has a deadline, so a hung API server cannot hold up
// the caller.
//
// The agent's one connection to the API server (`Connect`: in-cluster or kubeconfig,
// made once by `cmd/nr1-agent`, which alone decides and logs "no API server"; each stage
// takes its client from it: `Events`, `Namespaces`, `Resources`, `Node`, `Removal`),
// event recorder, policy/v1 Eviction with UID precondition, `MarkDisrupted` (a pod's
// `DisruptionTarget` condition by a status patch carrying its UID; a mirror pod or
// another pod of the name refused, `ErrNotThePod`); a static pod's Events go to its
// mirror pod, its eviction is refused (`ErrStaticPod`); a deadline on every call; the
// watch on the agent's own DaemonSet (`Removal`); its own scheme of the four API groups
// it uses (core, apps, policy, resource) and plain REST clients — client-go's typed
// clients register every API group, a third of the binary —; `Node`, the agent's own
// Node's labels (get, merge patch); `Resources`, the DRA driver's calls (claims, the
// node's ResourceSlices, the node, an Event on the node); `Namespaces`: the agent's
// labels (`nr1.neureality.ai/…`) on every namespace, listed then watched (resumed from
// the last version, listed again only when too old), unknown before the first list and
// `maxNamespaceAge` after the watch fails, its health the stage `namespaces`; optional.
package kube
