// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

// Changes of the node's cgroup trees: every cgroup made or removed, in any hierarchy,
// bumps one counter. A reader that walked a v2 tree at one count knows the walk still
// holds while the count is the same, and walks again only when it moved. (The v2
// hierarchy refuses renames, EPERM: a path there names one cgroup for its life.)

#include "headers/nr1_vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

__u64 cgroup_changes = 0;

SEC("tracepoint/cgroup/cgroup_mkdir")
int nr1_cgroup_mkdir(void *ctx)
{
	__sync_fetch_and_add(&cgroup_changes, 1);
	return 0;
}

SEC("tracepoint/cgroup/cgroup_rmdir")
int nr1_cgroup_rmdir(void *ctx)
{
	__sync_fetch_and_add(&cgroup_changes, 1);
	return 0;
}
