// SPDX-License-Identifier: Apache-2.0

// Package latest holds the latest value a stage of the agent produced, wakes whoever
// waits for the next one, and keeps the stage's health: when it last succeeded and why
// it last failed. Every stage (device health, runtime, allocations, docker partition,
// samples) publishes through one, so readers see one contract.
//
// `latest.Value[T]`: a stage's latest value, a channel closed at the next (`Renew`: a
// reading like the last, its time renewed without waking anyone), and the stage's health
// (last success, last error); `View`, its read side, which is all a stage hands its
// readers (only the stage publishes); every stage publishes through one (device health,
// runtime, allocations, docker partition, samples), and `nr1_stage_up{stage}` /
// `nr1_stage_last_success_timestamp_seconds{stage}` are read from them.
package latest
