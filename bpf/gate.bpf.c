// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

// The budget gate: an open of a gated NR1 character device (the hypervisor queue) by a
// process of a pod that already holds as many as it booked is refused with EDQUOT, before
// the driver is reached. The device program, attached once to the cgroup above every
// pod, finds the pod by walking the process's cgroup ancestors from the root, so a
// process moved into a child cgroup of any depth still counts against its pod.
//
// A pod's count moves with what the kernel reports: +1 when the device program lets an
// open through, -1 when that open then fails (the syscall's exit), and -1 when the last
// reference to a description the gate let through goes away at close, dup2 over it, an
// exec closing it or the exit of the last process holding it. What the tracepoints
// cannot see (a description closed by close_range, or given away and dropped elsewhere,
// or an exit racing another) leaves the count high: the gate errs on refusing, and user
// space sets the count from the footprint's measurement when the pod is quiet.

#include "headers/nr1_vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "headers/nr1_fd.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define LIBBPF_PIN_BY_NAME 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_DEVCG_ACC_READ (1ULL << 1)
#define BPF_DEVCG_ACC_WRITE (1ULL << 2)
#define S_IFMT 00170000
#define S_IFCHR 0020000
#define EBADF 9
#define EDQUOT 122
#define MINORBITS 20
#define MAX_LEVEL 32
#define MAX_FD_WORDS (1 << 14) // 1M descriptors
#define FILE_REF_RELEASED 0xc000000000000000ULL
#define UID_LEN 36
#define NAME_TAIL (UID_LEN + 4 + 6) // [/-]pod<uid>[.slice]

struct gate_dev {
	__u32 major;
	__u32 minor;
};

// The gated devices: the NR1's queue devices.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct gate_dev);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} gated SEC(".maps");

// A pod's budget, in the slot user space gave it. booked is written by user space
// only; held is moved by both sides with atomic operations (user space through the
// map's memory, to set it from the footprint's measurement); the counters only grow.
struct budget {
	__s64 booked;
	__s64 held;
	__u64 granted;  // opens let through
	__u64 refused;  // opens refused
	__u64 released; // descriptions given back (failed opens included)
	__u64 moves;    // every change of held, so user space knows a quiet pod
};

#define MAX_PODS 4096
#define BPF_F_MMAPABLE (1U << 10)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PODS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct budget);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} budgets SEC(".maps");

// The pods under the gate: a pod's cgroup id in the v2 tree, and its budget's slot.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PODS);
	__type(key, __u64);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pods SEC(".maps");

// The node's settings and the opens of processes under the gate whose pod has no budget.
enum { SETTING_REFUSE_UNKNOWN = 0, UNKNOWN_ALLOWED = 1, UNKNOWN_REFUSED = 2, SETTING_LEVEL = 3, NODE_SLOTS = 4 };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NODE_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} node SEC(".maps");

// An open under way, by thread, from the syscall's entry to its exit: IN_OPEN, then the
// pod the device program counted it for; 0 outside an open. Cgroup ids are inode
// numbers, never 1.
#define IN_OPEN 1

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} opening SEC(".maps");

// A syscall under way that asks the device's permission without opening it (access,
// inotify_add_watch, fanotify_mark): the device program lets it through uncounted.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} asking SEC(".maps");

// The descriptions the gate let through and the pod each counts against, until the last
// reference goes; one deleted here is released once, whoever saw it go first.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} charged SEC(".maps");

// A close, dup2 or dup3 under way whose fd held the last reference to a charged
// description.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} closing SEC(".maps");

// The cgroup the device program is attached to: the tracepoints fire for every process
// of the node, and do their work only for those below it.
#define BPF_MAP_TYPE_CGROUP_ARRAY 8

struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} root SEC(".maps");

static __always_inline bool under_gate(void)
{
	return bpf_current_task_under_cgroup(&root, 0) == 1;
}

// pod finds the budget of the current process's pod: the first of its cgroup's
// ancestors, from the root down, that has one.
static __always_inline struct budget *pod(__u64 *id)
{
	for (int level = 1; level <= MAX_LEVEL; level++) {
		__u64 cg = bpf_get_current_ancestor_cgroup_id(level);
		__u32 *slot;

		if (!cg)
			return 0;
		slot = bpf_map_lookup_elem(&pods, &cg);
		if (slot) {
			*id = cg;
			return bpf_map_lookup_elem(&budgets, slot);
		}
	}
	return 0;
}

static __always_inline void node_add(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&node, &slot);

	if (v)
		__sync_fetch_and_add(v, 1);
}

SEC("cgroup/dev")
int nr1_gate(struct bpf_cgroup_dev_ctx *ctx)
{
	struct gate_dev dev = {.major = ctx->major, .minor = ctx->minor};
	__u64 thread, id = 0, *slot, *asks;
	struct budget *b;
	__u32 setting = SETTING_REFUSE_UNKNOWN;

	if ((ctx->access_type & 0xffff) != BPF_DEVCG_DEV_CHAR)
		return 1;
	if (!((ctx->access_type >> 16) & (BPF_DEVCG_ACC_READ | BPF_DEVCG_ACC_WRITE)))
		return 1;
	if (!bpf_map_lookup_elem(&gated, &dev))
		return 1;
	thread = bpf_get_current_pid_tgid();
	asks = bpf_map_lookup_elem(&asking, &thread);
	if (asks && *asks)
		return 1;
	b = pod(&id);
	if (!b) {
		__u64 *refuse = bpf_map_lookup_elem(&node, &setting);

		if (refuse && *refuse) {
			node_add(UNKNOWN_REFUSED);
			return 0;
		}
		node_add(UNKNOWN_ALLOWED);
		return 1;
	}
	// Taken first, given back when past the booking: of openers racing for the last
	// queue, exactly one gets it.
	if (__sync_fetch_and_add(&b->held, 1) >= b->booked) {
		__sync_fetch_and_add(&b->held, -1);
		__sync_fetch_and_add(&b->refused, 1);
		// The open fails with EDQUOT, not the device cgroup's EPERM: the opener is
		// told it is past its booking, not that it may never open the device.
		bpf_set_retval(-EDQUOT);
		return 0;
	}
	__sync_fetch_and_add(&b->granted, 1);
	__sync_fetch_and_add(&b->moves, 1);
	// Outside an open syscall (io_uring's openat) the grant stays counted: the queue is
	// held, and what no exit confirms the measurement settles.
	slot = bpf_map_lookup_elem(&opening, &thread);
	if (slot && *slot == IN_OPEN)
		*slot = id;
	return 1;
}

static __always_inline void release(__u64 id)
{
	__u32 *slot = bpf_map_lookup_elem(&pods, &id);
	struct budget *b = slot ? bpf_map_lookup_elem(&budgets, slot) : 0;

	if (!b)
		return;
	__sync_fetch_and_add(&b->held, -1);
	__sync_fetch_and_add(&b->released, 1);
	__sync_fetch_and_add(&b->moves, 1);
}


// refs is the number of references to file.
static __always_inline __s64 refs(struct file *file)
{
	if (bpf_core_field_exists(file->f_ref)) {
		__u64 c = BPF_CORE_READ(file, f_ref.refcnt.counter);

		return c >= FILE_REF_RELEASED ? 0 : (__s64)c + 1;
	}
	return BPF_CORE_READ((struct file___count *)file, f_count.counter);
}

// gated_file says whether file is a gated device's: a description whose release was not
// seen leaves its address charged, and the address may come back as any file.
static __always_inline bool gated_file(struct file *file)
{
	struct inode *inode = BPF_CORE_READ(file, f_inode);
	struct gate_dev dev;
	dev_t rdev;

	if (!inode || (BPF_CORE_READ(inode, i_mode) & S_IFMT) != S_IFCHR)
		return false;
	rdev = BPF_CORE_READ(inode, i_rdev);
	dev.major = rdev >> MINORBITS;
	dev.minor = rdev & ((1U << MINORBITS) - 1);
	return bpf_map_lookup_elem(&gated, &dev) != 0;
}

// last says whether file is a charged description that dropping one reference releases,
// and if so which pod it counts against.
static __always_inline __u64 last(struct file *file)
{
	__u64 key = (__u64)file, *id;

	if (!file || !gated_file(file) || refs(file) != 1)
		return 0;
	id = bpf_map_lookup_elem(&charged, &key);
	return id ? *id : 0;
}

static __always_inline void forget(struct file *file)
{
	__u64 key = (__u64)file, *id = bpf_map_lookup_elem(&charged, &key);
	__u64 pod_id;

	if (!id)
		return;
	pod_id = *id;
	if (bpf_map_delete_elem(&charged, &key) == 0)
		release(pod_id);
}

// mark sets the current thread's entry in a per-thread map to v. A thread's entry is
// written in place once made: an update takes the map's locks, a lookup none.
static __always_inline void mark(void *map, __u64 v)
{
	__u64 thread = bpf_get_current_pid_tgid(), *slot;

	slot = bpf_map_lookup_elem(map, &thread);
	if (slot)
		*slot = v;
	else
		bpf_map_update_elem(map, &thread, &v, BPF_ANY);
}

static __always_inline int enter_open(void)
{
	if (under_gate())
		mark(&opening, IN_OPEN);
	return 0;
}

static __always_inline int exit_open(struct syscall_exit_ctx *ctx)
{
	__u64 thread = bpf_get_current_pid_tgid(), *slot, id;
	struct file *file;

	slot = bpf_map_lookup_elem(&opening, &thread);
	if (!slot)
		return 0;
	id = *slot;
	*slot = 0;
	if (id == IN_OPEN || !id)
		return 0;
	if (ctx->ret < 0) {
		release(id);
		return 0;
	}
	file = fd_file(ctx->ret);
	if (file) {
		__u64 key = (__u64)file;

		bpf_map_update_elem(&charged, &key, &id, BPF_ANY);
	}
	return 0;
}

// A syscall's entry and exit programs, named after it: `make generate` gives each its
// Go name and its section its tracepoint, which the loader attaches.
#define SYSCALL(name, enter, exit)                                                   \
	SEC("tracepoint/syscalls/sys_enter_" #name)                                  \
	int nr1_gate_enter_##name(struct syscall_enter_ctx *ctx) { return enter; }   \
	SEC("tracepoint/syscalls/sys_exit_" #name)                                   \
	int nr1_gate_exit_##name(struct syscall_exit_ctx *ctx) { return exit; }

SYSCALL(openat, enter_open(), exit_open(ctx))
SYSCALL(openat2, enter_open(), exit_open(ctx))
SYSCALL(open_by_handle_at, enter_open(), exit_open(ctx))
// open(2) and creat(2) exist on some architectures only (amd64, not arm64).
SYSCALL(open, enter_open(), exit_open(ctx))
SYSCALL(creat, enter_open(), exit_open(ctx))

static __always_inline int enter_ask(void)
{
	if (under_gate())
		mark(&asking, 1);
	return 0;
}

static __always_inline int exit_ask(void)
{
	__u64 thread = bpf_get_current_pid_tgid();
	__u64 *asks = bpf_map_lookup_elem(&asking, &thread);

	if (asks)
		*asks = 0;
	return 0;
}

SYSCALL(faccessat, enter_ask(), exit_ask())
SYSCALL(faccessat2, enter_ask(), exit_ask())
// access(2) exists on some architectures only (amd64, not arm64).
SYSCALL(access, enter_ask(), exit_ask())
SYSCALL(inotify_add_watch, enter_ask(), exit_ask())
SYSCALL(fanotify_mark, enter_ask(), exit_ask())

// A close, or a dup2/dup3 over an open fd, drops one reference: when it is the last of
// a charged description, the exit (the fd really gone) releases it.
static __always_inline int enter_drop(__s64 fd)
{
	__u64 thread = bpf_get_current_pid_tgid(), id, key;
	struct file *file;

	if (!under_gate())
		return 0;
	file = fd_file(fd);
	key = (__u64)file;
	id = last(file);
	if (!id)
		return 0;
	bpf_map_update_elem(&closing, &thread, &key, BPF_ANY);
	return 0;
}

// dropped says whether the syscall that ended with ret removed the fd: close removes it
// whatever it returns but EBADF, dup2 and dup3 only when they succeed.
static __always_inline int exit_drop(struct syscall_exit_ctx *ctx, bool dropped)
{
	__u64 thread = bpf_get_current_pid_tgid(), *file;

	file = bpf_map_lookup_elem(&closing, &thread);
	if (!file)
		return 0;
	if (dropped)
		forget((struct file *)*file);
	bpf_map_delete_elem(&closing, &thread);
	return 0;
}

SYSCALL(close, enter_drop((__s32)ctx->args[0]), exit_drop(ctx, ctx->ret != -EBADF))
// dup2(2) exists on some architectures only (amd64, not arm64); dup2 of an fd onto
// itself drops nothing.
SYSCALL(dup2, ctx->args[0] == ctx->args[1] ? 0 : enter_drop((__s32)ctx->args[1]), exit_drop(ctx, ctx->ret >= 0))
SYSCALL(dup3, enter_drop((__s32)ctx->args[1]), exit_drop(ctx, ctx->ret >= 0))

// The slots of an exiting process's table that hold each charged description, by
// thread and description: a description dup()ed within the table holds a reference per
// slot, and the exit drops them all.
struct slot_key {
	__u64 thread;
	__u64 file;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct slot_key);
	__type(value, __s64);
} slots SEC(".maps");

struct table_scan {
	struct file **fds;
	unsigned long *open_fds;
	unsigned long *close_on_exec;
	__u64 thread;
	__u32 words;
	bool release; // the second pass: release what the first tallied
	bool exec;    // one pass over the slots closed on exec, each marked pending
};

#define PENDING -1

static long scan_word(__u64 i, struct table_scan *s)
{
	unsigned long word = 0, cloexec = 0;

	if (i >= s->words)
		return 1;
	if (bpf_probe_read_kernel(&word, sizeof(word), &s->open_fds[i]) || !word)
		return 0;
	if (s->exec) {
		if (bpf_probe_read_kernel(&cloexec, sizeof(cloexec), &s->close_on_exec[i]))
			return 0;
		word &= cloexec;
	}
	for (int bit = 0; bit < 64; bit++) {
		struct slot_key key = {.thread = s->thread};
		struct file *file = 0;
		__s64 one = 1, *n;

		if (!(word & (1UL << bit)))
			continue;
		if (bpf_probe_read_kernel(&file, sizeof(file), &s->fds[i * 64 + bit]) || !file)
			continue;
		key.file = (__u64)file;
		if (!s->release) {
			__s64 pending = PENDING;

			if (!bpf_map_lookup_elem(&charged, &key.file) || !gated_file(file))
				continue;
			if (s->exec) {
				bpf_map_update_elem(&slots, &key, &pending, BPF_ANY);
				continue;
			}
			n = bpf_map_lookup_elem(&slots, &key);
			if (n)
				*n += 1;
			else
				bpf_map_update_elem(&slots, &key, &one, BPF_ANY);
			continue;
		}
		n = bpf_map_lookup_elem(&slots, &key);
		if (!n)
			continue;
		if (refs(file) == *n)
			forget(file);
		bpf_map_delete_elem(&slots, &key);
	}
	return 0;
}

// scan_table releases the charged descriptions of a table whose every reference is a
// slot of it (the table of a process sharing it with no other); with exec, it marks
// pending under thread the charged descriptions of the slots closed on exec.
static __always_inline void scan_table(struct files_struct *files, __u64 thread, bool exec)
{
	struct fdtable *fdt = BPF_CORE_READ(files, fdt);
	struct table_scan s = {.thread = thread, .exec = exec};

	if (!fdt)
		return;
	s.fds = BPF_CORE_READ(fdt, fd);
	s.open_fds = BPF_CORE_READ(fdt, open_fds);
	s.close_on_exec = BPF_CORE_READ(fdt, close_on_exec);
	s.words = (BPF_CORE_READ(fdt, max_fds) + 63) / 64;
	if (s.words > MAX_FD_WORDS)
		s.words = MAX_FD_WORDS;
	bpf_loop(s.words, scan_word, &s, 0);
	if (exec)
		return;
	s.release = true;
	bpf_loop(s.words, scan_word, &s, 0);
}

// The last thread of a process sharing no fd table leaves: each charged description
// whose every reference is a slot of its table is released. Only a pod that holds some
// is scanned.
SEC("tracepoint/sched/sched_process_exit")
int nr1_gate_exit_process(void *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct files_struct *files = BPF_CORE_READ(task, files);
	struct budget *b;
	__u64 id;

	if (!under_gate() || !files || BPF_CORE_READ(files, count.counter) != 1)
		return 0;
	b = pod(&id);
	if (!b || b->held <= 0)
		return 0;
	scan_table(files, bpf_get_current_pid_tgid(), false);
	return 0;
}

// An exec closes the slots marked close-on-exec, after ending the process's other
// threads and unsharing its table: which descriptions that released is read at its
// exit, where a released one has no reference left and is not yet freed (the kernel
// frees it on the way back to user space). The candidates are marked at its entry,
// under the process's own key (a thread that execs takes the leader's id).
static __always_inline __u64 exec_key(void)
{
	return (bpf_get_current_pid_tgid() & ~0xffffffffULL) | 0xffffffffULL;
}

static __always_inline int enter_exec(void)
{
	struct task_struct *task;
	struct files_struct *files;
	struct budget *b;
	__u64 id;

	if (!under_gate())
		return 0;
	task = (struct task_struct *)bpf_get_current_task();
	files = BPF_CORE_READ(task, files);
	if (!files)
		return 0;
	b = pod(&id);
	if (!b || b->held <= 0)
		return 0;
	scan_table(files, exec_key(), true);
	return 0;
}

struct exec_end {
	__u64 key;
	bool done;
};

static long end_exec(void *map, struct slot_key *key, __s64 *n, struct exec_end *e)
{
	if (key->thread != e->key)
		return 0;
	if (e->done && refs((struct file *)key->file) == 0)
		forget((struct file *)key->file);
	bpf_map_delete_elem(&slots, key);
	return 0;
}

static __always_inline int exit_exec(struct syscall_exit_ctx *ctx)
{
	struct exec_end e = {.key = exec_key(), .done = ctx->ret == 0};

	if (!under_gate())
		return 0;
	bpf_for_each_map_elem(&slots, end_exec, &e, 0);
	return 0;
}

SYSCALL(execve, enter_exec(), exit_exec(ctx))
SYSCALL(execveat, enter_exec(), exit_exec(ctx))

// A pod booked before its cgroup exists, by its UID (36 characters, as the API server
// writes it): the budget's slot, bound to the pod's cgroup id as the cgroup is made, so
// that the booking is in place before any of its processes can run.
struct pod_uid {
	char uid[UID_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PODS);
	__type(key, struct pod_uid);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} uids SEC(".maps");

struct cgroup_mkdir_ctx {
	__u64 common;
	int root;
	int level;
	__u64 id;
	__u32 path; // __data_loc: the offset in the record, and the length above it
};

// A cgroup made in the v2 tree whose name is a pod's (pod<uid> by the kubelet's
// cgroupfs driver, <parent>-pod<uid with '_' for '-'>.slice by its systemd driver) is
// bound to the slot its UID was booked in. The name is read from the end of the path
// the tracepoint records, at fixed offsets. Only the levels where the kubelet makes a
// pod's cgroup count (one below the gate's cgroup, or two, below a QoS class): a pod's
// own processes may make cgroups below their container's and name them as they like.
SEC("tracepoint/cgroup/cgroup_mkdir")
int nr1_gate_mkdir(struct cgroup_mkdir_ctx *ctx)
{
	char tail[NAME_TAIL];
	struct pod_uid key;
	__u32 off = ctx->path & 0xffff, len = ctx->path >> 16, *slot, setting = SETTING_LEVEL;
	__u64 id = ctx->id, *level;
	int uid = NAME_TAIL - UID_LEN, sep;

	if (ctx->root != 0 || len < NAME_TAIL + 1) // v2 only (its hierarchy id is 0)
		return 0;
	level = bpf_map_lookup_elem(&node, &setting);
	if (!level || !*level || (ctx->level != *level + 1 && ctx->level != *level + 2))
		return 0;
	// The last NAME_TAIL characters of the path, the terminating NUL left out.
	if (bpf_probe_read_kernel(tail, sizeof(tail), (void *)ctx + off + len - 1 - NAME_TAIL))
		return 0;
	if (tail[NAME_TAIL - 6] == '.' && tail[NAME_TAIL - 5] == 's' && tail[NAME_TAIL - 4] == 'l' &&
	    tail[NAME_TAIL - 3] == 'i' && tail[NAME_TAIL - 2] == 'c' && tail[NAME_TAIL - 1] == 'e') {
		uid -= 6;
		sep = '-';
	} else {
		sep = '/';
	}
	if (tail[uid - 3] != 'p' || tail[uid - 2] != 'o' || tail[uid - 1] != 'd' || tail[uid - 4] != sep)
		return 0;
	for (int i = 0; i < UID_LEN; i++) {
		char c = tail[uid + i];

		key.uid[i] = c == '_' ? '-' : c;
	}
	slot = bpf_map_lookup_elem(&uids, &key);
	if (slot)
		bpf_map_update_elem(&pods, &id, slot, BPF_NOEXIST);
	return 0;
}
