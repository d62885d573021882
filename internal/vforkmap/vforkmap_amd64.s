// SPDX-License-Identifier: Apache-2.0

#include "textflag.h"

// func clone(fd, size uintptr) (pid, errno uintptr)
TEXT ·clone(SB), NOSPLIT, $0-32
	MOVQ	$0x4111, DI // CLONE_VM | CLONE_VFORK | SIGCHLD
	MOVQ	$0, SI
	MOVQ	$0, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$56, AX // clone
	SYSCALL
	CMPQ	AX, $0
	JNE	parent
	// The child: mmap(0, size, PROT_READ, MAP_SHARED, fd, 0), then exit(0), or exit(1) if it failed; it only
	// reads its parent's frame.
	MOVQ	$0, DI
	MOVQ	size+8(FP), SI
	MOVQ	$1, DX
	MOVQ	$1, R10
	MOVQ	fd+0(FP), R8
	MOVQ	$0, R9
	MOVQ	$9, AX // mmap
	SYSCALL
	MOVQ	$0, DI
	CMPQ	AX, $0xfffffffffffff001
	JLS	mapped
	MOVQ	$1, DI // a failed mapping: the parent sees exit status 1

mapped:
	MOVQ	$60, AX // exit
	SYSCALL

parent:
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	NEGQ	AX
	MOVQ	$0, pid+16(FP)
	MOVQ	AX, errno+24(FP)
	RET

ok:
	MOVQ	AX, pid+16(FP)
	MOVQ	$0, errno+24(FP)
	RET
