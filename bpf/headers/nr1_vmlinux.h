/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The few kernel types the NR1 footprint programs read. Fields are relocated against the
 * running kernel's BTF (CO-RE), so only names and types matter here, not layout. */
#ifndef NR1_VMLINUX_H
#define NR1_VMLINUX_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef __u16 umode_t;
typedef __u32 dev_t;
typedef _Bool bool;
#define true 1
#define false 0

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
};

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct seq_file;

struct kernfs_node {
	__u64 id;
};

struct cgroup;

/* A cgroup's own state: its parent's, up to the root's, which has none. */
struct cgroup_subsys_state {
	struct cgroup *cgroup;
	struct cgroup_subsys_state *parent;
};

struct cgroup {
	struct cgroup_subsys_state self;
	struct kernfs_node *kn;
};

struct css_set {
	struct cgroup *dfl_cgrp;
};

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
	unsigned long *close_on_exec;
	unsigned long *open_fds;
};

typedef struct {
	int counter;
} atomic_t;

typedef struct {
	__s64 counter;
} atomic_long_t;

struct files_struct {
	atomic_t count;
	struct fdtable *fdt;
};

struct ns_common {
	unsigned int inum;
};

struct net {
	struct ns_common ns;
};

struct nsproxy {
	struct net *net_ns;
};

struct mm_struct {
	unsigned long task_size;
	atomic_t mm_users;
};

struct signal_struct {
	atomic_t live;
	int nr_threads;
};

struct hlist_node {
	struct hlist_node *next;
	struct hlist_node **pprev;
};

struct hlist_head {
	struct hlist_node *first;
};

/* A process ID's tasks, by type: PIDTYPE_TGID's is the process's leader. */
struct pid {
	struct hlist_head tasks[4];
};

struct task_struct {
	__s32 pid;
	__s32 tgid;
	struct hlist_node pid_links[4];
	struct css_set *cgroups;
	struct files_struct *files;
	struct nsproxy *nsproxy;
	struct mm_struct *mm;
	struct signal_struct *signal;
	struct fs_struct *fs;
};

struct super_block {
	dev_t s_dev;
	unsigned long s_magic;
};

/* __i_nlink is in an anonymous union with i_nlink: found there by CO-RE. */
struct inode {
	umode_t i_mode;
	unsigned long i_ino;
	dev_t i_rdev;
	struct super_block *i_sb;
	unsigned int __i_nlink;
	__s64 i_size;
};

struct vfsmount {
	struct super_block *mnt_sb;
};

struct qstr {
	const unsigned char *name;
};

struct dentry {
	struct qstr d_name;
};

struct path {
	struct vfsmount *mnt;
	struct dentry *dentry;
};

struct fs_struct {
	struct path root;
};

/* A file's references: f_ref since Linux 6.13 (one reference reads 0), f_count before
 * (one reads 1). */
struct file_ref {
	atomic_long_t refcnt;
};

struct file___count {
	atomic_long_t f_count;
};

struct file {
	struct file_ref f_ref;
	const void *f_op;
	unsigned int f_mode;
	struct inode *f_inode;
	struct path f_path;
	void *private_data;
};

struct vm_area_struct {
	unsigned long vm_start;
	unsigned long vm_end;
	unsigned long vm_pgoff;
	struct file *vm_file;
};

struct bpf_iter_meta {
	struct seq_file *seq;
	__u64 session_id;
	__u64 seq_num;
};

struct bpf_iter__task_file {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
	__u32 fd;
	struct file *file;
};

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
};

struct bpf_iter__task_vma {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
	struct vm_area_struct *vma;
};

/* Files passed over a unix socket and not received yet: each message on the receiving
 * socket's queue carries them in its control block. */
struct sock;

struct sk_buff {
	struct sk_buff *next;
	struct sock *sk; /* the socket that sent it */
	char cb[48];
};

struct sk_buff_head {
	struct sk_buff *next;
};

struct sock_cgroup_data {
	struct cgroup *cgroup;
};

typedef struct {
	struct net *net;
} possible_net_t;

struct sock_common {
	unsigned short skc_family;
	possible_net_t skc_net;
};

struct socket;

struct sock {
	struct sock_common __sk_common;
	struct sk_buff_head sk_receive_queue;
	struct sock_cgroup_data sk_cgrp_data;
	struct socket *sk_socket; /* 0 once closed */
};

struct unix_sock {
	struct sock sk;
};

struct socket {
	struct sock *sk;
	struct file *file;
};

/* Files registered with an io_uring (IORING_REGISTER_FILES): the ring holds them open
 * with no fd. Newer kernels keep a table of resource nodes, older ones of fixed files. Each
 * entry is a struct file pointer whose low bits are flags. */
struct io_rsrc_node {
	unsigned long file_ptr;
};

struct io_rsrc_data {
	unsigned int nr;
	struct io_rsrc_node **nodes;
};

struct io_file_table {
	struct io_rsrc_data data;
};

struct io_ring_ctx {
	struct io_file_table file_table;
};

struct io_fixed_file {
	unsigned long file_ptr;
};

struct io_file_table___fixed {
	struct io_fixed_file *files;
};

struct io_ring_ctx___fixed {
	struct io_file_table___fixed file_table;
	unsigned int nr_user_files;
};

struct scm_fp_list {
	short count;
	struct file *fp[253];
};

/* pid: the sending process, when credentials were passed with the message (the sender
 * cannot name another process than its own without CAP_SYS_ADMIN over its PID namespace). */
struct unix_skb_parms {
	struct pid *pid;
	struct scm_fp_list *fp;
};

struct bpf_iter__unix {
	struct bpf_iter_meta *meta;
	struct unix_sock *unix_sk;
	__u32 uid;
};

#pragma clang attribute pop

/* The syscall tracepoints' context, as their format files give it (a stable layout:
 * common fields, the syscall number, then the arguments or the return value). */
struct syscall_enter_ctx {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__u64 args[6];
};

/* UAPI: a raw tracepoint's context, the tracepoint's arguments as they are. */
struct bpf_raw_tracepoint_args {
	__u64 args[0];
};

struct syscall_exit_ctx {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__s64 ret;
};

/* UAPI: the context of a cgroup device program. */
struct bpf_cgroup_dev_ctx {
	__u32 access_type; /* (access << 16) | type */
	__u32 major;
	__u32 minor;
};

#define BPF_DEVCG_DEV_CHAR 2

#endif
