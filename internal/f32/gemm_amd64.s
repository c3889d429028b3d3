//go:build !purego

#include "textflag.h"
#include "macros_amd64.h"

// laneIota holds the int32 lanes 0..7 (LANEMASK compares a count with it).
DATA ·laneIota+0(SB)/4, $0
DATA ·laneIota+4(SB)/4, $1
DATA ·laneIota+8(SB)/4, $2
DATA ·laneIota+12(SB)/4, $3
DATA ·laneIota+16(SB)/4, $4
DATA ·laneIota+20(SB)/4, $5
DATA ·laneIota+24(SB)/4, $6
DATA ·laneIota+28(SB)/4, $7
GLOBL ·laneIota(SB), RODATA|NOPTR, $32

// KBYTES sets R to -4*(k&^7): the (negative) byte offset of the first
// whole eight-column chunk from the end of a row's whole chunks.
#define KBYTES(R) \
	MOVQ k+8(FP), R \
	ANDQ $-8, R     \
	SHLQ $2, R      \
	NEGQ R

// The GemmNT kernels below compute every element of C the same way,
// whichever kernel and position in a tile it comes from: eight lanes,
// lane l accumulating A[i][p]·W[j][p] for p ≡ l (mod 8) in increasing p
// by fused multiply-add, the last k%8 columns added to lanes 0..k%8-1 in
// the same way, then REDUCE8's order, then beta·C added by one more
// fused multiply-add. So a row of C has the same bits alone or in a
// batch (generic.go, gemmNTGo, spells the order out).
//
// Each takes rows of W in panels; a panel short of rows (the last one)
// repeats its last row in the missing places, which are computed but not
// stored. Row pointers point at the end of the row's whole chunks and DX
// runs from -4*(k&^7) up to 0, so the loop needs no compare.

// MFMA is VMASKMOVPS (P), Y14, Y9 then Y9·Y8 into ACC: one masked W
// row's tail.
#define MFMA(P, ACC) \
	VMASKMOVPS (P), Y14, Y9 \
	VFMADD231PS Y9, Y8, ACC

// func gemmNT1x8(n, k int, a, w *float32, ldw int, c *float32, beta float32)
//
// c[j] = beta*c[j] + Σ_p a[p]·W[j][p] for j < n: one row of A against the
// rows of W, eight at a time; beta == 0 means c is not read.
//
// Registers: SI the end of A's whole chunks; AX, BX, R8..R13 the same
// for eight W rows; DX the byte offset from those ends; CX the W rows
// left; DI c; R14 ldw in bytes.
TEXT ·gemmNT1x8(SB), NOSPLIT, $0-52
	MOVQ n+0(FP), CX
	KBYTES(DX)
	MOVQ a+16(FP), SI
	SUBQ DX, SI
	MOVQ w+24(FP), AX
	SUBQ DX, AX
	MOVQ ldw+32(FP), R14
	SHLQ $2, R14
	MOVQ c+40(FP), DI

p18:
	ROWS8(p18go, done18)

p18go:
	ZERO8
	KBYTES(DX)
	TESTQ DX, DX
	JZ    t18

l18:
	VMOVUPS (SI)(DX*1), Y8
	FMA18(0)
	ADDQ $32, DX
	JNZ  l18

t18:
	MOVQ k+8(FP), DX
	ANDQ $7, DX
	JZ   r18
	LANEMASK(DX, X14, Y14)
	VMASKMOVPS (SI), Y14, Y8
	MFMA(AX, Y0)
	MFMA(BX, Y1)
	MFMA(R8, Y2)
	MFMA(R9, Y3)
	MFMA(R10, Y4)
	MFMA(R11, Y5)
	MFMA(R12, Y6)
	MFMA(R13, Y7)

r18:
	REDUCE8
	STORE18(beta+48(FP), p18)

done18:
	VZEROUPPER
	RET

// FMA24 accumulates the A chunks in Y12 and Y13 times the W chunks in
// Y8..Y11: row 0 into Y0..Y3, row 1 into Y4..Y7.
#define FMA24 \
	VFMADD231PS Y8, Y12, Y0  \
	VFMADD231PS Y9, Y12, Y1  \
	VFMADD231PS Y10, Y12, Y2 \
	VFMADD231PS Y11, Y12, Y3 \
	VFMADD231PS Y8, Y13, Y4  \
	VFMADD231PS Y9, Y13, Y5  \
	VFMADD231PS Y10, Y13, Y6 \
	VFMADD231PS Y11, Y13, Y7

// LOAD6 loads six chunks at DX into Y8..Y13 (VMOVUPS), or with
// VMASKMOVPS under Y14 as MLOAD6.
#define LOAD6(P0, P1, P2, P3, P4, P5) \
	VMOVUPS (P0)(DX*1), Y8  \
	VMOVUPS (P1)(DX*1), Y9  \
	VMOVUPS (P2)(DX*1), Y10 \
	VMOVUPS (P3)(DX*1), Y11 \
	VMOVUPS (P4)(DX*1), Y12 \
	VMOVUPS (P5)(DX*1), Y13

#define MLOAD6(P0, P1, P2, P3, P4, P5) \
	VMASKMOVPS (P0), Y14, Y8  \
	VMASKMOVPS (P1), Y14, Y9  \
	VMASKMOVPS (P2), Y14, Y10 \
	VMASKMOVPS (P3), Y14, Y11 \
	VMASKMOVPS (P4), Y14, Y12 \
	VMASKMOVPS (P5), Y14, Y13

// func gemmNT2x4(n, k int, a *float32, lda int, w *float32, ldw int, c *float32, ldc int, beta float32)
//
// C = A·Wᵀ + beta·C for two rows of A against the rows of W, four at a
// time.
//
// Registers: SI, R12 the ends of the A rows' whole chunks; AX, BX, R8, R9
// the same for four W rows; DX the byte offset, R13 its start; CX the W
// rows left; R10 C's first row; R11 ldc and R14 ldw in bytes; DI k%8.
TEXT ·gemmNT2x4(SB), NOSPLIT, $0-68
	MOVQ n+0(FP), CX
	KBYTES(DX)
	MOVQ a+16(FP), SI
	MOVQ lda+24(FP), R12
	LEAQ (SI)(R12*4), R12
	SUBQ DX, SI
	SUBQ DX, R12
	MOVQ w+32(FP), AX
	SUBQ DX, AX
	MOVQ ldw+40(FP), R14
	SHLQ $2, R14
	MOVQ c+48(FP), R10
	MOVQ ldc+56(FP), R11
	SHLQ $2, R11
	KBYTES(R13)
	MOVQ k+8(FP), DI
	ANDQ $7, DI

p24:
	ROWS4(p24go, done24)

p24go:
	ZERO8
	MOVQ  R13, DX
	TESTQ DX, DX
	JZ    t24

l24:
	LOAD6(AX, BX, R8, R9, SI, R12)
	FMA24
	ADDQ $32, DX
	JNZ  l24

t24:
	TESTQ DI, DI
	JZ    r24
	LANEMASK(DI, X14, Y14)
	MLOAD6(AX, BX, R8, R9, SI, R12)
	FMA24

r24:
	REDUCE8
	STORE24(beta+64(FP), p24)

done24:
	VZEROUPPER
	RET

// FMA3 accumulates the A chunk in A times the W chunks in Y12..Y14 into
// C0, C1, C2.
#define FMA3(A, C0, C1, C2) \
	VFMADD231PS Y12, A, C0 \
	VFMADD231PS Y13, A, C1 \
	VFMADD231PS Y14, A, C2

// ROWS3 loads the chunks at DX of the three W rows and runs the first
// three A rows past them.
#define ROWS3 \
	VMOVUPS (AX)(DX*1), Y12  \
	VMOVUPS (R8)(DX*1), Y13  \
	VMOVUPS (R9)(DX*1), Y14  \
	VMOVUPS (SI)(DX*1), Y15  \
	FMA3(Y15, Y0, Y1, Y2)    \
	VMOVUPS (R12)(DX*1), Y15 \
	FMA3(Y15, Y3, Y4, Y5)    \
	VMOVUPS (R13)(DX*1), Y15 \
	FMA3(Y15, Y6, Y7, Y8)

// func gemmNT4x3(n, k, rows int, a *float32, lda int, w *float32, ldw int, c *float32, ldc int, beta float32)
//
// C = A·Wᵀ + beta·C for rows (1..4) rows of A against the rows of W,
// three at a time; missing A rows repeat the last one and are not stored.
// A row r and W row q accumulate in Y(3r+q).
//
// Registers: SI, R12, R13, BX the ends of the A rows' whole chunks; AX,
// R8, R9 the same for three W rows; DX the byte offset; CX the W rows
// left; R10 the panel's place in C's first row; R11 ldc and R14 ldw in
// bytes; DI scratch. The frame holds a panel's twelve sums and, in the
// tail, Y11 while it holds the mask.
TEXT ·gemmNT4x3(SB), NOSPLIT, $80-76
	MOVQ n+0(FP), CX
	KBYTES(DX)
	MOVQ lda+32(FP), R9
	SHLQ $2, R9
	MOVQ rows+16(FP), DI
	MOVQ a+24(FP), SI
	SUBQ DX, SI
	LEAQ (SI)(R9*1), R12
	CMPQ DI, $1
	CMOVQLE SI, R12
	LEAQ (R12)(R9*1), R13
	CMPQ DI, $2
	CMOVQLE R12, R13
	LEAQ (R13)(R9*1), BX
	CMPQ DI, $3
	CMOVQLE R13, BX
	MOVQ w+40(FP), AX
	SUBQ DX, AX
	MOVQ ldw+48(FP), R14
	SHLQ $2, R14
	MOVQ c+56(FP), R10
	MOVQ ldc+64(FP), R11
	SHLQ $2, R11

p43:
	TESTQ CX, CX
	JLE   done43
	NEXTROW(AX, R8, 1)
	NEXTROW(R8, R9, 2)
	ZERO8
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	KBYTES(DX)
	TESTQ DX, DX
	JZ    t43
	CMPQ  rows+16(FP), $3
	JLE   l33

l43:
	ROWS3
	VMOVUPS (BX)(DX*1), Y15
	FMA3(Y15, Y9, Y10, Y11)
	ADDQ $32, DX
	JNZ  l43
	JMP  t43

	// Three rows or fewer: the same without the fourth row's products
	// (Y9..Y11 stay zero until the tail, which runs all four).
l33:
	ROWS3
	ADDQ $32, DX
	JNZ  l33

t43:
	MOVQ k+8(FP), DX
	ANDQ $7, DX
	JZ   r43
	VMOVUPS Y11, spill-80(SP)
	LANEMASK(DX, X11, Y11)
	VMASKMOVPS (AX), Y11, Y12
	VMASKMOVPS (R8), Y11, Y13
	VMASKMOVPS (R9), Y11, Y14
	VMASKMOVPS (SI), Y11, Y15
	FMA3(Y15, Y0, Y1, Y2)
	VMASKMOVPS (R12), Y11, Y15
	FMA3(Y15, Y3, Y4, Y5)
	VMASKMOVPS (R13), Y11, Y15
	FMA3(Y15, Y6, Y7, Y8)
	VMASKMOVPS (BX), Y11, Y15
	VMOVUPS spill-80(SP), Y11
	FMA3(Y15, Y9, Y10, Y11)

r43:
	REDUCE8
	REDUCE4(Y8, Y9, Y10, Y11, X8, X10)
	MOVL beta+72(FP), DX
	CMPQ CX, $3
	JLT  s43slow
	CMPQ rows+16(FP), $3
	JLT  s43slow

	// A whole panel, three or four rows: the twelve sums are lanes 0..3
	// of X0 and X1 (Y0's halves) and of X8, three to a row, stored
	// straight; with beta != 0 C's elements are first gathered into the
	// same lanes and each sum becomes beta·C + sum by one fused
	// multiply-add, as s43slow computes it row by row.
	VEXTRACTF128 $1, Y0, X1
	LEAQ (R10)(R11*2), DI
	TESTL DX, DX
	JZ    s43store
	VBROADCASTSS beta+72(FP), X15
	VMOVSD    (R10), X2
	VINSERTPS $0x20, 8(R10), X2, X2
	VINSERTPS $0x30, (R10)(R11*1), X2, X2
	VMOVSD    4(R10)(R11*1), X3
	VMOVHPS   (DI), X3, X3
	VMOVSS    8(DI), X4
	CMPQ rows+16(FP), $4
	JLT  s43beta
	VINSERTPS $0x10, (DI)(R11*1), X4, X4
	VMOVHPS   4(DI)(R11*1), X4, X4

s43beta:
	VFMADD231PS X2, X15, X0
	VFMADD231PS X3, X15, X1
	VFMADD231PS X4, X15, X8

s43store:
	VMOVSD X0, (R10)
	VEXTRACTPS $2, X0, 8(R10)
	VEXTRACTPS $3, X0, (R10)(R11*1)
	VMOVSD X1, 4(R10)(R11*1)
	VMOVHPS X1, (DI)
	VMOVSS X8, 8(DI)
	CMPQ rows+16(FP), $4
	JLT  s43panel
	VEXTRACTPS $1, X8, (DI)(R11*1)
	VMOVHPS X8, 4(DI)(R11*1)
	JMP  s43panel

s43slow:
	VMOVUPS Y0, sums-48(SP)
	VMOVUPS X8, sums-16(SP)
	VBROADCASTSS beta+72(FP), X15
	MOVQ rows+16(FP), R9
	LEAQ sums-48(SP), DI
	MOVQ R10, R8

	// Row by row: three sums, or the one or two of a short last panel.
s43row:
	CMPQ CX, $3
	JLT  s43part
	VMOVSD (DI), X0
	VMOVSS 8(DI), X1
	TESTL  DX, DX
	JZ     s43put
	VMOVSD (R8), X2
	VFMADD231PS X2, X15, X0
	VMOVSS 8(R8), X2
	VFMADD231SS X2, X15, X1

s43put:
	VMOVSD X0, (R8)
	VMOVSS X1, 8(R8)
	JMP    s43next

s43part:
	LANEMASK(CX, X14, X14)
	VMASKMOVPS (DI), X14, X0
	TESTL DX, DX
	JZ    s43mput
	VMASKMOVPS (R8), X14, X2
	VFMADD231PS X2, X15, X0

s43mput:
	VMASKMOVPS X0, X14, (R8)

s43next:
	ADDQ $12, DI
	ADDQ R11, R8
	DECQ R9
	JNZ  s43row

s43panel:
	ADDQ $12, R10
	LEAQ (AX)(R14*2), AX
	ADDQ R14, AX
	SUBQ $3, CX
	JMP  p43

done43:
	VZEROUPPER
	RET

// func gemvTAVX2(k, n int, w *float32, ldw int, x *float32, y *float32, beta float32)
//
// y[j] = beta*y[j] + Σ_i x[i]·W[i][j] for j < n, W [k][n] with leading
// dimension ldw; beta == 0 means y is not read. Columns go 64 at a time
// (eight accumulators, one broadcast of x[i] each), then 8 at a time with
// the rows unrolled four ways, then the masked last 1..7.
//
// Registers: SI the first W row of the block, DX the current W element,
// DI x, BX y, CX rows left, R8 ldw in bytes, R9 columns left, R10, R11
// scratch. Y14 holds the tail mask, Y15 beta.
TEXT ·gemvTAVX2(SB), NOSPLIT, $0-52
	MOVQ n+8(FP), R9
	MOVQ R9, R11
	ANDQ $7, R11
	LANEMASK(R11, X14, Y14)
	MOVQ w+16(FP), SI
	MOVQ ldw+24(FP), R8
	SHLQ $2, R8
	MOVQ y+40(FP), BX
	VBROADCASTSS beta+48(FP), Y15

tcol64:
	CMPQ R9, $64
	JLT  tcol8
	ZERO8
	MOVQ SI, DX
	MOVQ x+32(FP), DI
	MOVQ k+0(FP), CX
	TESTQ CX, CX
	JZ   t64store

t64loop:
	VBROADCASTSS (DI), Y8
	VFMADD231PS (DX), Y8, Y0
	VFMADD231PS 32(DX), Y8, Y1
	VFMADD231PS 64(DX), Y8, Y2
	VFMADD231PS 96(DX), Y8, Y3
	VFMADD231PS 128(DX), Y8, Y4
	VFMADD231PS 160(DX), Y8, Y5
	VFMADD231PS 192(DX), Y8, Y6
	VFMADD231PS 224(DX), Y8, Y7
	ADDQ R8, DX
	ADDQ $4, DI
	DECQ CX
	JNZ  t64loop

t64store:
	MOVL beta+48(FP), R11
	TESTL R11, R11
	JZ   t64put
	VFMADD231PS (BX), Y15, Y0
	VFMADD231PS 32(BX), Y15, Y1
	VFMADD231PS 64(BX), Y15, Y2
	VFMADD231PS 96(BX), Y15, Y3
	VFMADD231PS 128(BX), Y15, Y4
	VFMADD231PS 160(BX), Y15, Y5
	VFMADD231PS 192(BX), Y15, Y6
	VFMADD231PS 224(BX), Y15, Y7

t64put:
	VMOVUPS Y0, (BX)
	VMOVUPS Y1, 32(BX)
	VMOVUPS Y2, 64(BX)
	VMOVUPS Y3, 96(BX)
	VMOVUPS Y4, 128(BX)
	VMOVUPS Y5, 160(BX)
	VMOVUPS Y6, 192(BX)
	VMOVUPS Y7, 224(BX)
	ADDQ $256, SI
	ADDQ $256, BX
	SUBQ $64, R9
	JMP  tcol64

// Eight columns (or the masked last 1..7 when R9 < 8), rows four at a time.
tcol8:
	CMPQ R9, $0
	JLE  tdone
	VPCMPEQD Y13, Y13, Y13
	CMPQ R9, $8
	JGE  t8mask
	VMOVUPS Y14, Y13

t8mask:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ SI, DX
	MOVQ x+32(FP), DI
	MOVQ k+0(FP), CX

t8loop4:
	CMPQ CX, $4
	JLT  t8loop1
	VBROADCASTSS (DI), Y8
	VBROADCASTSS 4(DI), Y9
	VBROADCASTSS 8(DI), Y10
	VBROADCASTSS 12(DI), Y11
	VMASKMOVPS (DX), Y13, Y4
	ADDQ R8, DX
	VMASKMOVPS (DX), Y13, Y5
	ADDQ R8, DX
	VMASKMOVPS (DX), Y13, Y6
	ADDQ R8, DX
	VMASKMOVPS (DX), Y13, Y7
	ADDQ R8, DX
	VFMADD231PS Y4, Y8, Y0
	VFMADD231PS Y5, Y9, Y1
	VFMADD231PS Y6, Y10, Y2
	VFMADD231PS Y7, Y11, Y3
	ADDQ $16, DI
	SUBQ $4, CX
	JMP  t8loop4

t8loop1:
	TESTQ CX, CX
	JZ   t8store
	VBROADCASTSS (DI), Y8
	VMASKMOVPS (DX), Y13, Y4
	VFMADD231PS Y4, Y8, Y0
	ADDQ R8, DX
	ADDQ $4, DI
	DECQ CX
	JMP  t8loop1

t8store:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	MOVL beta+48(FP), R11
	TESTL R11, R11
	JZ   t8put
	VMASKMOVPS (BX), Y13, Y4
	VFMADD231PS Y4, Y15, Y0

t8put:
	VMASKMOVPS Y0, Y13, (BX)
	ADDQ $32, SI
	ADDQ $32, BX
	SUBQ $8, R9
	JMP  tcol8

tdone:
	VZEROUPPER
	RET
