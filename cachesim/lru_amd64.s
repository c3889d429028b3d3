//go:build !purego

#include "textflag.h"

// func lruRange16AVX512(tags *uint32, set, sets, ways uint64, key, w uint32, n uint64) (misses, wbs uint64)
//
// accessNarrowGo for 1 to 16 ways: n consecutive lines from set on, one set
// (up to 16 entries of 32 bits) per 512-bit register. Per line: load the
// set (masked to its ways), compare every entry|1 with the key at once,
// take the hit's position by TZCNT (ways-1 on a miss, where a sentinel bit
// stands), rotate the entries before it back by one lane (VALIGND under a
// mask of lanes 1..pos), write the line's entry into lane 0 and store the
// set back. No branch depends on hit or miss.
//
// Registers:
//	SI  tags, DI  the current set, R11 the end of the sets, R8 a set's bytes
//	R14 1<<(ways-1), the sentinel: pos is ways-1 when nothing matches
//	R12 (key-1) | w: lane 0's entry on a miss (on a hit the old dirty bit
//	    is ored in)
//	BX  lines left, R9 misses, R10 write-backs
//	Z31 key in every lane, Z30 1 in every lane
//	K1  the set's lanes, K6 lane 0
// ACCOUNT takes AX, the mask of lanes holding the line, and R13, the
// mask of dirty lanes, and leaves in CX the line's position (the hit, or
// ways-1 on a miss, from the sentinel bit in R14), counts a miss in R9
// and a dirty eviction in R10, and leaves in DX lane 0's new entry (the
// line's key in R12, dirty if the hit entry was). Clobbers AX and R13.
#define ACCOUNT \
	MOVL AX, CX      \
	ORL R14, CX      \
	TZCNTL CX, CX    \
	SHRXL CX, R13, R13 \
	ANDL $1, R13     \
	CMPL AX, $1      \
	SBBQ AX, AX      \
	SUBQ AX, R9      \
	MOVL R13, DX     \
	ANDL AX, DX      \
	ADDQ DX, R10     \
	ANDNL R13, AX, DX \
	ORL R12, DX

TEXT ·lruRange16AVX512(SB), NOSPLIT, $0-64
	MOVQ tags+0(FP), SI
	MOVQ set+8(FP), DI
	MOVQ sets+16(FP), R11
	MOVQ ways+24(FP), CX
	MOVL key+32(FP), AX
	MOVL w+36(FP), R12
	MOVQ n+40(FP), BX

	LEAQ (CX*4), R8      // bytes per set
	IMULQ R8, DI
	ADDQ SI, DI          // the first set
	IMULQ R8, R11
	ADDQ SI, R11         // one past the last set

	MOVL $1, R14
	SHLL CX, R14
	LEAL -1(R14), DX
	KMOVW DX, K1         // lanes 0..ways-1
	SHRL $1, R14         // 1<<(ways-1)
	MOVL $1, DX
	KMOVW DX, K6         // lane 0
	VPBROADCASTD DX, Z30
	VPBROADCASTD AX, Z31
	LEAL -1(AX), DX
	ORL DX, R12          // (key-1) | w

	XORQ R9, R9
	XORQ R10, R10

loop:
	VMOVDQU32.Z (DI), K1, Z0  // the set; lanes past ways are zero
	VPORD Z30, Z0, Z1
	VPCMPEQD Z31, Z1, K2      // the lane holding the line, if any
	VPTESTMD Z30, Z0, K3      // dirty lanes
	KMOVW K2, AX
	KMOVW K3, R13
	ACCOUNT
	MOVL $2, AX
	SHLXL CX, AX, AX
	SUBL $2, AX
	KMOVW AX, K4              // lanes 1..pos
	VALIGND $15, Z0, Z0, K4, Z0   // lane i takes lane i-1
	VPBROADCASTD DX, K6, Z0
	VMOVDQU32 Z0, K1, (DI)
	ADDQ R8, DI
	CMPQ DI, R11
	JEQ wrap
next:
	DECQ BX
	JNZ loop

	MOVQ R9, misses+48(FP)
	MOVQ R10, wbs+56(FP)
	VZEROUPPER
	RET

wrap:
	// The next line is in the next round of sets: its key is 2 more.
	MOVQ SI, DI
	ADDL $2, R12
	MOVL R12, AX
	ORL $1, AX
	VPBROADCASTD AX, Z31
	JMP next

// func lruRange32AVX512(tags *uint32, set, sets, ways uint64, key, w uint32, n uint64) (misses, wbs uint64)
//
// lruRange16AVX512 for 17 to 32 ways: a set's first 16 entries in Z0, the
// rest in Z2 (masked by K7), the masks of both halves joined into one
// 32-bit word. Registers as there.
TEXT ·lruRange32AVX512(SB), NOSPLIT, $0-64
	MOVQ tags+0(FP), SI
	MOVQ set+8(FP), DI
	MOVQ sets+16(FP), R11
	MOVQ ways+24(FP), CX
	MOVL key+32(FP), AX
	MOVL w+36(FP), R12
	MOVQ n+40(FP), BX

	LEAQ (CX*4), R8      // bytes per set
	IMULQ R8, DI
	ADDQ SI, DI          // the first set
	IMULQ R8, R11
	ADDQ SI, R11         // one past the last set

	DECL CX
	MOVL $1, R14
	SHLL CX, R14         // 1<<(ways-1), the sentinel
	SUBL $15, CX
	MOVL $1, DX
	SHLL CX, DX
	DECL DX
	KMOVW DX, K7         // lanes 16..ways-1, as lanes 0..ways-17 of Z2
	MOVL $1, DX
	KMOVW DX, K6         // lane 0
	VPBROADCASTD DX, Z30
	VPBROADCASTD AX, Z31
	LEAL -1(AX), DX
	ORL DX, R12          // (key-1) | w

	XORQ R9, R9
	XORQ R10, R10

loop32:
	VMOVDQU32 (DI), Z0
	VMOVDQU32.Z 64(DI), K7, Z2
	VPORD Z30, Z0, Z1
	VPCMPEQD Z31, Z1, K2
	VPORD Z30, Z2, Z3
	VPCMPEQD Z31, Z3, K3
	VPTESTMD Z30, Z0, K4
	VPTESTMD Z30, Z2, K5
	KMOVW K2, AX
	KMOVW K3, DX
	SHLL $16, DX
	ORL DX, AX                // lanes holding the line
	KMOVW K4, R13
	KMOVW K5, DX
	SHLL $16, DX
	ORL DX, R13               // dirty lanes
	ACCOUNT
	MOVQ $2, AX
	SHLXQ CX, AX, AX
	SUBQ $2, AX               // lanes 1..pos of 32
	KMOVW AX, K4
	SHRQ $16, AX
	KMOVW AX, K5
	VALIGND $15, Z0, Z2, K5, Z2   // Z2's lane 0 takes Z0's lane 15
	VALIGND $15, Z0, Z0, K4, Z0
	VPBROADCASTD DX, K6, Z0
	VMOVDQU32 Z0, (DI)
	VMOVDQU32 Z2, K7, 64(DI)
	ADDQ R8, DI
	CMPQ DI, R11
	JEQ wrap32
next32:
	DECQ BX
	JNZ loop32

	MOVQ R9, misses+48(FP)
	MOVQ R10, wbs+56(FP)
	VZEROUPPER
	RET

wrap32:
	MOVQ SI, DI
	ADDL $2, R12
	MOVL R12, AX
	ORL $1, AX
	VPBROADCASTD AX, Z31
	JMP next32
