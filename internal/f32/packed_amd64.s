//go:build !purego

#include "textflag.h"
#include "macros_amd64.h"

// PTAIL adds the next W row's masked tail (at AX, R11 bytes) times A's
// masked tail in Y13 to ACC, the way gemmNT1x8's MFMA does.
#define PTAIL(ACC) \
	VMASKMOVPS (AX), Y14, Y9 \
	VFMADD231PS Y9, Y13, ACC \
	ADDQ R11, AX

// func gemvPacked8(panels, k int, a, w, c *float32, beta float32)
//
// c[j] = beta*c[j] + Σ_p a[p]·W[j][p] for the 8·panels rows of a W in
// PackNT's order (packed.go): per panel, each whole chunk's eight rows of
// eight columns (256 bytes), then the rows' last k%8 columns, row by row.
// W is read as one sequential stream. Every element is computed as the
// GemmNT kernels compute it (gemm_amd64.s): lane l of a row's sum takes
// the columns p ≡ l (mod 8) in increasing p, the last k%8 masked into
// lanes 0.., then REDUCE8, then beta·c by one more fused multiply-add;
// beta == 0 means c is not read.
//
// Registers: CX the panels left; SI a; BX a's chunk; AX W; DI c; R9 the
// whole chunks; DX their count-down; R10 k%8, R11 its bytes; Y13 a's
// masked tail, Y14 its mask.
TEXT ·gemvPacked8(SB), NOSPLIT, $0-44
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
	JZ    pnext
	LANEMASK(R10, X14, Y14)
	MOVQ R9, BX
	SHLQ $5, BX
	VMASKMOVPS (SI)(BX*1), Y14, Y13

pnext:
	TESTQ CX, CX
	JZ    pdone
	ZERO8
	MOVQ  SI, BX
	MOVQ  R9, DX
	TESTQ DX, DX
	JZ    ptail

ploop:
	VMOVUPS (BX), Y8
	VFMADD231PS 0(AX), Y8, Y0
	VFMADD231PS 32(AX), Y8, Y1
	VFMADD231PS 64(AX), Y8, Y2
	VFMADD231PS 96(AX), Y8, Y3
	VFMADD231PS 128(AX), Y8, Y4
	VFMADD231PS 160(AX), Y8, Y5
	VFMADD231PS 192(AX), Y8, Y6
	VFMADD231PS 224(AX), Y8, Y7
	ADDQ $32, BX
	ADDQ $256, AX
	DECQ DX
	JNZ  ploop

ptail:
	TESTQ R10, R10
	JZ    preduce
	PTAIL(Y0)
	PTAIL(Y1)
	PTAIL(Y2)
	PTAIL(Y3)
	PTAIL(Y4)
	PTAIL(Y5)
	PTAIL(Y6)
	PTAIL(Y7)

preduce:
	REDUCE8
	MOVL  beta+40(FP), DX
	TESTL DX, DX
	JZ    pput
	VBROADCASTSS beta+40(FP), Y15
	VFMADD231PS (DI), Y15, Y0

pput:
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	DECQ CX
	JMP  pnext

pdone:
	VZEROUPPER
	RET

// FMA34(OFF, ACC0, ACC1, ACC2) multiplies the W chunk at OFF(BX) by the
// three A chunks in Y12..Y14 into ACC0..ACC2 (one W row, three A rows);
// FMA24 the same for the two A chunks in Y12, Y13.
#define FMA34(OFF, ACC0, ACC1, ACC2) \
	VMOVUPS OFF(BX), Y15          \
	VFMADD231PS Y15, Y12, ACC0    \
	VFMADD231PS Y15, Y13, ACC1    \
	VFMADD231PS Y15, Y14, ACC2

#define FMA24P(OFF, ACC0, ACC1) \
	VMOVUPS OFF(BX), Y15          \
	VFMADD231PS Y15, Y12, ACC0    \
	VFMADD231PS Y15, Y13, ACC1

// Q3PASS is one pass of gemmPacked3x4 over a chunk with three rows of A,
// Q2PASS with two; each ends by counting R8 down.
#define Q3PASS \
	VMOVUPS (SI)(DX*1), Y12  \
	VMOVUPS (R12)(DX*1), Y13 \
	VMOVUPS (R13)(DX*1), Y14 \
	FMA34(0, Y0, Y4, Y8)     \
	FMA34(32, Y1, Y5, Y9)    \
	FMA34(64, Y2, Y6, Y10)   \
	FMA34(96, Y3, Y7, Y11)   \
	ADDQ $32, DX             \
	ADDQ $256, BX            \
	DECQ R8

#define Q2PASS \
	VMOVUPS (SI)(DX*1), Y12  \
	VMOVUPS (R12)(DX*1), Y13 \
	FMA24P(0, Y0, Y4)        \
	FMA24P(32, Y1, Y5)       \
	FMA24P(64, Y2, Y6)       \
	FMA24P(96, Y3, Y7)       \
	ADDQ $32, DX             \
	ADDQ $256, BX            \
	DECQ R8

// func gemmPacked3x4(panels, k8, rows int, a *float32, lda int, w, c *float32, ldc int, beta float32, pf *float32, pfStep int)
//
// C = A·Wᵀ + beta·C for two or three rows of A (rows) against the
// 8·panels rows of a W in PackNT's order with k = 8·k8 (no column tail):
// each panel in two halves of four W rows, each half one pass over the
// panel's chunks with twelve (or eight) sums, row i of A and W row r of
// the half in Y(4i+r). Each element is computed as every GemmNT kernel
// computes it: eight lanes, then REDUCE4 (REDUCE8's order), then beta·C
// by one more fused multiply-add; beta == 0 means C is not read.
//
// With pfStep > 0 each pass over a chunk also prefetches the line at pf
// into L2 and moves pf on by pfStep bytes, so that the next block of a W
// coming from DRAM arrives while this one is multiplied; with 0 the
// loops have no prefetch.
//
// Registers: SI, R12, R13 the A rows; DX the byte offset into them; AX
// the panel; R14 the half's start; BX its chunk; R8 the chunks left; CX
// the panels left; DI C's first row at the half; R10 ldc in bytes; R11
// rows; R15 pf and R9 pfStep.
TEXT ·gemmPacked3x4(SB), NOSPLIT, $0-88
	MOVQ panels+0(FP), CX
	MOVQ pf+72(FP), R15
	MOVQ pfStep+80(FP), R9
	MOVQ rows+16(FP), R11
	MOVQ a+24(FP), SI
	MOVQ lda+32(FP), R10
	SHLQ $2, R10
	LEAQ (SI)(R10*1), R12
	LEAQ (R12)(R10*1), R13
	MOVQ w+40(FP), AX
	MOVQ c+48(FP), DI
	MOVQ ldc+56(FP), R10
	SHLQ $2, R10

q3panel:
	TESTQ CX, CX
	JZ    q3done
	MOVQ  AX, R14

q3half:
	MOVQ  R14, BX
	ZERO8
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	XORQ  DX, DX
	MOVQ  k8+8(FP), R8
	TESTQ R9, R9
	JNZ   q3pf
	CMPQ  R11, $3
	JLT   q2loop

q3loop:
	Q3PASS
	JNZ  q3loop
	JMP  q3sum

q2loop:
	Q2PASS
	JNZ  q2loop
	JMP  q3sum

	// The same loops with a prefetch a pass.
q3pf:
	CMPQ R11, $3
	JLT  q2loopp

q3loopp:
	PREFETCHT1 (R15)
	ADDQ R9, R15
	Q3PASS
	JNZ  q3loopp
	JMP  q3sum

q2loopp:
	PREFETCHT1 (R15)
	ADDQ R9, R15
	Q2PASS
	JNZ  q2loopp

q3sum:
	REDUCE4(Y0, Y1, Y2, Y3, X0, X2)
	REDUCE4(Y4, Y5, Y6, Y7, X4, X6)
	REDUCE4(Y8, Y9, Y10, Y11, X8, X10)
	MOVL  beta+64(FP), DX
	TESTL DX, DX
	JZ    q3put
	VBROADCASTSS beta+64(FP), X15
	VFMADD231PS (DI), X15, X0
	VFMADD231PS (DI)(R10*1), X15, X4
	CMPQ R11, $3
	JLT  q3put
	VFMADD231PS (DI)(R10*2), X15, X8

q3put:
	VMOVUPS X0, (DI)
	VMOVUPS X4, (DI)(R10*1)
	CMPQ R11, $3
	JLT  q3next
	VMOVUPS X8, (DI)(R10*2)

q3next:
	ADDQ $16, DI
	ADDQ $128, R14
	LEAQ 256(AX), DX
	CMPQ R14, DX
	JLT  q3half
	MOVQ k8+8(FP), DX
	SHLQ $8, DX
	ADDQ DX, AX
	DECQ CX
	JMP  q3panel

q3done:
	VZEROUPPER
	RET
