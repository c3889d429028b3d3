//go:build !purego

#include "textflag.h"
#include "macros_amd64.h"

// ZPTAIL is packed_amd64.s's PTAIL: the next W row's masked tail (at AX,
// R11 bytes) times A's masked tail in Y13 into ACC.
#define ZPTAIL(ACC) \
	VMASKMOVPS (AX), Y14, Y9 \
	VFMADD231PS Y9, Y13, ACC \
	ADDQ R11, AX

// ZROWS puts the four pair registers of one A row (rows 0-1, 2-3, 4-5,
// 6-7 of the panel) into Y0..Y7, row by row, for REDUCE8.
#define ZROWS(P0, P1, P2, P3, Y0P, Y1P, Y2P, Y3P) \
	VEXTRACTF32X8 $1, P3, Y7 \
	VMOVAPS Y3P, Y6          \
	VEXTRACTF32X8 $1, P2, Y5 \
	VMOVAPS Y2P, Y4          \
	VEXTRACTF32X8 $1, P1, Y3 \
	VMOVAPS Y1P, Y2          \
	VEXTRACTF32X8 $1, P0, Y1 \
	VMOVAPS Y0P, Y0

// ZSTORE8 adds beta·C to the eight sums in Y0 (beta != 0) and stores them
// at D. Clobbers DX and Y15.
#define ZSTORE8(D, PUT) \
	MOVL  beta+64(FP), DX           \
	TESTL DX, DX                    \
	JZ    PUT                       \
	VBROADCASTSS beta+64(FP), Y15   \
	VFMADD231PS D, Y15, Y0          \
PUT:                                \
	VMOVUPS Y0, D

// func gemvPackedZ(panels, k int, a, w, c *float32, beta float32)
//
// gemvPacked8 with two W rows to a register: in PackNT's order a chunk's
// eight rows of eight columns are four 64-byte pairs of rows, each
// multiplied by a's chunk broadcast to both halves (VBROADCASTF32X8), so
// lane l of each half sums its row's columns p ≡ l (mod 8) in increasing
// p, as every GemmNT kernel does. The halves then go to Y0..Y7, row by
// row, for the masked tail and REDUCE8, and every element has
// gemvPacked8's bits.
//
// Registers: CX the panels left; SI a; BX a's chunk; AX W; DI c; R9 the
// whole chunks; DX their count-down; R10 k%8, R11 its bytes; Y13 a's
// masked tail, Y14 its mask; Z0..Z3 the panel's rows 0-1, 2-3, 4-5, 6-7.
TEXT ·gemvPackedZ(SB), NOSPLIT, $0-44
	MOVQ panels+0(FP), CX
	MOVQ k+8(FP), R9
	MOVQ R9, R10
	ANDQ $7, R10
	SHRQ $3, R9
	MOVQ R10, R11
	SHLQ $2, R11
	MOVQ a+16(FP), SI
	MOVQ w+24(FP), AX
	MOVQ c+32(FP), DI
	TESTQ R10, R10
	JZ    zpnext
	LANEMASK(R10, X14, Y14)
	MOVQ R9, BX
	SHLQ $5, BX
	VMASKMOVPS (SI)(BX*1), Y14, Y13

zpnext:
	TESTQ CX, CX
	JZ    zpdone
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	MOVQ  SI, BX
	MOVQ  R9, DX
	TESTQ DX, DX
	JZ    zphalves

zploop:
	VBROADCASTF32X8 (BX), Z8
	VFMADD231PS 0(AX), Z8, Z0
	VFMADD231PS 64(AX), Z8, Z1
	VFMADD231PS 128(AX), Z8, Z2
	VFMADD231PS 192(AX), Z8, Z3
	ADDQ $32, BX
	ADDQ $256, AX
	DECQ DX
	JNZ  zploop

zphalves:
	VEXTRACTF32X8 $1, Z3, Y7
	VMOVAPS Y3, Y6
	VEXTRACTF32X8 $1, Z2, Y5
	VMOVAPS Y2, Y4
	VEXTRACTF32X8 $1, Z1, Y3
	VMOVAPS Y1, Y2
	VEXTRACTF32X8 $1, Z0, Y1
	TESTQ R10, R10
	JZ    zpreduce
	ZPTAIL(Y0)
	ZPTAIL(Y1)
	ZPTAIL(Y2)
	ZPTAIL(Y3)
	ZPTAIL(Y4)
	ZPTAIL(Y5)
	ZPTAIL(Y6)
	ZPTAIL(Y7)

zpreduce:
	REDUCE8
	MOVL  beta+40(FP), DX
	TESTL DX, DX
	JZ    zpput
	VBROADCASTSS beta+40(FP), Y15
	VFMADD231PS (DI), Y15, Y0

zpput:
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	DECQ CX
	JMP  zpnext

zpdone:
	VZEROUPPER
	RET

// Z3PASS is one pass of gemmPackedZ3 over a chunk with three rows of A,
// Z2PASS with two; each ends by counting R8 down.
#define Z3PASS \
	VBROADCASTF32X8 (SI)(BX*1), Z8  \
	VBROADCASTF32X8 (R12)(BX*1), Z9 \
	VBROADCASTF32X8 (R13)(BX*1), Z10 \
	VMOVUPS 0(AX), Z12              \
	VMOVUPS 64(AX), Z13             \
	VMOVUPS 128(AX), Z14            \
	VMOVUPS 192(AX), Z15            \
	VFMADD231PS Z12, Z8, Z16        \
	VFMADD231PS Z13, Z8, Z17        \
	VFMADD231PS Z14, Z8, Z18        \
	VFMADD231PS Z15, Z8, Z19        \
	VFMADD231PS Z12, Z9, Z20        \
	VFMADD231PS Z13, Z9, Z21        \
	VFMADD231PS Z14, Z9, Z22        \
	VFMADD231PS Z15, Z9, Z23        \
	VFMADD231PS Z12, Z10, Z24       \
	VFMADD231PS Z13, Z10, Z25       \
	VFMADD231PS Z14, Z10, Z26       \
	VFMADD231PS Z15, Z10, Z27       \
	ADDQ $32, BX                    \
	ADDQ $256, AX                   \
	DECQ R8

#define Z2PASS \
	VBROADCASTF32X8 (SI)(BX*1), Z8  \
	VBROADCASTF32X8 (R12)(BX*1), Z9 \
	VMOVUPS 0(AX), Z12              \
	VMOVUPS 64(AX), Z13             \
	VMOVUPS 128(AX), Z14            \
	VMOVUPS 192(AX), Z15            \
	VFMADD231PS Z12, Z8, Z16        \
	VFMADD231PS Z13, Z8, Z17        \
	VFMADD231PS Z14, Z8, Z18        \
	VFMADD231PS Z15, Z8, Z19        \
	VFMADD231PS Z12, Z9, Z20        \
	VFMADD231PS Z13, Z9, Z21        \
	VFMADD231PS Z14, Z9, Z22        \
	VFMADD231PS Z15, Z9, Z23        \
	ADDQ $32, BX                    \
	ADDQ $256, AX                   \
	DECQ R8

// func gemmPackedZ3(panels, k8, rows int, a *float32, lda int, w, c *float32, ldc int, beta float32)
//
// gemmPacked3x4 with two W rows to a register: two or three rows of A
// (rows) against the 8·panels rows of a W in PackNT's order with k =
// 8·k8, a whole panel (four pairs of rows) per pass, each W pair loaded
// once and multiplied by every A row's chunk broadcast to both halves.
// Each element is computed as every GemmNT kernel computes it; the sums
// of A row i go through REDUCE8 and are stored, beta·C added first by one
// fused multiply-add (beta == 0: C is not read). Unlike gemmPacked3x4
// it prefetches nothing: with these products on AMD's Zen 5, groups that
// prefetched the next block of a W from L3 or DRAM ran slower than the
// first row pulling each block (gemmPackedAsm).
//
// Registers: SI, R12, R13 the A rows; BX the byte offset into them; AX
// the panel's chunk; R8 the chunks left; CX the panels left; DI C's first
// row at the panel; R10 ldc in bytes; R11 rows. A row i's sums are in
// Z(16+4i)..Z(19+4i), the W pairs of a chunk in Z12..Z15, the A chunks in
// Z8..Z10.
TEXT ·gemmPackedZ3(SB), NOSPLIT, $0-68
	MOVQ panels+0(FP), CX
	MOVQ rows+16(FP), R11
	MOVQ a+24(FP), SI
	MOVQ lda+32(FP), R10
	SHLQ $2, R10
	LEAQ (SI)(R10*1), R12
	LEAQ (R12)(R10*1), R13
	CMPQ R11, $3
	CMOVQLT R12, R13
	MOVQ w+40(FP), AX
	MOVQ c+48(FP), DI
	MOVQ ldc+56(FP), R10
	SHLQ $2, R10

z3panel:
	TESTQ CX, CX
	JZ    z3done
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27
	XORQ BX, BX
	MOVQ k8+8(FP), R8
	CMPQ R11, $3
	JLT  z2loop

z3loop:
	Z3PASS
	JNZ  z3loop
	JMP  z3sums

	// Two rows: the same without the third row's products.
z2loop:
	Z2PASS
	JNZ  z2loop

z3sums:
	ZROWS(Z16, Z17, Z18, Z19, Y16, Y17, Y18, Y19)
	REDUCE8
	ZSTORE8((DI), z3put0)
	ZROWS(Z20, Z21, Z22, Z23, Y20, Y21, Y22, Y23)
	REDUCE8
	ZSTORE8((DI)(R10*1), z3put1)
	CMPQ R11, $3
	JLT  z3next
	ZROWS(Z24, Z25, Z26, Z27, Y24, Y25, Y26, Y27)
	REDUCE8
	ZSTORE8((DI)(R10*2), z3put2)

z3next:
	ADDQ $32, DI
	DECQ CX
	JMP  z3panel

z3done:
	VZEROUPPER
	RET
