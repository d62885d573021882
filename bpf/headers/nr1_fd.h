/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The open file behind a descriptor of the current process, and how many references a
 * file has, shared by the programs that follow descriptors through syscalls. Include
 * after nr1_vmlinux.h and bpf_core_read.h. */
#ifndef NR1_FD_H
#define NR1_FD_H

/* fd_file is the file the current process's fd refers to, 0 when none. */
static __always_inline struct file *fd_file(__s64 fd)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct files_struct *files = BPF_CORE_READ(task, files);
	struct file **fds;
	struct file *file = 0;
	struct fdtable *fdt;

	if (fd < 0 || !files)
		return 0;
	fdt = BPF_CORE_READ(files, fdt);
	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	fds = BPF_CORE_READ(fdt, fd);
	if (bpf_core_read(&file, sizeof(file), &fds[fd]))
		return 0;
	return file;
}

#define FILE_REF_RELEASED 0xc000000000000000ULL

/* refs is the number of references to file: 0 once it is released. */
static __always_inline __s64 refs(struct file *file)
{
	if (bpf_core_field_exists(file->f_ref)) {
		__u64 c = BPF_CORE_READ(file, f_ref.refcnt.counter);

		return c >= FILE_REF_RELEASED ? 0 : (__s64)c + 1;
	}
	return BPF_CORE_READ((struct file___count *)file, f_count.counter);
}

#endif
