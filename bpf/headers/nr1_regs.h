/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
// The registers a syscall saves, by architecture, relocated against the kernel's types:
// one object runs on amd64 and arm64 alike, and a field the kernel lacks is never read.
// amd64: the number in orig_ax; ax is -ENOSYS from the syscall's entry until its return
// value is stored; a 32-bit syscall (int $0x80, also from 64-bit code) sets TS_COMPAT in
// the thread's status for its length and the way back to user space, and takes its
// arguments in bx, cx, dx, si, di, bp. arm64: the number in syscallno; x0 is the first
// argument, kept in orig_x0, until the return value replaces it; a 32-bit task runs in
// AArch32 state (pstate), and a 64-bit one cannot make a 32-bit syscall.
#ifndef NR1_REGS_H
#define NR1_REGS_H

#define ENOSYS 38
#define TS_COMPAT 0x0002
#define PSR_MODE32_BIT 0x10

struct pt_regs___amd64 {
	unsigned long ax;
	unsigned long orig_ax;
	unsigned long bx;
	unsigned long cx;
	unsigned long dx;
	unsigned long si;
	unsigned long di;
	unsigned long bp;
} __attribute__((preserve_access_index));

struct pt_regs___arm64 {
	__u64 regs[31];
	__u64 pstate;
	__u64 orig_x0;
	__s32 syscallno;
} __attribute__((preserve_access_index));

struct thread_info___amd64 {
	__u32 status;
} __attribute__((preserve_access_index));

struct task_struct___regs {
	unsigned int ptrace;
	struct thread_info___amd64 thread_info;
} __attribute__((preserve_access_index));

// amd64 is a constant of the load, found in the kernel's types: no helper is called for
// it on every open's exit.
static __always_inline bool amd64(void)
{
	return bpf_core_field_exists(((struct task_struct___regs *)0)->thread_info.status);
}

// arm64 says whether every register read is found in the kernel's types: one that is
// not would fail the programs' load where the branch reading it is reachable, where it
// should only fail a self-test.
static __always_inline bool arm64(struct pt_regs___arm64 *r)
{
	return bpf_core_field_exists(r->syscallno) && bpf_core_field_exists(r->pstate) &&
	       bpf_core_field_exists(r->regs) && bpf_core_field_exists(r->orig_x0);
}

// The 32-bit syscalls' entries in the kernel (kprobes on __ia32_*, __arm64_compat_*),
// which the syscall tracepoints skip, run within the syscall: its arguments are in the
// registers the thread saved, its return value in the probe's.

// compat_arg is argument n (0 to 5) of the 32-bit syscall the current thread is within.
static __always_inline __u32 compat_arg(int n)
{
	void *regs = (void *)bpf_task_pt_regs(bpf_get_current_task_btf());

	if (amd64() && bpf_core_field_exists(((struct pt_regs___amd64 *)regs)->bp)) {
		struct pt_regs___amd64 *r = regs;

		switch (n) {
		case 0: return BPF_CORE_READ(r, bx);
		case 1: return BPF_CORE_READ(r, cx);
		case 2: return BPF_CORE_READ(r, dx);
		case 3: return BPF_CORE_READ(r, si);
		case 4: return BPF_CORE_READ(r, di);
		default: return BPF_CORE_READ(r, bp);
		}
	}
	if (arm64(regs) && n >= 0 && n < 6)
		return BPF_CORE_READ((struct pt_regs___arm64 *)regs, regs[n]);
	return 0;
}

// probe_ret is what the function a return probe (ctx) followed returned.
static __always_inline long probe_ret(void *ctx)
{
	if (bpf_core_field_exists(((struct pt_regs___amd64 *)ctx)->ax))
		return BPF_CORE_READ((struct pt_regs___amd64 *)ctx, ax);
	if (arm64(ctx))
		return BPF_CORE_READ((struct pt_regs___arm64 *)ctx, regs[0]);
	return -ENOSYS;
}

#endif
