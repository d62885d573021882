// SPDX-License-Identifier: Apache-2.0

// Package metrics serves the agent's Prometheus metrics and its health endpoints. Every
// series is built at scrape time from the agent's current state.
//
// The HTTP side: `/metrics`, `/healthz` (fails on a wedged enforcement action),
// `/readyz` (plugins registered, runtime connected, first sample taken) on the pod
// network; `/debug/cgs` and `/debug/pprof/` on their own listener, the pod's loopback by
// default (`debugAddr`); `nr1_build_info` (version, the revision the toolchain stamped,
// Go release and architecture) and the Go and process collectors; the stage-health
// collector; `Amount`, an NR1 amount of every resource as one family per base unit
// (`<name>_bytes`, `<name>_queues`), what the device-plugin and sampler collectors
// export amounts through. It imports nothing of `agent/`: every other collector sits
// beside what it describes and is registered by `agent`.
package metrics
