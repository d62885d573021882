// SPDX-License-Identifier: Apache-2.0

package bpf

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type record -type change -type inflight_file_val -type inflight_cgroup -type inflight_cgroup_key -type mapper footprint footprint.bpf.c -- -I.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type dev_key throttle throttle.bpf.c -- -I.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel cgroups cgroups.bpf.c -- -I.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type budget -type charge -type gate_dev -type pod_uid gate gate.bpf.c -- -I.
