// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

// Throttle of a CG: attached to the pod's cgroup (v2), it refuses every access to the
// NR1 character devices listed in `denied` — opening one, or making a node of one — for
// the pod and all its containers. Handles and mappings already held keep working: the
// kernel asks device programs only when a device node is opened or made.

#include "headers/nr1_vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct dev_key {
	__u32 major;
	__u32 minor;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct dev_key);
	__type(value, __u8);
} denied SEC(".maps");

SEC("cgroup/dev")
int nr1_throttle(struct bpf_cgroup_dev_ctx *ctx)
{
	struct dev_key key = {};

	if ((ctx->access_type & 0xffff) != BPF_DEVCG_DEV_CHAR)
		return 1;
	key.major = ctx->major;
	key.minor = ctx->minor;
	return bpf_map_lookup_elem(&denied, &key) ? 0 : 1;
}
