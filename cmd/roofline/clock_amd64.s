//go:build !purego

#include "textflag.h"

// func addChain(n int) int
//
// n iterations of eight ADDQs, each waiting for the one before it (BX +=
// AX): on a core whose integer add has one cycle of latency, 8n cycles.
// The loop's own DECQ/JNZ run beside the chain.
TEXT ·addChain(SB), NOSPLIT, $0-16
	MOVQ n+0(FP), CX
	MOVQ $1, AX
	XORQ BX, BX
	TESTQ CX, CX
	JLE  done

loop:
	ADDQ AX, BX
	ADDQ AX, BX
	ADDQ AX, BX
	ADDQ AX, BX
	ADDQ AX, BX
	ADDQ AX, BX
	ADDQ AX, BX
	ADDQ AX, BX
	DECQ CX
	JNZ  loop

done:
	MOVQ BX, ret+8(FP)
	RET
