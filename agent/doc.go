// SPDX-License-Identifier: Apache-2.0

// Package agent assembles the agent's stages from its configuration and runs them until
// the context ends.
//
// The composition root: `New` builds every stage from its options in the order data
// flows (the NR1 found and offered to the kubelet by `mode` (`newOffer`, in `mode.go`:
// the device-plugin manager, or the DRA driver's `dra.Offer`, whose prepared claims the
// inventory then reads); the runtime's containers and the kubelet's allocations joined
// into CGs; each measured at the cadence; each sample judged and acted on), checking all
// it can before serving; `expose` adds the metrics server with its probes and
// collectors, the debug server and, in device-plugin mode, `statusfit`; `Run` runs the
// stages in an errgroup and closes what `New` opened; `/debug/cgs` (no pod annotations;
// the latest sample one bounded page at a time: `?namespace=`, `?pod=`, `?limit=` up to
// 500, `?offset=`; each CG with its 32 largest mappings and first 32 handles and their
// totals).
package agent
