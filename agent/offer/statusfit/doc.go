// SPDX-License-Identifier: Apache-2.0

// Package statusfit tells the operator of a CG whose pod status the kubelet cannot
// write. In device-plugin mode one NR1 unit is one device, and with its resource health
// on (the ResourceHealthStatus feature gate, on by default since Kubernetes 1.36) the
// kubelet writes an entry per allocated device into the pod's status: past the API
// server's limit on a request, the pod never shows a status, stays Pending in the API
// and cannot be deleted cleanly. The check runs on each CG once, when the agent first
// sees it (its sandbox, right after the kubelet allocated its devices).
//
// Device-plugin mode, following the samples (`Run`): each CG, once, when its allocation
// is known: the bytes of the `allocatedResourcesStatus` entries the kubelet would write
// for it (one per unit of each container it lists,
// `{"resourceID":"abc","health":"Healthy"},`), and past the API server's 3 MiB request
// limit, with the kubelet's resource health on, a Warning Event `NR1StatusTooLarge` on
// the pod naming the fix (the gates off, or DRA mode) and the gauge
// `nr1_cgs_status_too_large`; the kubelet's gates read with no lock held, within 5 s,
// one reading at a time, a failed or hung one exported as `nr1_kubelet_gates_unknown`
// and taken as the default.
package statusfit
