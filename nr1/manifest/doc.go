// SPDX-License-Identifier: Apache-2.0

// Package manifest turns what the NR1 toolchain writes to a CG's resources.yaml into
// Kubernetes objects: the four resources in a container's requests and limits for a
// node running the device plugin, or a ResourceClaimTemplate and the pod's claim of it
// for a node running the DRA driver. It owns the driver's names (DeviceClass, request,
// capacities) that claims and the ResourceSlice share.
package manifest
