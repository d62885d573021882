// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

// Footprint of the NR1 device files, per process and cgroup: the task_file iterator
// reports every fd open on a target, the task_vma iterator every mapping of one. Each
// match is written as a record to the iterator's output; user space sums them per
// cgroup and tells shared file descriptions apart by their file pointer.

#include "headers/nr1_vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "headers/nr1_fd.h"
#include "headers/nr1_regs.h"

#define S_IFMT 00170000
#define S_IFCHR 0020000
#define S_IFSOCK 0140000
#define S_IFREG 0100000
#define AF_UNIX 1
// An O_PATH fd names a file without opening it: no I/O, no mapping, nothing held.
#define FMODE_PATH (1U << 14)

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// A target is a character device by its device number (a runtime makes its own node in
// each container), or a regular file by (device, inode), which a bind mount keeps.
struct target_key {
	__u64 ino;
	__u32 dev;
	__u32 rdev;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct target_key);
	__type(value, __u32); // the target's index in user space's list, and TARGET_BYTES
} targets SEC(".maps");

// A target counted in mapped bytes: what counts of its mappings is their ranges, whatever
// description maps them. A target counted in handles keeps the description apart.
#define TARGET_BYTES (1U << 31)

static __always_inline __u32 index_of(__u32 target) { return target & ~TARGET_BYTES; }

// An open file description already reported for a cgroup in this scan is not reported
// again: a process that dup()s one fd 400000 times, or forks 1000 children that inherit
// it, costs one record. An LRU drops the oldest entries when full, so the entries of an
// earlier scan never block this one; a description reported twice (this scan's entries
// evicted) is still counted once by user space, which keeps distinct descriptions.
struct seen_key {
	__u64 file;
	__u64 cgroup_id;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct seen_key);
	__type(value, __u32); // the scan that last reported it
} seen SEC(".maps");

// A mapping already reported for a cgroup in this scan (the same description, offset
// and length; for a target counted in bytes, the same target, offset and length) is not
// reported again: 1000 children forked with 60 mappings each, one fd mapped 60000 times
// at one offset, or a DMA file opened and mapped again 60000 times, cost the records of
// one of them. User space counts the union of ranges and distinct descriptions, which
// the copies add nothing to.
struct seen_vma_key {
	__u64 file; // the description, or for a target counted in bytes its index
	__u64 cgroup_id;
	__u64 pgoff;
	__u64 size;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct seen_vma_key);
	__type(value, __u32); // the scan that last reported it
} seen_vma SEC(".maps");

// The current scan, set by user space before each run of the task_file and task_vma
// iterators.
__u32 scan = 0;

// Copies of one open file in one object of an iterator (a ring's table) are one record:
// one queue registered in 600 slots of a ring is one file, and fills no cap. An object may be rolled back and shown
// again, so what it wrote cannot be marked seen for the scan; each showing is a visit
// of its own instead, and a file is written once per visit. The caps then bound
// distinct files, and a cgroup past one holds that many distinct files where a scan
// cannot count them all. The iterators run one at a time, so the counter needs no
// atomic.
__u64 visits = 0;

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct seen_key);
	__type(value, __u64); // the visit that last wrote it
} visited SEC(".maps");

// first_in_visit says whether file is written for the first time in this visit, and
// records that it is.
static __always_inline bool first_in_visit(__u64 file, __u64 cgroup_id, __u64 visit)
{
	struct seen_key key = {.file = file, .cgroup_id = cgroup_id};
	__u64 *last = bpf_map_lookup_elem(&visited, &key);

	if (last && *last == visit)
		return false;
	bpf_map_update_elem(&visited, &key, &visit, BPF_ANY);
	return true;
}

enum { KIND_FD = 0, KIND_VMA = 1, KIND_INFLIGHT = 2, KIND_INFLIGHT_MORE = 3 };

struct record {
	__u64 cgroup_id;
	__u64 file;   // the struct file, to tell open file descriptions apart
	__u64 start;  // vma: first address
	__u64 size;   // vma: bytes
	__u64 pgoff;  // vma: offset in the file, in pages
	__u32 pid;
	__u32 fd;
	__u32 target;
	__u32 kind;
};

// KIND_REGISTERED: a target registered in an io_uring of the process (fd: the ring's).
// KIND_RING_MORE: the cgroup holds a ring whose registered files were not all read.
// KIND_NETNS: the process holds a unix socket (fd) of a network namespace (file: its
// inode number), the first met of that namespace's in its cgroup; user space reads the
// sockets of those no process is in from inside them.
// KIND_PAST_CAP: a socket or ring of the cgroup holds more distinct targets than a scan
// writes for it (target: the first one past the cap); the cgroup is over whatever it
// was given, since it holds more than any count the agent can make of it.
// KIND_RING_LAYOUT: the cgroup holds a ring of a layout this program does not know: its
// files were not read, by the node's failing, not the cgroup's.
// KIND_NETNS_MEMBER: the process is in a network namespace (file: its inode number), the
// first met of that namespace's processes: user space enters each namespace through one
// of them, without reading every process's /proc/PID/ns/net.
// KIND_TICK: TICK objects (fds, mappings) were walked since the last tick; the process
// is the one walked. A walk of a million fds that are no target's writes nothing else,
// and user space must see its time pass: a scan's budget counts what it walks.
// KIND_HEAVY: the process holds more than HEAVY_FDS fds, every one walked at each scan: a
// scan that runs out of time is its cgroup's doing.
// KIND_UNLINKED: the process holds open (fd) a regular file of its own root, an
// overlay (its container's writable layer), that has no name left (file: its inode;
// size: its size). Its blocks stay in the layer's file system, where a walk of the
// layer's names, as the runtime's size of it is, never finds them.
// KIND_PROCESS: a process (a thread group's leader), for a walk of processes one by one.
enum { KIND_REGISTERED = 4, KIND_RING_MORE = 5, KIND_NETNS = 6, KIND_PAST_CAP = 7, KIND_RING_LAYOUT = 8, KIND_NETNS_MEMBER = 9,
       KIND_TICK = 10, KIND_HEAVY = 11, KIND_UNLINKED = 12, KIND_PROCESS = 13 };

#define OVERLAYFS_SUPER_MAGIC 0x794c7630

// Force the record type into BTF for bpf2go.
const struct record *unused_record __attribute__((unused));

// match looks file up among the targets, and gives its inode's mode (0 without an inode).
static __always_inline __u32 *match_mode(struct file *file, umode_t *mode)
{
	struct inode *inode = BPF_CORE_READ(file, f_inode);
	struct target_key key = {};

	*mode = 0;
	if (!inode)
		return 0;
	*mode = BPF_CORE_READ(inode, i_mode);
	if ((*mode & S_IFMT) == S_IFCHR) {
		key.rdev = BPF_CORE_READ(inode, i_rdev);
	} else {
		key.ino = BPF_CORE_READ(inode, i_ino);
		key.dev = BPF_CORE_READ(inode, i_sb, s_dev);
	}
	return bpf_map_lookup_elem(&targets, &key);
}

static __always_inline __u32 *match(struct file *file)
{
	umode_t mode;

	return match_mode(file, &mode);
}

// unlinked gives the inode of file when it is a regular file of task's root, an
// overlay, with no name left; 0 otherwise. Only a file with no link is read further:
// the test costs any other file one read.
static __always_inline struct inode *unlinked(struct task_struct *task, struct file *file, umode_t mode)
{
	if ((mode & S_IFMT) != S_IFREG)
		return 0;
	struct inode *inode = BPF_CORE_READ(file, f_inode);
	if (BPF_CORE_READ(inode, __i_nlink) != 0)
		return 0;
	struct super_block *sb = BPF_CORE_READ(inode, i_sb);
	if (BPF_CORE_READ(sb, s_magic) != OVERLAYFS_SUPER_MAGIC || sb != BPF_CORE_READ(task, fs, root.mnt, mnt_sb))
		return 0;
	return inode;
}

static __always_inline void fill(struct record *r, struct task_struct *task, struct file *file, __u32 target, __u32 kind)
{
	r->cgroup_id = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
	r->pid = BPF_CORE_READ(task, tgid);
	r->file = (__u64)file;
	r->target = index_of(target);
	r->kind = kind;
}

// The file operations of io_uring's files, once a ring was seen: then one pointer
// compared tells a ring from any other file.
__u64 ring_fops = 0;

// An anonymous inode named [io_uring]: an io_uring's file. Anonymous inodes carry no
// file type, which makes the name worth reading only for them, and only until a ring
// was seen.
static __always_inline bool is_ring(struct file *file, umode_t mode)
{
	static const char want[] = "[io_uring]";
	char name[sizeof(want)] = {};

	if ((mode & S_IFMT) != 0)
		return false;
	__u64 fops = (__u64)BPF_CORE_READ(file, f_op);
	if (ring_fops)
		return fops == ring_fops;
	const unsigned char *p = BPF_CORE_READ(file, f_path.dentry, d_name.name);
	if (bpf_probe_read_kernel_str(name, sizeof(name), p) != sizeof(want))
		return false;
	for (int i = 0; i < sizeof(want); i++)
		if (name[i] != want[i])
			return false;
	ring_fops = fops;
	return true;
}

// The network namespace of a unix socket's file, 0 for any other file.
static __always_inline struct net *unix_net(struct file *file, umode_t mode)
{
	if ((mode & S_IFMT) != S_IFSOCK)
		return 0;
	struct socket *sock = BPF_CORE_READ(file, private_data);
	struct sock *sk = BPF_CORE_READ(sock, sk);
	if (!sk || BPF_CORE_READ(sk, __sk_common.skc_family) != AF_UNIX)
		return 0;
	return BPF_CORE_READ(sk, __sk_common.skc_net.net);
}

// A ring's registered files are one object of the iterator with its fd: all their
// records fit the seq buffer, or the fd is shown again. So at most MAX_RING_RECORDS
// distinct files are written per ring (copies of one are one, first_in_visit), one
// more is reported as KIND_PAST_CAP, and the ring is marked seen for its cgroup only
// once all were written.
// A ring's table holds up to 1 << 20 files (IORING_MAX_FIXED_FILES): the first
// MAX_RING_FILES slots are read, and a larger table leaves its cgroup unread, by its
// own doing (a table of 16384 slots costs a scan that many reads per ring).
#define MAX_RING_FILES (1 << 14)
#define MAX_RING_RECORDS 480
#define FILE_PTR_FLAGS 7UL

struct ring {
	struct seq_file *seq;
	struct io_rsrc_node **nodes;
	struct io_fixed_file *files;
	struct net *net;
	__u64 cgroup_id;
	__u64 visit;
	__u32 pid;
	__u32 fd;
	__u32 nr;
	int written;
	int more;
	int past_cap; // 1 + the target index of the first distinct file past the cap
	int layout;
	int failed;
};

static long ring_file(__u32 i, struct ring *c)
{
	unsigned long ptr = 0;
	struct record r = {};
	struct file *file;
	__u32 *target;

	// Kernel pointers are copied out of the context first, as for sockets.
	struct io_rsrc_node **nodes = c->nodes;
	struct io_fixed_file *files = c->files;

	if (i >= c->nr)
		return 1;
	if (nodes) {
		struct io_rsrc_node *node = 0;

		if (bpf_core_read(&node, sizeof(node), &nodes[i]) || !node)
			return 0;
		ptr = BPF_CORE_READ(node, file_ptr);
	} else if (bpf_core_read(&ptr, sizeof(ptr), &files[i].file_ptr)) {
		return 0;
	}
	file = (struct file *)(ptr & ~FILE_PTR_FLAGS);
	if (!file)
		return 0;
	umode_t mode;
	target = match_mode(file, &mode);
	if (!target) {
		// A unix socket of a namespace no process may be in: what it holds in flight
		// is not read.
		struct net *net = unix_net(file, mode);
		if (net && net != c->net)
			c->more = 1;
		return 0;
	}
	// A target counted in mapped bytes: its mappings count, not its files. One held as
	// an fd in this cgroup was reported by task_file already, and fills no cap.
	if (*target & TARGET_BYTES)
		return 0;
	struct seen_key held = {.file = (__u64)file, .cgroup_id = c->cgroup_id};
	__u32 *last = bpf_map_lookup_elem(&seen, &held);
	if (last && *last == scan)
		return 0;
	if (!first_in_visit((__u64)file, c->cgroup_id, c->visit))
		return 0;
	if (c->written >= MAX_RING_RECORDS) {
		c->past_cap = 1 + index_of(*target);
		return 1;
	}
	r.cgroup_id = c->cgroup_id;
	r.pid = c->pid;
	r.fd = c->fd;
	r.file = (__u64)file;
	r.target = index_of(*target);
	r.kind = KIND_REGISTERED;
	if (bpf_seq_write(c->seq, &r, sizeof(r))) {
		c->failed = 1;
		return 1;
	}
	c->written++;
	return 0;
}

// registered reports the targets registered with ring, a file the task holds by fd or by
// a mapping (a ring whose fd was closed is kept by the mapping of its queues).
static __always_inline void registered(struct seq_file *seq, struct task_struct *task, struct file *ring, __u32 fd)
{
	struct io_ring_ctx *rctx = BPF_CORE_READ(ring, private_data);
	struct ring c = {};

	c.seq = seq;
	c.cgroup_id = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
	struct seen_key key = {.file = (__u64)ring, .cgroup_id = c.cgroup_id};
	__u32 *last = bpf_map_lookup_elem(&seen, &key);
	if (last && *last == scan)
		return;
	c.pid = BPF_CORE_READ(task, tgid);
	c.fd = fd;
	c.net = BPF_CORE_READ(task, nsproxy, net_ns);
	c.visit = ++visits;
	if (bpf_core_field_exists(rctx->file_table.data)) {
		c.nodes = BPF_CORE_READ(rctx, file_table.data.nodes);
		c.nr = BPF_CORE_READ(rctx, file_table.data.nr);
	} else if (bpf_core_field_exists(((struct io_ring_ctx___fixed *)rctx)->file_table.files)) {
		struct io_ring_ctx___fixed *old = (void *)rctx;

		c.files = BPF_CORE_READ(old, file_table.files);
		c.nr = BPF_CORE_READ(old, nr_user_files);
	} else {
		c.layout = 1;
	}
	if (c.nodes || c.files)
		bpf_loop(MAX_RING_FILES, ring_file, &c, 0);
	if (c.nr > MAX_RING_FILES)
		c.more = 1;
	if (c.failed)
		return;
	if (c.more) {
		struct record r = {.cgroup_id = c.cgroup_id, .pid = c.pid, .fd = c.fd, .kind = KIND_RING_MORE};
		if (bpf_seq_write(c.seq, &r, sizeof(r)))
			return;
	}
	if (c.past_cap) {
		struct record r = {.cgroup_id = c.cgroup_id, .pid = c.pid, .fd = c.fd, .target = c.past_cap - 1, .kind = KIND_PAST_CAP};
		if (bpf_seq_write(c.seq, &r, sizeof(r)))
			return;
	}
	if (c.layout) {
		struct record r = {.cgroup_id = c.cgroup_id, .pid = c.pid, .fd = c.fd, .kind = KIND_RING_LAYOUT};
		if (bpf_seq_write(c.seq, &r, sizeof(r)))
			return;
	}
	bpf_map_update_elem(&seen, &key, &scan, BPF_ANY);
}

// The network namespace of a unix socket, with the socket's holder: a namespace no
// process is in has its sockets read from inside it, through a socket a process holds
// (user space knows which namespaces processes are in). Reported once per namespace,
// scan and cgroup, not once per namespace: a walk passed over mid-process drops what it
// wrote that user space had not read, and a namespace named only there is named again
// by the next cgroup's socket in it (a passed-over cgroup's processes are all passed
// over). The key's file is the namespace's address plus one, apart from the keys of
// member() and nr1_task_netns, whose cgroups (1, 2) a process's cgroup may be.
static __always_inline void netns(struct bpf_iter__task_file *ctx, struct task_struct *task, struct net *net)
{
	struct record r = {};

	fill(&r, task, 0, 0, KIND_NETNS);
	struct seen_key key = {.file = (__u64)net + 1, .cgroup_id = r.cgroup_id};
	__u32 *last = bpf_map_lookup_elem(&seen, &key);

	if (last && *last == scan)
		return;
	r.file = BPF_CORE_READ(net, ns.inum);
	r.fd = ctx->fd;
	if (bpf_seq_write(ctx->meta->seq, &r, sizeof(r)) == 0)
		bpf_map_update_elem(&seen, &key, &scan, BPF_ANY);
}

// The task whose namespace was last handled: a process's files are met one after
// another, so another task here is one met for the first time in this scan (or again,
// its files shown again after a full buffer: reported once anyway). Iterators run one
// at a time. Kept with its scan: a scan's first task may be the last one's.
__u64 last_task = 0;
__u32 last_task_scan = 0;

// The network namespace a process is in, reported once per namespace and scan. The
// seen key's cgroup is 1, apart from netns()'s keys (the namespace's address plus one):
// one namespace is reported both ways.
// False when the record did not fit the seq buffer: the process's next file tries again.
static __always_inline bool member(struct bpf_iter__task_file *ctx, struct task_struct *task)
{
	struct net *net = BPF_CORE_READ(task, nsproxy, net_ns);
	struct record r = {};

	if (!net)
		return true; // exiting: its namespace is gone from it
	struct seen_key key = {.file = (__u64)net, .cgroup_id = 1};
	__u32 *last = bpf_map_lookup_elem(&seen, &key);

	if (last && *last == scan)
		return true;
	fill(&r, task, 0, 0, KIND_NETNS_MEMBER);
	r.file = BPF_CORE_READ(net, ns.inum);
	if (bpf_seq_write(ctx->meta->seq, &r, sizeof(r)) != 0)
		return false;
	bpf_map_update_elem(&seen, &key, &scan, BPF_ANY);
	return true;
}

// The network namespace of every task, once per namespace and scan, for a scan whose
// walk of fds left processes unmet (cut, or past a heavy cgroup's budget). Its seen key's
// cgroup is 2, apart from member()'s: a cut walk may have marked records it never read.
// Threads are met too: one may be in a namespace of its own. A task costs a lookup,
// whatever its fds, so a flood of fds or processes costs this pass little.
SEC("iter/task")
int nr1_task_netns(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct record r = {};

	if (!task)
		return 0;
	struct net *net = BPF_CORE_READ(task, nsproxy, net_ns);
	if (!net)
		return 0; // exiting
	struct seen_key key = {.file = (__u64)net, .cgroup_id = 2};
	__u32 *last = bpf_map_lookup_elem(&seen, &key);

	if (last && *last == scan)
		return 0;
	fill(&r, task, 0, 0, KIND_NETNS_MEMBER);
	r.pid = BPF_CORE_READ(task, pid); // a thread's own namespace is read through its id
	r.file = BPF_CORE_READ(net, ns.inum);
	if (bpf_seq_write(ctx->meta->seq, &r, sizeof(r)) == 0)
		bpf_map_update_elem(&seen, &key, &scan, BPF_ANY);
	return 0;
}

// Every process, for a scan that walks processes one by one: a task costs a read of its
// ids, where listing /proc makes a dentry for each process, and beside a node's kubelet
// listing every process's fds, the listing cost more than the walk.
SEC("iter/task")
int nr1_processes(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct record r = {};

	if (!task || BPF_CORE_READ(task, pid) != BPF_CORE_READ(task, tgid))
		return 0;
	fill(&r, task, 0, 0, KIND_PROCESS);
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r)); // one that does not fit is shown again
	return 0;
}

#define TICK 4096
#define HEAVY_FDS 65536

// HEAVY_FDS, which tests lower: a test process may not hold as many.
__u64 heavy_fds = HEAVY_FDS;

// What the iterators walked in this scan (walked_scan): objects in all, until the next
// tick; fds of the task met last. Iterators run one at a time.
__u32 walked_scan = 0;
__u64 walked = 0;
__u64 next_tick = 0;
__u64 walked_task = 0;
__u64 walked_task_fds = 0;

// walk counts an object walked for task; false when a record it owed did not fit the
// seq buffer (the object is shown again, and counted again: a tick comes early).
static __always_inline bool walk(struct seq_file *seq, struct task_struct *task, bool fd)
{
	struct record r = {};

	if (walked_scan != scan) {
		walked_scan = scan;
		walked = 0;
		next_tick = TICK;
		walked_task = 0;
	}
	if (fd && (__u64)task != walked_task) {
		walked_task = (__u64)task;
		walked_task_fds = 0;
	}
	if (fd && ++walked_task_fds == heavy_fds) {
		fill(&r, task, 0, 0, KIND_HEAVY);
		if (bpf_seq_write(seq, &r, sizeof(r))) {
			walked_task_fds--;
			return false;
		}
	}
	if (++walked >= next_tick) {
		fill(&r, task, 0, 0, KIND_TICK);
		if (bpf_seq_write(seq, &r, sizeof(r)))
			return false;
		next_tick = walked + TICK;
	}
	return true;
}

// unlinked_file writes a KIND_UNLINKED record of inode, once per scan and cgroup.
static __always_inline void unlinked_file(struct bpf_iter__task_file *ctx, struct task_struct *task, struct file *file, struct inode *inode)
{
	struct record r = {};

	fill(&r, task, file, 0, KIND_UNLINKED);
	r.file = (__u64)inode;
	r.target = 0;
	r.fd = ctx->fd;
	r.size = BPF_CORE_READ(inode, i_size);
	struct seen_key key = {.file = r.file, .cgroup_id = r.cgroup_id};
	__u32 *last = bpf_map_lookup_elem(&seen, &key);
	if (last && *last == scan)
		return;
	if (bpf_seq_write(ctx->meta->seq, &r, sizeof(r)) == 0)
		bpf_map_update_elem(&seen, &key, &scan, BPF_ANY);
}

SEC("iter/task_file")
int nr1_task_file(struct bpf_iter__task_file *ctx)
{
	struct task_struct *task = ctx->task;
	struct file *file = ctx->file;
	struct record r = {};
	__u32 *target;

	if (!task || !file)
		return 0;
	if (!walk(ctx->meta->seq, task, true))
		return 0;
	if (((__u64)task != last_task || last_task_scan != scan) && member(ctx, task)) {
		last_task = (__u64)task;
		last_task_scan = scan;
	}
	if (BPF_CORE_READ(file, f_mode) & FMODE_PATH)
		return 0;
	umode_t mode;
	target = match_mode(file, &mode);
	if (!target) {
		struct net *net;
		struct inode *inode;

		if (is_ring(file, mode))
			registered(ctx->meta->seq, task, file, ctx->fd);
		else if ((net = unix_net(file, mode)))
			netns(ctx, task, net);
		else if ((inode = unlinked(task, file, mode)))
			unlinked_file(ctx, task, file, inode);
		return 0;
	}
	fill(&r, task, file, *target, KIND_FD);
	struct seen_key key = {.file = r.file, .cgroup_id = r.cgroup_id};
	__u32 *last = bpf_map_lookup_elem(&seen, &key);
	if (last && *last == scan)
		return 0;
	r.fd = ctx->fd;
	// Marked seen only once written: a record that does not fit the seq buffer is
	// dropped, and the same fd is visited again after the buffer is read.
	if (bpf_seq_write(ctx->meta->seq, &r, sizeof(r)) == 0)
		bpf_map_update_elem(&seen, &key, &scan, BPF_ANY);
	return 0;
}

// The processes whose mappings a scan walks: those that may map a target or a ring. A
// process gets here by trying to map one (marked at the syscall's entry, before the
// mapping is made, and again at its exit, once it is), by being forked from one that is
// here, by an exec (the kernel maps the program and its interpreter itself), or by a
// walk that finds it holding one; it leaves at its exit. User space walks each process
// whose last walk found something, or that was marked since a walk found nothing
// (seq moved), and skips the rest: they map no target, and nothing they did since could
// have made them. Where that cannot be known, the next scan walks every process:
// - a mark not kept (the map full): mappers_lost moves;
// - a mapping made by a process that shares its memory with another (CLONE_VM without
//   CLONE_THREAD, vfork): the other process holds it too, unmarked. shared_mapped moves.
// A 32-bit process's mmap is not traced (the syscall tracepoints skip compat syscalls):
// it is always walked.
struct mapper {
	__u64 seq;    // the last mark's, from mark_seq
	__u32 found;  // the last scan whose walk of it met a target or a ring
	__u32 always; // walked at every scan: a 32-bit process
};

const struct mapper *unused_mapper __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, (1U << 0)); // BPF_F_NO_PREALLOC: entries made as marked
	__uint(max_entries, 65536);
	__type(key, __u32); // tgid
	__type(value, struct mapper);
} mappers SEC(".maps");

__u64 mark_seq = 0;
__u64 mappers_lost = 0;
__u64 shared_mapped = 0;
// Set once the exit tracepoint that forgets a process is attached: until then nothing
// is marked, or the marks of processes gone would stay.
__u32 following = 0;

// A 32-bit task's address space ends at 4 GiB, a 64-bit one's far above: the test needs
// no architecture's flags.
#define COMPAT_TASK_SIZE (1ULL << 32)

static __always_inline __u32 compat(struct task_struct *task)
{
	struct mm_struct *mm = BPF_CORE_READ(task, mm);

	return mm && BPF_CORE_READ(mm, task_size) <= COMPAT_TASK_SIZE;
}

// mark records that tgid may have mapped something since its last walk: a new seq, never
// given before, so that no walk begun earlier can stand for it. An exec sets always
// anew; any other mark only adds to it.
static __always_inline void mark(__u32 tgid, __u32 always, bool exec)
{
	if (!following)
		return;
	__u64 seq = __sync_add_and_fetch(&mark_seq, 1);
	struct mapper *m = bpf_map_lookup_elem(&mappers, &tgid);

	if (!m) {
		struct mapper fresh = {.seq = seq, .always = always};

		if (bpf_map_update_elem(&mappers, &tgid, &fresh, BPF_NOEXIST) == 0)
			return;
		// Made by another mark meanwhile, or no room left.
		m = bpf_map_lookup_elem(&mappers, &tgid);
		if (!m) {
			__sync_fetch_and_add(&mappers_lost, 1);
			return;
		}
	}
	// Values are changed in place, never replaced: a walk's found and a mark's seq
	// written side by side both stay.
	m->seq = seq;
	if (exec)
		m->always = always;
	else if (always)
		m->always = 1;
}

// found records that this scan's walk of task met a target or a ring.
static __always_inline void found(struct task_struct *task)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);
	struct mapper *m = bpf_map_lookup_elem(&mappers, &tgid);

	// A process whose last thread is leaving was forgotten, or is about to be: it is
	// not marked again, to stay for good.
	if (!m && BPF_CORE_READ(task, signal, live.counter) == 0)
		return;
	if (!m) {
		mark(tgid, 0, false);
		m = bpf_map_lookup_elem(&mappers, &tgid);
		if (!m)
			return;
	}
	m->found = scan;
}

// The task the task_vma iterator last met: a process's mappings come one after another.
__u64 last_vma_task = 0;
__u32 last_vma_task_scan = 0;

SEC("iter/task_vma")
int nr1_task_vma(struct bpf_iter__task_vma *ctx)
{
	struct task_struct *task = ctx->task;
	struct vm_area_struct *vma = ctx->vma;
	struct record r = {};
	struct file *file;
	__u32 *target;

	if (!task || !vma)
		return 0;
	if (!walk(ctx->meta->seq, task, false))
		return 0;
	// A 32-bit process met for the first time (one running before the agent): its
	// mmap is not traced, so it is walked at every scan.
	if ((__u64)task != last_vma_task || last_vma_task_scan != scan) {
		last_vma_task = (__u64)task;
		last_vma_task_scan = scan;
		if (compat(task))
			mark(BPF_CORE_READ(task, tgid), 1, false);
	}
	file = BPF_CORE_READ(vma, vm_file);
	if (!file)
		return 0;
	umode_t mode;
	target = match_mode(file, &mode);
	if (!target) {
		if (is_ring(file, mode)) {
			found(task);
			registered(ctx->meta->seq, task, file, 0);
		}
		return 0;
	}
	found(task);
	fill(&r, task, file, *target, KIND_VMA);
	r.start = BPF_CORE_READ(vma, vm_start);
	r.size = BPF_CORE_READ(vma, vm_end) - r.start;
	r.pgoff = BPF_CORE_READ(vma, vm_pgoff);
	struct seen_vma_key key = {.file = r.file, .cgroup_id = r.cgroup_id, .pgoff = r.pgoff, .size = r.size};
	if (*target & TARGET_BYTES)
		key.file = r.target;
	__u32 *last = bpf_map_lookup_elem(&seen_vma, &key);
	if (last && *last == scan)
		return 0;
	// Marked seen only once written, as for fds.
	if (bpf_seq_write(ctx->meta->seq, &r, sizeof(r)) == 0)
		bpf_map_update_elem(&seen_vma, &key, &scan, BPF_ANY);
	return 0;
}

// Files in flight: sent over a unix socket (SCM_RIGHTS) and not received yet, held by
// nobody's fd table but still open. They count for the cgroup of the process that sent
// them, as handles of this scan: once per description and cgroup, as for fds. Never for
// the receiving socket's: a pod that sends queues to a neighbour's socket that does not
// read would move them onto the neighbour.
//
// The sender of a message is, in this order: the process its credentials name (passed
// when either socket asked for them; the kernel checks that a sender names itself); else
// the last cgroup seen sending through, or accepting, the socket the message was sent
// from (senders, below); else the cgroup that made that socket. A cgroup is reported with
// its nearest ancestors (struct chain): a container gone since it sent leaves a dying
// cgroup whose files count for its pod.
//
// They are collected in maps, not written to the iterator's output: the unix iterator
// reads a hash bucket of sockets at a time, and a read that stops within a bucket (its
// output full) resumes at the next bucket, skipping the sockets left in it. With no
// output, one read runs over every socket.
//
// A socket's queue is read up to MAX_MESSAGES messages; a socket with more (a stream
// socket whose send buffer was raised) makes the count of the last sender read a lower
// bound, as a ring or a socket of another namespace in flight makes its sender's (what
// those hold is not read here).
// A cgroup is counted up to MAX_CGROUP_INFLIGHT distinct files of each target counted
// in handles; one more marks it past the cap for that target. Copies of one file are
// one, in any number of messages and sockets. A target counted in mapped bytes is not
// read here: its files hold nothing, its mappings do.
#define MAX_MESSAGES 4096
#define SCM_MAX_FD 253
#define MAX_CGROUP_INFLIGHT 1024
// Entries allocated as they are made: the maps are empty on a node with nothing in
// flight, and hold only what is.
#define BPF_F_NO_PREALLOC (1U << 0)

// The pass over sockets, set by user space before each: the maps below keep what was
// counted in it, and what earlier passes left until user space deletes it.
__u32 inflight_pass = 0;

// A cgroup and its nearest ancestors, nearest first; 0 past the root.
#define CHAIN 4
struct chain {
	__u64 id[CHAIN];
};

struct inflight_file_val {
	__u32 pass;
	__u32 target;
	__u64 up[CHAIN - 1]; // the sender's cgroup's ancestors
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct seen_key);
	__type(value, struct inflight_file_val);
} inflight_files SEC(".maps");

// A cgroup's counts are per target, each target's files against the cap; the entry of
// target ANY_TARGET says the cgroup holds more than was read.
#define ANY_TARGET 0xffffffffU

struct inflight_cgroup_key {
	__u64 cgroup_id;
	__u32 target;
	__u32 pad;
};

struct inflight_cgroup {
	__u32 pass;
	__u32 count;    // distinct files of the target counted in this pass
	__u32 more;     // holds more than was read (ANY_TARGET)
	__u32 past_cap; // holds more distinct files of the target than are counted
	__u64 up[CHAIN - 1];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, struct inflight_cgroup_key);
	__type(value, struct inflight_cgroup);
} inflight_cgroups SEC(".maps");

// The pass in which a map above was full: what did not fit was not counted.
__u32 inflight_full = 0;

// Force the value types into BTF for bpf2go.
const struct inflight_file_val *unused_inflight_file_val __attribute__((unused));
const struct inflight_cgroup *unused_inflight_cgroup __attribute__((unused));
const struct inflight_cgroup_key *unused_inflight_cgroup_key __attribute__((unused));

// The last cgroup seen sending through a unix socket (sendmsg, sendmmsg) or accepting it,
// by socket: a socket made by connect() is the connecting process's, yet the process
// that accepts it is the one that sends through it. An LRU: a socket pushed out, or sent
// through in a way no tracepoint sees (io_uring), falls back to the cgroup that made it.
// A socket's memory is reused once it is freed: an entry names its socket by the cgroup
// that made it and its inode number too, and one that names another is not this
// socket's. A closed socket has no inode left to compare: its maker's cgroup must match.
struct sender {
	struct chain who;
	__u64 maker; // the cgroup that made the socket
	__u64 ino;   // the socket's inode number
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); // struct sock *
	__type(value, struct sender);
} senders SEC(".maps");

// socket_ino is the inode number of sk's socket, 0 once it is closed.
static __always_inline __u64 socket_ino(struct sock *sk)
{
	struct socket *sock = BPF_CORE_READ(sk, sk_socket);
	struct file *file = sock ? BPF_CORE_READ(sock, file) : 0;

	return file ? BPF_CORE_READ(file, f_inode, i_ino) : 0;
}

// chain_of fills c with cg and its nearest ancestors.
static __always_inline void chain_of(struct cgroup *cg, struct chain *c)
{
	for (int i = 0; i < CHAIN && cg; i++) {
		c->id[i] = BPF_CORE_READ(cg, kn, id);
		struct cgroup_subsys_state *parent = BPF_CORE_READ(cg, self.parent);
		cg = parent ? BPF_CORE_READ(parent, cgroup) : 0;
	}
}

#define PIDTYPE_TGID 1

// sender_of fills c with the chain of the cgroup that sent skb (see above).
static __always_inline void sender_of(struct sk_buff *skb, struct unix_skb_parms *parms, struct chain *c)
{
	struct pid *pid = BPF_CORE_READ(parms, pid);

	*c = (struct chain){};
	if (pid) {
		struct hlist_node *first = BPF_CORE_READ(pid, tasks[PIDTYPE_TGID].first);

		if (first) {
			struct task_struct *task = (struct task_struct *)((void *)first -
				bpf_core_field_offset(struct task_struct, pid_links) - PIDTYPE_TGID * bpf_core_type_size(struct hlist_node));
			chain_of(BPF_CORE_READ(task, cgroups, dfl_cgrp), c);
			if (c->id[0])
				return;
		}
	}
	struct sock *sk = BPF_CORE_READ(skb, sk);
	__u64 key = (__u64)sk;
	struct sender *seen = bpf_map_lookup_elem(&senders, &key);
	struct cgroup *maker = BPF_CORE_READ(sk, sk_cgrp_data.cgroup);
	if (seen && seen->maker == BPF_CORE_READ(maker, kn, id)) {
		__u64 ino = socket_ino(sk);

		if (!ino || ino == seen->ino) {
			*c = seen->who;
			return;
		}
	}
	chain_of(maker, c);
}

struct inflight {
	struct scm_fp_list *fpl;
	struct sk_buff *skb;
	struct sk_buff *head;
	struct net *net;
	struct chain sender; // of the message read
	int count;
	int stop;
};

// inflight_cgroup_of is the sender's counts for target in this pass, made when it has
// none; 0 (and the pass marked full) when the map is.
static __always_inline struct inflight_cgroup *inflight_cgroup_of(struct chain *sender, __u32 target)
{
	struct inflight_cgroup_key key = {.cgroup_id = sender->id[0], .target = target};
	struct inflight_cgroup *cg = bpf_map_lookup_elem(&inflight_cgroups, &key);

	if (cg && cg->pass == inflight_pass)
		return cg;
	struct inflight_cgroup fresh = {.pass = inflight_pass, .up = {sender->id[1], sender->id[2], sender->id[3]}};
	if (bpf_map_update_elem(&inflight_cgroups, &key, &fresh, BPF_ANY)) {
		inflight_full = inflight_pass;
		return 0;
	}
	return bpf_map_lookup_elem(&inflight_cgroups, &key);
}

static long inflight_file(__u32 i, struct inflight *c)
{
	struct file *file = 0;
	struct inflight_cgroup *cg;
	__u32 *target;

	// Kernel pointers are copied out of the context first: a CO-RE read of c->fpl
	// would relocate the local struct inflight too.
	struct scm_fp_list *fpl = c->fpl;

	if ((int)i >= c->count || i >= SCM_MAX_FD || c->stop)
		return 1;
	if (bpf_core_read(&file, sizeof(file), &fpl->fp[i]) || !file)
		return 0;
	if (BPF_CORE_READ(file, f_mode) & FMODE_PATH)
		return 0;
	umode_t mode;
	target = match_mode(file, &mode);
	if (!target) {
		// A ring, or a unix socket of a namespace no process may be in, in flight: what
		// they hold is not read here.
		struct net *net = unix_net(file, mode);

		if ((net && net != c->net) || is_ring(file, mode)) {
			cg = inflight_cgroup_of(&c->sender, ANY_TARGET);
			if (!cg) {
				c->stop = 1;
				return 1;
			}
			cg->more = 1;
		}
		return 0;
	}
	// A target counted in mapped bytes: what counts is its mappings, not its files.
	if (*target & TARGET_BYTES)
		return 0;
	// Held as an fd too in this cgroup: reported by task_file already.
	struct seen_key key = {.file = (__u64)file, .cgroup_id = c->sender.id[0]};
	__u32 *last = bpf_map_lookup_elem(&seen, &key);
	if (last && *last == scan)
		return 0;
	struct inflight_file_val *v = bpf_map_lookup_elem(&inflight_files, &key);
	if (v && v->pass == inflight_pass)
		return 0;
	cg = inflight_cgroup_of(&c->sender, index_of(*target));
	if (!cg) {
		c->stop = 1;
		return 1;
	}
	if (cg->count >= MAX_CGROUP_INFLIGHT) {
		cg->past_cap = 1;
		return 0;
	}
	struct inflight_file_val nv = {.pass = inflight_pass, .target = index_of(*target),
		.up = {c->sender.id[1], c->sender.id[2], c->sender.id[3]}};
	if (bpf_map_update_elem(&inflight_files, &key, &nv, BPF_ANY)) {
		inflight_full = inflight_pass;
		c->stop = 1;
		return 1;
	}
	cg->count++;
	return 0;
}

static long inflight_message(__u32 i, struct inflight *c)
{
	struct sk_buff *skb = c->skb;
	struct unix_skb_parms *parms;
	struct scm_fp_list *fpl;

	if (!skb || skb == c->head || c->stop)
		return 1;
	parms = (struct unix_skb_parms *)&skb->cb;
	fpl = BPF_CORE_READ(parms, fp);
	if (fpl) {
		sender_of(skb, parms, &c->sender);
		c->fpl = fpl;
		c->count = BPF_CORE_READ(fpl, count);
		bpf_loop(SCM_MAX_FD, inflight_file, c, 0);
	}
	c->skb = BPF_CORE_READ(skb, next);
	return 0;
}

SEC("iter/unix")
int nr1_unix(struct bpf_iter__unix *ctx)
{
	struct unix_sock *u = ctx->unix_sk;
	struct inflight c = {};

	if (!u)
		return 0;
	c.head = (struct sk_buff *)&u->sk.sk_receive_queue;
	c.skb = BPF_CORE_READ(u, sk.sk_receive_queue.next);
	if (!c.skb || c.skb == c.head)
		return 0; // nothing queued
	c.net = BPF_CORE_READ(u, sk.__sk_common.skc_net.net);
	bpf_loop(MAX_MESSAGES, inflight_message, &c, 0);
	// The messages not read are the last sender's to answer for; a queue of messages with
	// no files in them names none.
	if (c.skb && c.skb != c.head && !c.stop && c.sender.id[0]) {
		struct inflight_cgroup *cg = inflight_cgroup_of(&c.sender, ANY_TARGET);

		if (cg)
			cg->more = 1;
	}
	return 0;
}

// Changes as they happen: a process opening a target or mapping one (the syscalls by
// which a CG takes more) writes its cgroup to a ring buffer, so that user space samples
// at once instead of at its next interval. A change is reported after the syscall
// succeeded, when a scan sees what it made. Reported changes are only a hint to sample
// sooner: what counts is always the scan.
struct change {
	__u64 cgroup_id;
	__u32 pid;
	__u32 target;
};

const struct change *unused_change __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} changes SEC(".maps");

// Changes not written because the ring buffer was full; user space samples anyway.
__u64 changes_lost = 0;

// A mapping of a target under way: its target, by thread, from the syscall's entry (where
// the fd is known) to its exit (where its success is).
// Not an LRU: an entry pushed out would lose its mark. One not made moves mappers_lost.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u32);
} mapping SEC(".maps");

#define MAP_ANONYMOUS 0x20

static __always_inline void report(__u32 target)
{
	struct change *c = bpf_ringbuf_reserve(&changes, sizeof(*c), 0);

	if (!c) {
		__sync_fetch_and_add(&changes_lost, 1);
		return;
	}
	c->cgroup_id = bpf_get_current_cgroup_id();
	c->pid = bpf_get_current_pid_tgid() >> 32;
	c->target = index_of(target);
	bpf_ringbuf_submit(c, 0);
}

// A mapping of a ring in mapping's values: marked, not reported as a change.
#define MAPPING_RING (~0U)

// mark_mapper marks the current process as a mapper, and tells user space to walk every
// process when its memory is shared with another process, which holds the mapping too.
static __always_inline void mark_mapper(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct mm_struct *mm = BPF_CORE_READ(task, mm);

	mark(BPF_CORE_READ(task, tgid), 0, false);
	// Each live thread holds one user of the memory (a thread leaves the count of live
	// ones before it lets go of the memory): a count above theirs is another process's,
	// or a passing reader's, which costs a walk of all, never a miss. Not nr_threads: a
	// leader that exited before its threads is still counted there, and no longer here.
	if (mm && BPF_CORE_READ(mm, mm_users.counter) > BPF_CORE_READ(task, signal, live.counter))
		__sync_fetch_and_add(&shared_mapped, 1);
}

// An mmap's entry, of its flags and fd.
static __always_inline int enter_mmap(__u64 flags, __s32 fd)
{
	__u64 thread = bpf_get_current_pid_tgid();
	__u32 ring = MAPPING_RING;
	struct file *file;
	__u32 *target;
	umode_t mode;

	if (flags & MAP_ANONYMOUS)
		return 0;
	file = fd_file(fd);
	if (!file || (BPF_CORE_READ(file, f_mode) & FMODE_PATH))
		return 0;
	target = match_mode(file, &mode);
	if (!target && !is_ring(file, mode))
		return 0;
	// Marked before the mapping is made: a fork that copies it finds this process
	// marked, and gives its child a mark of its own.
	mark_mapper();
	// Without its entry the exit cannot mark the mapping once made, and a walk between
	// this mark and the mapping would clear it: the process is walked at every scan
	// until its next exec.
	if (bpf_map_update_elem(&mapping, &thread, target ? target : &ring, BPF_ANY)) {
		__sync_fetch_and_add(&mappers_lost, 1);
		mark(bpf_get_current_pid_tgid() >> 32, 1, false);
	}
	return 0;
}

// An mmap's exit, of what it returned.
static __always_inline int exit_mmap(long ret)
{
	__u64 thread = bpf_get_current_pid_tgid();
	__u32 *target = bpf_map_lookup_elem(&mapping, &thread);

	if (!target)
		return 0;
	// A failed mmap returns -errno, an address never is.
	if (ret < 0 && ret >= -4095) {
		bpf_map_delete_elem(&mapping, &thread);
		return 0;
	}
	// Marked again once the mapping is made: a walk that began before it may have
	// missed it.
	mark_mapper();
	if (*target != MAPPING_RING)
		report(*target);
	bpf_map_delete_elem(&mapping, &thread);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_mmap")
int nr1_enter_mmap(struct syscall_enter_ctx *ctx) { return enter_mmap(ctx->args[3], ctx->args[4]); }

SEC("tracepoint/syscalls/sys_exit_mmap")
int nr1_exit_mmap(struct syscall_exit_ctx *ctx) { return exit_mmap(ctx->ret); }

// The 32-bit mmaps, which a 64-bit process can make too (int $0x80), and which no
// tracepoint sees: the loader attaches these to the kernel's entries of them. mmap2
// takes the arguments of mmap, in registers; the old mmap reads them from memory.
SEC("kprobe/compat_mmap2")
int nr1_compat_enter_mmap2(void *ctx) { return enter_mmap(compat_arg(3), compat_arg(4)); }

SEC("kretprobe/compat_mmap2")
int nr1_compat_exit_mmap2(void *ctx) { return exit_mmap(probe_ret(ctx)); }

struct compat_mmap_args {
	__u32 addr, len, prot, flags, fd, offset;
};

SEC("kprobe/compat_old_mmap")
int nr1_compat_enter_old_mmap(void *ctx)
{
	struct compat_mmap_args a;

	// Unreadable, the kernel's own read fails too and nothing is mapped.
	if (bpf_probe_read_user(&a, sizeof(a), (void *)(__u64)compat_arg(0)))
		return 0;
	return enter_mmap(a.flags, a.fd);
}

SEC("kretprobe/compat_old_mmap")
int nr1_compat_exit_old_mmap(void *ctx) { return exit_mmap(probe_ret(ctx)); }

// The processes made (a fork or a clone that is not a thread) since FollowMappers
// attached nr1_fork: a list of every process is whole while it has not moved.
__u64 processes_made = 0;

// A child process of a mapper is one: it holds copies of its parent's mappings. A child
// that shares its parent's memory (CLONE_VM) needs nothing more: a mapping made in it
// by either makes every process be walked. Threads are their process.
SEC("raw_tp/sched_process_fork")
int nr1_fork(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *parent = (struct task_struct *)ctx->args[0];
	struct task_struct *child = (struct task_struct *)ctx->args[1];
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 tgid = BPF_CORE_READ(child, tgid);

	if (tgid == ptgid)
		return 0;
	__sync_fetch_and_add(&processes_made, 1);
	__u32 always = compat(child);
	if (always || bpf_map_lookup_elem(&mappers, &ptgid))
		mark(tgid, always, false);
	return 0;
}

// An exec replaces the process's mappings with those the kernel makes for the program,
// without an mmap the tracepoints see: the process is walked once more.
SEC("tracepoint/sched/sched_process_exec")
int nr1_exec(void *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();

	mark(BPF_CORE_READ(task, tgid), compat(task), true);
	return 0;
}

// The last thread of a process leaves with its mappings.
SEC("tracepoint/sched/sched_process_exit")
int nr1_exit(void *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u32 tgid = BPF_CORE_READ(task, tgid);

	if (BPF_CORE_READ(task, signal, live.counter) == 0)
		bpf_map_delete_elem(&mappers, &tgid);
	return 0;
}

// The queue descriptions processes opened, by address, with the cgroups of their
// opener: a description can be held where no walk finds it, by the kernel on a
// process's behalf (an io_uring request pending on it, a read blocked on it while
// another thread closes its fd), yet it is held, and the opener answers for it. An LRU:
// an entry pushed out is a description the scan can no longer name.
struct opened {
	__u64 inode;  // tells the description from a later one at the same address
	__u64 at;     // when it was opened (CLOCK_MONOTONIC): a scan that began before
		      // may have walked past its fd
	__u32 target; // as in targets
	__u32 pad;
	struct chain who;
};

const struct opened *unused_opened __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct opened);
} opened SEC(".maps");

// A new fd: opened (a new description: remembered with its opener, whatever was
// remembered at its address), or taken from another process (the description its
// opener answers for, unless none was remembered). The fd is installed when the syscall
// returns it.
static __always_inline int new_fd(long ret, bool taken)
{
	struct file *file;
	__u32 *target;

	if (ret < 0)
		return 0;
	file = fd_file(ret);
	if (!file || (BPF_CORE_READ(file, f_mode) & FMODE_PATH))
		return 0;
	target = match(file);
	if (!target)
		return 0;
	report(*target);
	if (*target & TARGET_BYTES)
		return 0; // counted in bytes mapped: a description with no mapping holds none
	__u64 key = (__u64)file;
	struct opened o = {.inode = (__u64)BPF_CORE_READ(file, f_inode), .at = bpf_ktime_get_ns(), .target = *target};
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	chain_of(BPF_CORE_READ(task, cgroups, dfl_cgrp), &o.who);
	bpf_map_update_elem(&opened, &key, &o, taken ? BPF_NOEXIST : BPF_ANY);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_openat")
int nr1_exit_openat(struct syscall_exit_ctx *ctx) { return new_fd(ctx->ret, false); }

SEC("tracepoint/syscalls/sys_exit_openat2")
int nr1_exit_openat2(struct syscall_exit_ctx *ctx) { return new_fd(ctx->ret, false); }

// open(2) exists on some architectures only (amd64, not arm64).
SEC("tracepoint/syscalls/sys_exit_open")
int nr1_exit_open(struct syscall_exit_ctx *ctx) { return new_fd(ctx->ret, false); }

SEC("tracepoint/syscalls/sys_exit_pidfd_getfd")
int nr1_exit_pidfd_getfd(struct syscall_exit_ctx *ctx) { return new_fd(ctx->ret, true); }

// The 32-bit opens and pidfd_getfd: the loader attaches this to the kernel's entries of
// those only 32-bit syscalls reach. A 32-bit pidfd_getfd is taken for an open: the
// taker, who may trace the holder, answers for what it took.
SEC("kretprobe/compat_new_fd")
int nr1_compat_new_fd(void *ctx) { return new_fd(probe_ret(ctx), false); }

// forget_released drops a remembered description that is released, or whose address a
// file of another inode took since.
static long forget_released(void *map, __u64 *key, struct opened *o, void *ctx)
{
	struct file *file = (struct file *)*key;

	if (refs(file) <= 0 || (__u64)BPF_CORE_READ(file, f_inode) != o->inode)
		bpf_map_delete_elem(map, key);
	return 0;
}

// nr1_fp_forget drops every remembered description released since, run by user space
// before it reads what is left: the descriptions held, by fds or otherwise.
SEC("syscall")
int nr1_fp_forget(void *ctx)
{
	bpf_for_each_map_elem(&opened, forget_released, 0, 0);
	return 0;
}

// A unix socket sent through, or accepted, is the current process's (senders): it is the
// one that answers for what the socket's messages carry.
static __always_inline int tag_sender(__s64 fd)
{
	struct file *file = fd_file(fd);

	if (!file)
		return 0;
	struct inode *inode = BPF_CORE_READ(file, f_inode);
	if (!inode || !unix_net(file, BPF_CORE_READ(inode, i_mode)))
		return 0;
	struct socket *sock = BPF_CORE_READ(file, private_data);
	struct sock *sk = BPF_CORE_READ(sock, sk);
	__u64 key = (__u64)sk, ino = BPF_CORE_READ(inode, i_ino);
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct cgroup *cg = BPF_CORE_READ(task, cgroups, dfl_cgrp);
	__u64 id = BPF_CORE_READ(cg, kn, id);
	struct sender *seen = bpf_map_lookup_elem(&senders, &key);

	// Most sends are through a socket its sender already answers for: a lookup only.
	if (seen && seen->who.id[0] == id && seen->ino == ino)
		return 0;
	struct sender c = {.ino = ino, .maker = BPF_CORE_READ(sk, sk_cgrp_data.cgroup, kn, id)};
	chain_of(cg, &c.who);
	bpf_map_update_elem(&senders, &key, &c, BPF_ANY);
	return 0;
}

// The control data of a message: a send without any carries no file, and costs a read
// of its header only. A sender that changes its header between this read and the
// kernel's goes unmarked, and its socket falls back to the cgroup that made it.
#define MSGHDR_CONTROLLEN 40 // offsetof(struct user_msghdr, msg_controllen), every ABI of 64 bits

SEC("tracepoint/syscalls/sys_enter_sendmsg")
int nr1_enter_sendmsg(struct syscall_enter_ctx *ctx)
{
	__u64 controllen = 0;

	if (bpf_probe_read_user(&controllen, sizeof(controllen), (void *)ctx->args[1] + MSGHDR_CONTROLLEN) || !controllen)
		return 0;
	return tag_sender((__s32)ctx->args[0]);
}

SEC("tracepoint/syscalls/sys_enter_sendmmsg")
int nr1_enter_sendmmsg(struct syscall_enter_ctx *ctx) { return tag_sender((__s32)ctx->args[0]); }

// The 32-bit sends, which no tracepoint sees: their header's fields are of 32 bits.
#define COMPAT_MSGHDR_CONTROLLEN 20

static __always_inline int compat_sendmsg(__s32 fd, __u32 msg)
{
	__u32 controllen = 0;

	if (bpf_probe_read_user(&controllen, sizeof(controllen), (void *)(__u64)msg + COMPAT_MSGHDR_CONTROLLEN) || !controllen)
		return 0;
	return tag_sender(fd);
}

SEC("kprobe/compat_sendmsg")
int nr1_compat_sendmsg(void *ctx) { return compat_sendmsg(compat_arg(0), compat_arg(1)); }

SEC("kprobe/compat_sendmmsg")
int nr1_compat_sendmmsg(void *ctx) { return tag_sender((__s32)compat_arg(0)); }

// socketcall(2), the 32-bit x86 door to every socket call: its first argument says
// which, its second points at that call's arguments. An accept through it is tagged at
// its return, which has the fd; until then the thread is kept in accepting.
#define SYS_ACCEPT 5
#define SYS_SENDMSG 16
#define SYS_ACCEPT4 18
#define SYS_SENDMMSG 20

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64); // pid_tgid
	__type(value, __u8);
} accepting SEC(".maps");

SEC("kprobe/compat_socketcall")
int nr1_compat_socketcall(void *ctx)
{
	__u32 call = compat_arg(0), args[2] = {};
	__u64 thread = bpf_get_current_pid_tgid();
	__u8 one = 1;

	if (call == SYS_ACCEPT || call == SYS_ACCEPT4) {
		bpf_map_update_elem(&accepting, &thread, &one, BPF_ANY);
		return 0;
	}
	if (call != SYS_SENDMSG && call != SYS_SENDMMSG)
		return 0;
	if (bpf_probe_read_user(args, sizeof(args), (void *)(__u64)compat_arg(1)))
		return 0;
	if (call == SYS_SENDMMSG)
		return tag_sender((__s32)args[0]);
	return compat_sendmsg(args[0], args[1]);
}

SEC("kretprobe/compat_socketcall")
int nr1_compat_socketcall_exit(void *ctx)
{
	__u64 thread = bpf_get_current_pid_tgid();
	long ret = probe_ret(ctx);

	if (!bpf_map_lookup_elem(&accepting, &thread))
		return 0;
	bpf_map_delete_elem(&accepting, &thread);
	return ret < 0 ? 0 : tag_sender(ret);
}

// The socket accepted is installed when the syscall returns its fd.
SEC("tracepoint/syscalls/sys_exit_accept4")
int nr1_exit_accept4(struct syscall_exit_ctx *ctx) { return ctx->ret < 0 ? 0 : tag_sender(ctx->ret); }

// accept(2) exists on some architectures only (amd64, not arm64).
SEC("tracepoint/syscalls/sys_exit_accept")
int nr1_exit_accept(struct syscall_exit_ctx *ctx) { return ctx->ret < 0 ? 0 : tag_sender(ctx->ret); }

SEC("kretprobe/compat_accept")
int nr1_compat_exit_accept(void *ctx)
{
	long ret = probe_ret(ctx);

	return ret < 0 ? 0 : tag_sender(ret);
}
