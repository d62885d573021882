// SPDX-License-Identifier: Apache-2.0

// Package runtime follows every pod sandbox and container on the node through the CRI
// runtime service: an initial list, the runtime's container events, a periodic relist
// that repairs anything missed, and reconnection when the runtime goes away.
//
// The agent's one CRI connection (`Client`: connected on first use, kept for the agent's
// life, gRPC reconnecting within 1 s of the runtime's return; container stop, writable
// layers — every container's in one call, or one container's —, image size), shared by
// the watcher, the partition sampler and the actuator. CRI watcher: subscribe to
// `GetContainerEvents`, list, apply events, relist every `--runtime.resync` (a relist
// finding what the events said publishes nothing), reconnect with backoff keeping the
// last view (nothing reported gone while the runtime is away), poll when the runtime has
// no events; immutable snapshots published with a change channel; the verbose info read
// by `parseVerboseInfo`, containerd's layout or CRI-O's (the PID — one outside
// 0…PID_MAX_LIMIT refused —, the cgroupsPath, the CDI devices the kubelet gave the
// container where the runtime says them — containerd; CRI-O keeps no CRI config —, the
// runtime spec's mounts into `nr1.ShareDir`, the DRA shares' marks); a writable layer or
// image the runtime answers without its figure (CRI-O, its storage failing; containerd,
// 0 bytes measured at no time for a layer its periodic sync has not sized) is
// `ErrNoFigure`, never 0, a container whose status or info cannot be read or received
// (too large, the runtime failing to build it), or whose status carries no info, kept
// without PID or cgroup, its `Unread` saying why, and logged once, never failing the
// list: only the runtime away, hung or the call abandoned does; `fakecri` is a CRI
// runtime for one package's tests.
package runtime
