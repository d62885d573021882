// SPDX-License-Identifier: Apache-2.0

// Package kubeletconf reads what the node's kubelet was told about its resource health
// (the feature gates that make it write one pod status entry per allocated device), from
// the kubelet's command line and configuration files as the host's /proc shows them. The
// kubelet is the process the kernel says serves its socket; every file is read only when
// regular and at most MaxFileBytes, so nothing a pod names or makes is read.
//
// The kubelet's feature gates as the host's `/proc` shows them: its process is the one
// the kernel says listens on the kubelet's pod-resources socket (`SO_PEERCRED`), never
// one found by name, and one in a pod's cgroup is refused; `--config`, `--config-dir`
// (`*.conf` in order), `--feature-gates` (each over the ones before, as the kubelet
// merges them), files read through its root and working directory, each only when
// regular (opened `O_PATH`, checked, then read) and at most 1 MiB; `ResourceHealth`: the
// gate as set, or else on (its default since 1.36), with where that came from, or why it
// is unknown.
package kubeletconf
