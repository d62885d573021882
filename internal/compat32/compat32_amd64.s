// SPDX-License-Identifier: Apache-2.0

#include "textflag.h"

// func int80(nr, a0, a1, a2, a3, a4, a5 uintptr) uintptr
// The i386 convention: the number in AX, the arguments in BX, CX, DX, SI, DI, BP, the
// result in AX. BP, the frame pointer, is kept in R12, which the kernel preserves.
TEXT ·int80(SB), NOSPLIT, $0-64
	MOVQ	BP, R12
	MOVQ	nr+0(FP), AX
	MOVQ	a0+8(FP), BX
	MOVQ	a1+16(FP), CX
	MOVQ	a2+24(FP), DX
	MOVQ	a3+32(FP), SI
	MOVQ	a4+40(FP), DI
	MOVQ	a5+48(FP), BP
	INT	$0x80
	MOVQ	R12, BP
	MOVQ	AX, ret+56(FP)
	RET
