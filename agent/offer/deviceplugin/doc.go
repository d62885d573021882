// SPDX-License-Identifier: Apache-2.0

// Package deviceplugin advertises the NR1 resources to the kubelet: one v1beta1 device
// plugin per resource, one device per unit.
//
// One v1beta1 gRPC server per resource (capacity, allocatable, health, registration
// metrics beside it) (`Plugin` = logic, `endpoint` = one serve's transport), compact
// base-62 device IDs, exact ListAndWatch size and the startup guard, `Manager`
// registering each plugin's socket (kept served by `internal/served`, a new name at
// every serve) with the kubelet listening now, across kubelet restarts.
package deviceplugin
