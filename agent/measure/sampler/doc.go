// SPDX-License-Identifier: Apache-2.0

// Package sampler measures, at each step (the cadence decides when), what each compute
// graph holds of each NR1 resource, per container, against what it was allocated.
//
// Each `Step` (the cadence decides when): inventory + one footprint scan → per CG and
// container usage, ratios (+Inf over a zero allocation), unattributed usage, the largest
// records behind it (32 of each, with totals), CGs the scan did not read in full marked
// uncertain (the records kept apart from what is judged, `Snapshot.Detail`);
// `Unsettled`, why the next sample cannot wait for rest (a CG whose allocation, usage or
// namespace labels are not known); pods sharing a DRA claim, directly or through
// another, also summed as one union (`Shared`) against each claim once and what else
// each was given (their docker partition left to each pod's own judgement: pods of one
// image hold it once); `PartitionSampler` measures image + writable layers through the
// runtime client every `sampling.partitionInterval` (a failed reading leaves that CG's
// partition unknown; a runtime not reached at all also fails the stage `partition`); its
// collector builds every CG series from the latest sample at scrape time (one series set
// per running container; amounts in bytes or queues, an allocation's MB as its bytes; a
// CG whose allocation is unknown has only `nr1_allocation_unknown`, never usage against
// a zero allocation; golden and promtool tests).
package sampler
