// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

// The budget gate: an open of a gated NR1 character device (the hypervisor queue) by a
// process of a pod that already holds as many as it booked is refused with EDQUOT, before
// the driver is reached. The device program, attached once to the cgroup above every
// pod, finds the pod by walking the process's cgroup ancestors from the root, so a
// process moved into a child cgroup of any depth still counts against its pod.
//
// A pod's count moves with what the kernel reports: +1 when the device program lets an
// open through, -1 when that open then fails (the syscall's exit). The description an
// open made is remembered with the pod it counts against. No close, dup2, exec or exit
// is watched: a hook there would cost every close of the node. Instead, an open that
// would go past the booking first looks for the remembered descriptions that are gone
// (no reference left, or their memory reused for another file) and gives them back;
// only then is it refused. A grant is linked to its open's exit only within a native
// open syscall, which the device program reads from the thread's saved registers (or,
// where the loader's self-test finds them read wrong, from a mark the opens' entry
// tracepoints leave), or within a 32-bit open, which kprobes of its entry and return
// follow (on a kernel without kprobes, the registers and the raw syscall exit
// tracepoint): what no exit links (io_uring's opens; arm64's 32-bit openat2 where
// probes follow) stays counted.
// The gate errs on refusing, and user space sets the count from the footprint's
// measurement when the pod is quiet.

#include "headers/nr1_vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "headers/nr1_fd.h"
#include "headers/nr1_regs.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define LIBBPF_PIN_BY_NAME 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_DEVCG_ACC_READ (1ULL << 1)
#define BPF_DEVCG_ACC_WRITE (1ULL << 2)
#define S_IFMT 00170000
#define S_IFCHR 0020000
#define EDQUOT 122
#define MINORBITS 20
#define MAX_LEVEL 32
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

// What a pod's count is owed, in its budget's slot: the descriptions it opened that, at
// the last settle, another pod held (one it was given them by) and so were not in its
// measurement. Their releases pay this, not the count, which the settle already set
// without them. Written by user space at a settle; the programs only pay it.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PODS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __s64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} owed SEC(".maps");

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

// An open under way, by thread, from the syscall's entry to its exit: IN_OPEN (marked at
// the entry, where the opens' entry tracepoints link), then the pod the device program
// counted it for; 0 outside an open; POISONED after an open whose return leaves the
// thread's registers as they are within one (linking by registers). Cgroup ids are
// inode numbers, never 1 nor all ones.
#define IN_OPEN 1
#define POISONED (~0ULL)

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} opening SEC(".maps");

// A 32-bit open under way, by thread, from the kernel's entry of it to its return (both
// probed: no tracepoint sees a 32-bit syscall): IN_OPEN, then the pod the device program
// counted it for. Apart from opening, so that a return probe the kernel missed (more
// such opens under way than its instances) leaves a grant counted, never one a native
// open's failure would give back.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} compat_opening SEC(".maps");

// A syscall under way that asks the device's permission without opening it (access,
// inotify_add_watch, fanotify_mark): the device program lets it through uncounted.
// NATIVE_ASK by the native asks' tracepoints; COMPAT_ASK by the probes of the 32-bit
// asks' entries, trusted only with the thread's registers saying such an ask is under
// way, so that a return probe the kernel missed lets no later open through.
#define NATIVE_ASK 1
#define COMPAT_ASK 2

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} asking SEC(".maps");

// A description the gate let through, by its address: the pod it counts against, and
// its inode, which tells it from another file made later at the same address (a
// description's memory is reused for files only, so it stays readable).
struct charge {
	__u64 pod;
	__u64 inode;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct charge);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} charges SEC(".maps");

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

// How the device program knows that it runs within a native open syscall, before the
// syscall's exit, set by the loader: by the thread's saved registers where its self-test
// reads them right (link_by_registers), else by the opens' entry tracepoints, which cost
// every open of the node their dispatch. And the numbers of the native syscalls that
// open, for the architecture (NO_SYSCALL where it has no such call).
#define NO_SYSCALL (-2L)
volatile const bool link_by_registers = false;
volatile const long nr_openat = NO_SYSCALL, nr_openat2 = NO_SYSCALL,
		    nr_open_by_handle_at = NO_SYSCALL, nr_open = NO_SYSCALL, nr_creat = NO_SYSCALL;

// in_native_syscall says whether the current thread is within a native syscall, before
// its return value is stored, and which (nr). What runs on the thread's way back to user
// space (task work: an io_uring request linked to another) sees the registers of the
// syscall it returns from with its return value in them. A thread a tracer holds is not
// trusted: the tracer may have written its registers.
static __always_inline bool in_native_syscall(long *nr)
{
	struct task_struct___regs *task = (void *)bpf_get_current_task_btf();
	void *regs = (void *)bpf_task_pt_regs((struct task_struct *)task);

	if (BPF_CORE_READ(task, ptrace))
		return false;
	if (amd64() && bpf_core_field_exists(((struct pt_regs___amd64 *)regs)->orig_ax) &&
	    bpf_core_field_exists(((struct pt_regs___amd64 *)regs)->ax)) {
		struct pt_regs___amd64 *r = regs;

		if (BPF_CORE_READ(task, thread_info.status) & TS_COMPAT)
			return false;
		*nr = (long)BPF_CORE_READ(r, orig_ax);
		return (long)BPF_CORE_READ(r, ax) == -ENOSYS;
	}
	if (arm64(regs)) {
		struct pt_regs___arm64 *r = regs;

		if (BPF_CORE_READ(r, pstate) & PSR_MODE32_BIT)
			return false;
		*nr = BPF_CORE_READ(r, syscallno);
		return BPF_CORE_READ(r, regs[0]) == BPF_CORE_READ(r, orig_x0);
	}
	return false;
}

static __always_inline bool open_syscall(long nr)
{
	return nr == nr_openat || nr == nr_openat2 || nr == nr_open_by_handle_at || nr == nr_open ||
	       nr == nr_creat;
}

// Where no kprobe follows the 32-bit opens (a kernel without kprobes), the loader sets
// compat_by_exit: the device program then knows a 32-bit open by the thread's registers,
// as it knows a native one, and the raw syscall exit tracepoint, which every syscall
// reaches (32-bit ones too, unlike the syscall tracepoints), links it. And the numbers
// of the 32-bit syscalls that open, and of 32-bit ptrace, in the 32-bit sibling's table
// (NO_SYSCALL where it has no such call).
volatile const bool compat_by_exit = false;
volatile const long compat_nr_open = NO_SYSCALL, compat_nr_creat = NO_SYSCALL, compat_nr_openat = NO_SYSCALL,
		    compat_nr_openat2 = NO_SYSCALL, compat_nr_open_by_handle_at = NO_SYSCALL,
		    compat_nr_ptrace = NO_SYSCALL;
// The 32-bit syscalls that ask the device's permission without opening it.
volatile const long compat_nr_access = NO_SYSCALL, compat_nr_faccessat = NO_SYSCALL,
		    compat_nr_faccessat2 = NO_SYSCALL, compat_nr_inotify_add_watch = NO_SYSCALL,
		    compat_nr_fanotify_mark = NO_SYSCALL;

static __always_inline bool compat_open_syscall(long nr)
{
	return nr == compat_nr_open || nr == compat_nr_creat || nr == compat_nr_openat || nr == compat_nr_openat2 ||
	       nr == compat_nr_open_by_handle_at;
}

static __always_inline bool compat_ask_syscall(long nr)
{
	return nr == compat_nr_access || nr == compat_nr_faccessat || nr == compat_nr_faccessat2 ||
	       nr == compat_nr_inotify_add_watch || nr == compat_nr_fanotify_mark;
}

// compat_syscall says whether the current thread makes a 32-bit syscall, and which
// (nr): amd64's TS_COMPAT lasts the syscall and its way back to user space; an arm64
// task in AArch32 state makes only 32-bit ones.
static __always_inline bool compat_syscall(long *nr)
{
	struct task_struct___regs *task = (void *)bpf_get_current_task_btf();
	void *regs;

	// Loads through the trusted pointers, not probe reads, and on amd64 the thread's
	// state tested before its registers are asked for: every syscall of the node comes
	// here where compat_by_exit.
	if (amd64() && bpf_core_field_exists(((struct pt_regs___amd64 *)0)->orig_ax)) {
		if (!(task->thread_info.status & TS_COMPAT))
			return false;
		regs = (void *)bpf_task_pt_regs((struct task_struct *)task);
		*nr = (int)((struct pt_regs___amd64 *)regs)->orig_ax;
		return true;
	}
	regs = (void *)bpf_task_pt_regs((struct task_struct *)task);
	if (arm64(regs)) {
		struct pt_regs___arm64 *r = regs;

		if (!(r->pstate & PSR_MODE32_BIT))
			return false;
		*nr = r->syscallno;
		return true;
	}
	return false;
}

// in_compat says whether the current thread is within a 32-bit syscall, before its
// return value is stored, as in_native_syscall tells a native one, and which (nr);
// never for a thread a tracer holds.
static __always_inline bool in_compat(long *nr)
{
	struct task_struct___regs *task = (void *)bpf_get_current_task_btf();
	void *regs;

	// The thread's state first: every gated open, native ones too, asks it.
	if (!compat_syscall(nr) || BPF_CORE_READ(task, ptrace))
		return false;
	regs = (void *)bpf_task_pt_regs((struct task_struct *)task);
	if (amd64() && bpf_core_field_exists(((struct pt_regs___amd64 *)regs)->ax))
		return (long)BPF_CORE_READ((struct pt_regs___amd64 *)regs, ax) == -ENOSYS;
	if (arm64(regs))
		return BPF_CORE_READ((struct pt_regs___arm64 *)regs, regs[0]) ==
		       BPF_CORE_READ((struct pt_regs___arm64 *)regs, orig_x0);
	return false;
}

// returns_as_under_way says whether an open's return leaves the registers as they are
// within an open (amd64: it returned -ENOSYS, as a seccomp filter may make it; arm64: it
// returned its first argument): task work on the way back to user space would then pass
// for the open itself.
static __always_inline bool returns_as_under_way(long ret)
{
	long nr;

	if (amd64())
		return ret == -ENOSYS;
	return in_native_syscall(&nr);
}

// The pods one of whose processes called ptrace, which can write a thread's registers
// (a tracer in a pod traces only its own pod's processes): their grants are never linked
// by registers. Kept until the pod is forgotten.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PODS);
	__type(key, __u64);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tracers SEC(".maps");

// link_grant leaves the pod id of a grant for the exit of the native open it is made
// within, if it is made within one; else it stays counted, unlinked.
static __always_inline void link_grant(__u64 thread, __u64 id)
{
	__u64 *slot = bpf_map_lookup_elem(&compat_opening, &thread);
	long nr = NO_SYSCALL;

	// Within a 32-bit open, which its return probe links. A mark its return probe missed
	// takes the thread's next grant too, which then stays counted until a settle.
	if (slot && *slot == IN_OPEN) {
		*slot = id;
		return;
	}
	// Within a 32-bit open that no probe follows, which the exit tracepoint links; not
	// on a thread poisoned by the last one's return.
	if (compat_by_exit && in_compat(&nr) && compat_open_syscall(nr)) {
		if ((slot && *slot == POISONED) || bpf_map_lookup_elem(&tracers, &id))
			return;
		if (slot)
			*slot = id;
		else
			bpf_map_update_elem(&compat_opening, &thread, &id, BPF_ANY);
		return;
	}
	slot = bpf_map_lookup_elem(&opening, &thread);
	if (!link_by_registers) {
		if (slot && *slot == IN_OPEN)
			*slot = id;
		return;
	}
	if ((slot && *slot == POISONED) || bpf_map_lookup_elem(&tracers, &id))
		return;
	if (!in_native_syscall(&nr) || !open_syscall(nr))
		return;
	if (slot)
		*slot = id;
	else
		bpf_map_update_elem(&opening, &thread, &id, BPF_ANY);
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

static __always_inline void release(__u64 id)
{
	__u32 *slot = bpf_map_lookup_elem(&pods, &id);
	struct budget *b = slot ? bpf_map_lookup_elem(&budgets, slot) : 0;

	if (!b)
		return;
	// moves first: a settle that read held before this sees moves changed.
	__sync_fetch_and_add(&b->moves, 1);
	__sync_fetch_and_add(&b->held, -1);
	__sync_fetch_and_add(&b->released, 1);
}

// gated_file says whether file is a gated device's.
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

// give_back releases the charge at key, once, whoever finds it first: it pays what the
// pod is owed first.
static __always_inline bool give_back(__u64 *key, __u64 id)
{
	__u32 *slot;
	__s64 *debt;

	if (bpf_map_delete_elem(&charges, key))
		return false;
	slot = bpf_map_lookup_elem(&pods, &id);
	debt = slot ? bpf_map_lookup_elem(&owed, slot) : 0;
	if (debt && __sync_fetch_and_add(debt, -1) > 0) {
		struct budget *b = bpf_map_lookup_elem(&budgets, slot);

		if (b) {
			__sync_fetch_and_add(&b->moves, 1);
			__sync_fetch_and_add(&b->released, 1);
		}
		return true;
	}
	if (debt)
		__sync_fetch_and_add(debt, 1);
	release(id);
	return true;
}

struct reclaim {
	__u64 pod;
	bool released; // one of pod's: a flag, not a count, so that the verifier's walk of
		       // the callback converges
};

// reclaim_gone gives back a charge whose description is gone, whichever pod's it is.
static long reclaim_gone(void *map, __u64 *key, struct charge *c, struct reclaim *r)
{
	struct file *file = (struct file *)*key;
	__u64 pod = c->pod;

	if (refs(file) > 0 && (__u64)BPF_CORE_READ(file, f_inode) == c->inode)
		return 0;
	if (give_back(key, pod) && pod == r->pod)
		r->released = true;
	return 0;
}

#define TAKE_TRIES 4

// take counts one more open against b, if it fits its booking: of openers racing for
// the last queue, exactly one gets it. An open that does not fit writes nothing: a pod
// whose opens are refused, over and over, stays quiet for the settle that would find its
// count too high. moves goes first, so that a settle that read held before the change
// sees it moved, and sets nothing. Openers racing past TAKE_TRIES compare-and-swaps take
// by adding and taking back, which moves the count even when it refuses.
static __always_inline bool take(struct budget *b)
{
	for (int i = 0; i < TAKE_TRIES; i++) {
		__s64 held = *(volatile __s64 *)&b->held;

		if (held >= *(volatile __s64 *)&b->booked)
			return false;
		__sync_fetch_and_add(&b->moves, 1);
		if (__sync_val_compare_and_swap(&b->held, held, held + 1) == held)
			return true;
	}
	__sync_fetch_and_add(&b->moves, 1);
	if (__sync_fetch_and_add(&b->held, 1) < b->booked)
		return true;
	__sync_fetch_and_add(&b->held, -1);
	return false;
}

// take_reclaimed is take past the booking by the count: the descriptions gone since
// they were counted are given back first, here, where a release matters. A function of
// its own, so that the verifier follows it apart from the walk up the pod's cgroups.
__noinline int take_reclaimed(__u64 id)
{
	struct reclaim r = {.pod = id};
	__u32 *slot = bpf_map_lookup_elem(&pods, &id);
	struct budget *b = slot ? bpf_map_lookup_elem(&budgets, slot) : 0;

	if (!b)
		return 0;
	bpf_for_each_map_elem(&charges, reclaim_gone, &r, 0);
	// Whether this walk gave anything back or another did first, the count may fit now.
	return take(b);
}

// nr1_gate_reclaim gives back every charge whose description is gone, run by user space
// before it reads the counts to settle them: a count settled with gone charges still
// in the map would be lowered twice.
SEC("syscall")
int nr1_gate_reclaim(void *ctx)
{
	struct reclaim r = {};

	bpf_for_each_map_elem(&charges, reclaim_gone, &r, 0);
	return 0;
}

// compat_asks says whether the thread, of pod id, is within a 32-bit syscall that asks
// the device's permission without opening it: by its registers, and where probes follow
// the 32-bit calls, by their mark (asks) too; where the raw syscall exit does, unless
// the thread is poisoned by an earlier 32-bit ask's or open's return, or its pod is a
// tracer's (which may have written the registers at a syscall's exit, and let go).
static __always_inline bool compat_asks(__u64 thread, __u64 *asks, __u64 id)
{
	long nr = NO_SYSCALL;
	__u64 *slot;

	if (!in_compat(&nr) || !compat_ask_syscall(nr))
		return false;
	if (!compat_by_exit)
		return asks && *asks == COMPAT_ASK;
	if (bpf_map_lookup_elem(&tracers, &id))
		return false;
	slot = bpf_map_lookup_elem(&compat_opening, &thread);
	return !slot || *slot != POISONED;
}

SEC("cgroup/dev")
int nr1_gate(struct bpf_cgroup_dev_ctx *ctx)
{
	struct gate_dev dev = {.major = ctx->major, .minor = ctx->minor};
	__u64 thread, id = 0, *asks;
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
	if (asks && *asks == NATIVE_ASK)
		return 1;
	b = pod(&id);
	if (compat_asks(thread, asks, id))
		return 1;
	if (!b) {
		__u64 *refuse = bpf_map_lookup_elem(&node, &setting);

		if (refuse && *refuse) {
			node_add(UNKNOWN_REFUSED);
			return 0;
		}
		node_add(UNKNOWN_ALLOWED);
		return 1;
	}
	if (!take(b) && !take_reclaimed(id)) {
		__sync_fetch_and_add(&b->refused, 1);
		// The open fails with EDQUOT, not the device cgroup's EPERM: the opener is told
		// it is past its booking, not that it may never open the device.
		bpf_set_retval(-EDQUOT);
		return 0;
	}
	__sync_fetch_and_add(&b->granted, 1);
	// The exit of the open links the grant to its description. Outside an open syscall
	// the gate follows (io_uring's openat; arm64's 32-bit openat2, which shares the
	// native entry) no exit will: the grant stays counted, the queue is held, and the
	// measurement settles it.
	link_grant(thread, id);
	return 1;
}

// link_open links the open the device program let through for pod id to the description
// it made, the fd ret, or gives the grant back if the open failed (ret < 0).
static __always_inline int link_open(__u64 id, long ret)
{
	struct charge c, *old;
	struct file *file;
	__u64 key;

	if (id == IN_OPEN || id == POISONED || !id)
		return 0;
	if (ret < 0) {
		release(id);
		return 0;
	}
	file = fd_file(ret);
	// Another thread may have put another file at the fd since (dup2): that one is not
	// this grant's, which then stays counted.
	if (!file || !gated_file(file))
		return 0;
	key = (__u64)file;
	// A charge already at this address is of a description gone since, whose address
	// this open's took (a worker's queue freed at its exit, the next worker's open: the
	// common case, which the count had room for, so no walk gave it back); or, when
	// another thread put a live description at the fd (dup2), of that one. Only the fd
	// holds a description this open made: then the old one is gone, and its charge is
	// given back, to whichever pod it was. A description held more than once may be
	// another's: this grant then stays counted (erring on refusing) until a settle. A
	// thread that puts another description at the fd and closes its source in that
	// window has it taken for this open's: its pod may then hold one more than counted,
	// which the footprint measures and the ladders act on.
	old = bpf_map_lookup_elem(&charges, &key);
	if (old) {
		if (refs(file) != 1)
			return 0;
		give_back(&key, old->pod);
	}
	c.pod = id;
	c.inode = (__u64)BPF_CORE_READ(file, f_inode);
	bpf_map_update_elem(&charges, &key, &c, BPF_ANY);
	return 0;
}

// exit_open links the open the device program let through to the description it made,
// or gives it back if the open failed.
static __always_inline int exit_open(struct syscall_exit_ctx *ctx)
{
	__u64 thread = bpf_get_current_pid_tgid(), *slot, id, poisoned = POISONED;
	bool poison;

	// After an open that returns as if still under way, nothing links until the next
	// open's return: what runs on the way back to user space would pass for this open.
	poison = link_by_registers && returns_as_under_way(ctx->ret) && under_gate();
	slot = bpf_map_lookup_elem(&opening, &thread);
	if (!slot) {
		if (poison)
			bpf_map_update_elem(&opening, &thread, &poisoned, BPF_ANY);
		return 0;
	}
	id = *slot;
	*slot = poison ? POISONED : 0;
	return link_open(id, ctx->ret);
}

// nr1_gate_registers is the loader's self-test of linking by registers: run from user
// space through bpf(2), it answers the number of the syscall it runs within as the device
// program reads it, -1 when it reads none under way. Anything but bpf's number, and the
// loader links by the opens' entry tracepoints instead.
SEC("syscall")
int nr1_gate_registers(void *ctx)
{
	long nr = -1;

	if (!in_native_syscall(&nr))
		return -1;
	return nr;
}

// A process of a pod calling ptrace, which can write the registers of the threads it
// traces, all of its own pod: that pod's grants are never linked by registers again.
static __always_inline int called_ptrace(void)
{
	__u64 id = 0;
	__u8 one = 1;

	if (!link_by_registers || !under_gate() || !pod(&id))
		return 0;
	bpf_map_update_elem(&tracers, &id, &one, BPF_ANY);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_ptrace")
int nr1_gate_enter_ptrace(struct syscall_enter_ctx *ctx) { return called_ptrace(); }

// A 32-bit ptrace, which a 64-bit process can make too (int $0x80): the loader attaches
// this to the kernel's entry of it, which no tracepoint sees.
SEC("kprobe/compat_ptrace")
int nr1_gate_compat_ptrace(void *ctx) { return called_ptrace(); }

// A syscall's entry and exit programs, named after it: `make generate` gives each its
// Go name and its section its tracepoint, which the loader attaches.
#define SYSCALL(name, enter, exit)                                                   \
	SEC("tracepoint/syscalls/sys_enter_" #name)                                  \
	int nr1_gate_enter_##name(struct syscall_enter_ctx *ctx) { return enter; }   \
	SEC("tracepoint/syscalls/sys_exit_" #name)                                   \
	int nr1_gate_exit_##name(struct syscall_exit_ctx *ctx) { return exit; }

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

// Where registers do not link, the entry marks the thread as in a native open: only then
// does the exit trust the grant it finds, so that a grant no exit followed (a 32-bit
// syscall's, io_uring's) is never given back by the thread's next failed open. The
// loader attaches these entries only there.
static __always_inline int enter_open(void)
{
	if (under_gate())
		mark(&opening, IN_OPEN);
	return 0;
}

SYSCALL(openat, enter_open(), exit_open(ctx))
SYSCALL(openat2, enter_open(), exit_open(ctx))
SYSCALL(open_by_handle_at, enter_open(), exit_open(ctx))
// open(2) and creat(2) exist on some architectures only (amd64, not arm64).
SYSCALL(open, enter_open(), exit_open(ctx))
SYSCALL(creat, enter_open(), exit_open(ctx))

// The 32-bit opens (open, openat; openat2 on amd64), which a 64-bit process can make
// too (int $0x80): the loader attaches these to the kernel's entries of them, which only
// 32-bit syscalls reach. Linked as a native open is, so that a 32-bit CG's workers that
// come and go are given back what they held as a 64-bit CG's are. A pod that calls
// ptrace cannot move what these read: the entry probe runs once the syscall is chosen,
// the return probe before the thread is back in user space.
SEC("kprobe/compat_gate_open")
int nr1_gate_compat_enter_open(void *ctx)
{
	__u64 thread, *slot;

	if (under_gate()) {
		mark(&compat_opening, IN_OPEN);
		return 0;
	}
	// A thread outside the gate whose id a gated one had, whose return probe the kernel
	// missed: what that one left must not be given back by this open's failure.
	thread = bpf_get_current_pid_tgid();
	slot = bpf_map_lookup_elem(&compat_opening, &thread);
	if (slot)
		*slot = 0;
	return 0;
}

SEC("kretprobe/compat_gate_open")
int nr1_gate_compat_exit_open(void *ctx)
{
	__u64 thread = bpf_get_current_pid_tgid(), *slot, id;

	slot = bpf_map_lookup_elem(&compat_opening, &thread);
	if (!slot)
		return 0;
	id = *slot;
	*slot = 0;
	return link_open(id, probe_ret(ctx));
}

// compat_returns_as_under_way says whether a 32-bit syscall's return (ret) leaves the
// registers as they are within it (amd64: -ENOSYS, as a seccomp filter may make it;
// arm64: its first argument): what runs on the thread's way back to user space would
// then pass for a 32-bit open the device program may mark.
static __always_inline bool compat_returns_as_under_way(long ret)
{
	void *regs = (void *)bpf_task_pt_regs(bpf_get_current_task_btf());

	if (amd64())
		return ret == -ENOSYS;
	if (arm64(regs))
		return ret == (long)((struct pt_regs___arm64 *)regs)->orig_x0;
	return true;
}

// The exit of every syscall of the node, attached only where compat_by_exit: a 32-bit
// open's links the grant the device program left for it, as the return probe would; a
// 32-bit ptrace's marks its pod a tracer (a tracer's pod is never linked by registers).
// A native syscall's costs one test of the thread's state. After a 32-bit open that
// returns as if still under way, the thread is poisoned until its next 32-bit exit: a
// grant made on its way back to user space (task work) is never marked, and stays
// counted, rather than be given back by a later exit that did not make it.
SEC("raw_tp/sys_exit")
int nr1_gate_compat_exit(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 thread, *slot, id, poisoned = POISONED;
	long nr = NO_SYSCALL, ret = (long)ctx->args[1];
	bool poison;

	if (!compat_syscall(&nr))
		return 0;
	if (nr == compat_nr_ptrace)
		return called_ptrace();
	poison = (compat_open_syscall(nr) || compat_ask_syscall(nr)) && compat_returns_as_under_way(ret) && under_gate();
	thread = bpf_get_current_pid_tgid();
	slot = bpf_map_lookup_elem(&compat_opening, &thread);
	if (!slot) {
		if (poison)
			bpf_map_update_elem(&compat_opening, &thread, &poisoned, BPF_ANY);
		return 0;
	}
	id = *slot;
	*slot = poison ? POISONED : 0;
	if (!compat_open_syscall(nr))
		return 0;
	return link_open(id, ret);
}

static __always_inline int enter_ask(__u64 kind)
{
	if (under_gate())
		mark(&asking, kind);
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

SYSCALL(faccessat, enter_ask(NATIVE_ASK), exit_ask())
SYSCALL(faccessat2, enter_ask(NATIVE_ASK), exit_ask())
// access(2) exists on some architectures only (amd64, not arm64).
SYSCALL(access, enter_ask(NATIVE_ASK), exit_ask())
SYSCALL(inotify_add_watch, enter_ask(NATIVE_ASK), exit_ask())
SYSCALL(fanotify_mark, enter_ask(NATIVE_ASK), exit_ask())

// The 32-bit asks, which no tracepoint sees: the loader attaches these to the kernel's
// entries of those only 32-bit syscalls reach.
SEC("kprobe/compat_gate_ask")
int nr1_gate_compat_enter_ask(void *ctx) { return enter_ask(COMPAT_ASK); }

SEC("kretprobe/compat_gate_ask")
int nr1_gate_compat_exit_ask(void *ctx) { return exit_ask(); }

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
