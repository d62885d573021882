// SPDX-License-Identifier: Apache-2.0

// Package nr1 names the NR1 resources that Kubernetes counts and the agent enforces, and
// the amounts of them. It does no I/O.
//
// The four resources (full and short names, units, env vars, `BaseUnit`: bytes or
// queues, what a metric of the resource is named by); `PerResource[T]`, the one
// per-resource type (every capacity, allocation, usage, ratio, health, policy, device
// configuration and ladder state; JSON keyed by short name, unknown resources and fields
// refused), with `Units` (what Kubernetes books: MB or queues; `Amounts`) and `Base`
// (what is measured: bytes or handles; `Usage`) as distinct types, converted only by
// `Resource.InBase`/`InUnits`; `Resource.ParseUnits` (an amount read from outside:
// decimal digits, at most `MaxUnits`, so nothing overflows in base units); the
// toolchain's `resources.yaml` parser; the DRA shares' marks (`ShareMount`: the claim's
// CDI spec mounted at `/run/nr1.neureality.ai/shares/<device>.json`; `ShareOfMount`
// reads one back, refusing a mount of any other source); no I/O.
package nr1
