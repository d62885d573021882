// SPDX-License-Identifier: Apache-2.0

// Package dra is nr1-agent's DRA kubelet plugin: the NR1 published as one device whose
// four capacities many CGs consume (KEP-5075 consumable capacity), claims prepared with
// a CDI device per share carrying the share's budget, and the amounts each prepared
// claim consumed kept for the enforcement.
//
// DRA mode, driver `nr1.neureality.ai`, on the kubelet's plugin APIs of `k8s.io/kubelet`
// served directly (`Run`: the registration socket `nr1.neureality.ai-reg.sock` in
// plugins_registry, removed when it stops if its path still names it — a successor that
// started meanwhile keeps its own, which the kubelet would otherwise deregister for
// good; the DRA service v1 and v1beta1 and the health service v1 and v1alpha1 on
// `dra.sock` in the plugin's data directory; the DRA helper library would bring a full
// clientset and its informers, a third of the binary, for one device in one slice): the
// NR1 as one device `nr1-0` of the node's pool, `allowMultipleAllocations`, four
// consumable capacities (request policy default 0, step 1Mi / 1), sysfs attributes, a
// NoSchedule taint while unhealthy (the time the API server stamps on it kept); each
// socket kept served on its path by `internal/served`, the registration socket also
// served anew when the kubelet has not registered the plugin 30 s after it was served
// (the plugin watcher finds sockets by their creation); the node's one ResourceSlice
// (owned by the node) created or updated on every health change and checked every
// minute, retried every 5 s while the API server fails, a slice left beside it outdated
// by a newer pool generation; fields the API server drops from it (a feature gate off:
// `DRAConsumableCapacity`, `DRADeviceTaints`) logged as an error, a Warning Event on the
// node and the stage `device_plugins` failing, naming the gate to enable or mode
// devicePlugin; `NodePrepareResources` (a claim prepared already answered from the
// `Store`, the checkpoint `claims.json` in the plugin's data directory — framed by
// `internal/checkpoint`; one damaged or of another version set aside, the driver
// starting empty and `Recover`ing the claims the kubelet's pod-resources tables list in
// use from the API server, reserved for a pod and allocated this node's NR1, their CGs'
// allocations unknown until then — without the API server; another read from the API
// server, its UID and allocation checked, each claim failing alone) reads each result's
// `consumedCapacity` (`manifest.Amounts`: none, or not a whole number of units, refuses
// the claim) and writes a CDI spec per claim (`neureality.ai/nr1=<claim UID>-<share
// ID>`: the NR1 files of the resources the share holds some of, its `NR1_*` budget, and
// the claim's spec read-only at `nr1.ShareDir/<device>.json`, the share's mark);
// `NodeUnprepareResources`; health streamed at once, on change, every 20 s; the
// capacities' names and a claim's template come from `nr1/manifest`.
package dra
