// SPDX-License-Identifier: Apache-2.0

// Package manifest turns what the NR1 toolchain writes to a CG's resources.yaml into
// Kubernetes objects: the four resources in a container's requests and limits for a
// node running the device plugin, or a ResourceClaimTemplate and the pod's claim of it
// for a node running the DRA driver. It owns the driver's names (DeviceClass, request,
// capacities) that claims and the ResourceSlice share.
//
// A CG's `resources.yaml` as Kubernetes objects: `Inject` (a YAML or JSON stream: every
// Pod, workload pod template and List item given the resources — requests and limits,
// equal, of one container for the device plugin; a ResourceClaimTemplate, the pod's
// claim and its containers' use of it for DRA, NR1 requests removed —, other objects
// passed through, nothing written unless every pod could be); `ClaimTemplate` and its
// inverse `Amounts` (what an allocation consumed, in units; a capacity the NR1 has not
// or a fraction refused); the DRA driver's names shared by claims and the ResourceSlice
// (DeviceClass, request, capacities, `Quantity`).
package manifest
