// SPDX-License-Identifier: Apache-2.0

// Package enforce decides what to do about CGs that hold more of an NR1 resource than
// they were allocated: a pure Decide over a sample, the enforcement state and the policy,
// and a manager that runs it at every sample and hands the actions to an Actuator.
//
// The policy, a pure `Decide(now, sample, state, policy)` (ladder, hard ratio,
// hysteresis, rate limit that defers, dry-run, exemptions by the administrator —
// configuration lists, namespace labels, a pod's annotation where its namespace allows
// it —, warm-ups, certainty checks, uncertain usage as a lower bound, eviction fallback;
// a pod sharing a claim judged on its own figures and on its group's, whichever is
// further over, every pod of a group over together acted on unless one of them is over
// alone, which is then the one acted on, or exempt or of an undecided exemption, whose
// holding is not the others' to pay for), the state with outcomes and backoff, its
// checkpoint (with when it was saved: a clock set back while the agent was down moves
// every remembered time back with it), and the manager running it on every sample with a
// deadline per action (`NewManager(Options)`; `Needs`: the interval while a ladder is
// under way or a warm-up runs, read from the sample it last judged); `Ladders`, where
// each CG's enforcement stands (over since, steps taken, the next step and when, the
// reset, the throttle, the end); its collector exports the action, failure and breach
// counters (every series from zero), the mode and the ladders (by pod UID).
package enforce
