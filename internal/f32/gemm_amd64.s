//go:build !purego

#include "textflag.h"
#include "reduce_amd64.h"

// tailmask<> holds eight all-ones int32 lanes then eight zero lanes: the
// eight lanes starting at element 8-r have their first r lanes set, the
// mask VMASKMOVPS needs for the last r (1..7) columns of a row.
DATA tailmask<>+0(SB)/4, $0xffffffff
DATA tailmask<>+4(SB)/4, $0xffffffff
DATA tailmask<>+8(SB)/4, $0xffffffff
DATA tailmask<>+12(SB)/4, $0xffffffff
DATA tailmask<>+16(SB)/4, $0xffffffff
DATA tailmask<>+20(SB)/4, $0xffffffff
DATA tailmask<>+24(SB)/4, $0xffffffff
DATA tailmask<>+28(SB)/4, $0xffffffff
DATA tailmask<>+32(SB)/4, $0
DATA tailmask<>+36(SB)/4, $0
DATA tailmask<>+40(SB)/4, $0
DATA tailmask<>+44(SB)/4, $0
DATA tailmask<>+48(SB)/4, $0
DATA tailmask<>+52(SB)/4, $0
DATA tailmask<>+56(SB)/4, $0
DATA tailmask<>+60(SB)/4, $0
GLOBL tailmask<>(SB), RODATA|NOPTR, $64

// LOADMASK sets Y to the mask of the first (k & 7) lanes; clobbers R, S.
#define LOADMASK(k, R, S, Y) \
	MOVQ k, R                  \
	ANDQ $7, R                 \
	NEGQ R                     \
	LEAQ tailmask<>+32(SB), S  \
	VMOVDQU (S)(R*4), Y

// func gemmNTAVX2(m, n, k int, a *float32, lda int, w *float32, ldw int, c *float32, ldc int, beta float32)
//
// C[i][j] = beta*C[i][j] + Σ_p A[i][p]·W[j][p] for i < m, j < n; beta == 0
// means C is not read. Leading dimensions are in elements. W is taken four
// rows at a time (then one at a time); for each block the A rows go two at
// a time through a 2×4 register tile (then one at a time through a 1×4
// tile that unrolls the columns twice).
//
// Registers: AX, BX the A rows; SI, R8, R10, R12 the W rows; DX the byte
// offset in a row; R9 the bytes of whole 8-column chunks; DI the C element;
// CX the A rows left; R11, R13 scratch. Y14 holds the tail mask.
TEXT ·gemmNTAVX2(SB), NOSPLIT, $16-76
	MOVQ k+16(FP), R9
	LOADMASK(R9, R11, R13, Y14)
	ANDQ $-8, R9
	SHLQ $2, R9
	MOVQ n+8(FP), R11
	MOVQ R11, wleft-8(SP)
	MOVQ w+40(FP), SI
	MOVQ c+56(FP), R11
	MOVQ R11, ccol-16(SP)

wblock:
	MOVQ wleft-8(SP), R11
	CMPQ R11, $4
	JLT  wsingle
	MOVQ ldw+48(FP), R11
	SHLQ $2, R11
	LEAQ (SI)(R11*1), R8
	LEAQ (R8)(R11*1), R10
	LEAQ (R10)(R11*1), R12
	MOVQ m+0(FP), CX
	MOVQ a+24(FP), AX
	MOVQ ccol-16(SP), DI

pair:
	CMPQ CX, $2
	JLT  single4
	MOVQ lda+32(FP), R11
	LEAQ (AX)(R11*4), BX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ DX, DX
	CMPQ R9, $0
	JEQ  pairtail

pairloop:
	VMOVUPS (SI)(DX*1), Y8
	VMOVUPS (R8)(DX*1), Y9
	VMOVUPS (R10)(DX*1), Y10
	VMOVUPS (R12)(DX*1), Y11
	VMOVUPS (AX)(DX*1), Y12
	VMOVUPS (BX)(DX*1), Y13
	VFMADD231PS Y8, Y12, Y0
	VFMADD231PS Y9, Y12, Y1
	VFMADD231PS Y10, Y12, Y2
	VFMADD231PS Y11, Y12, Y3
	VFMADD231PS Y8, Y13, Y4
	VFMADD231PS Y9, Y13, Y5
	VFMADD231PS Y10, Y13, Y6
	VFMADD231PS Y11, Y13, Y7
	ADDQ $32, DX
	CMPQ DX, R9
	JLT  pairloop

pairtail:
	MOVQ k+16(FP), R11
	ANDQ $7, R11
	JZ   pairsum
	VMASKMOVPS (SI)(DX*1), Y14, Y8
	VMASKMOVPS (R8)(DX*1), Y14, Y9
	VMASKMOVPS (R10)(DX*1), Y14, Y10
	VMASKMOVPS (R12)(DX*1), Y14, Y11
	VMASKMOVPS (AX)(DX*1), Y14, Y12
	VMASKMOVPS (BX)(DX*1), Y14, Y13
	VFMADD231PS Y8, Y12, Y0
	VFMADD231PS Y9, Y12, Y1
	VFMADD231PS Y10, Y12, Y2
	VFMADD231PS Y11, Y12, Y3
	VFMADD231PS Y8, Y13, Y4
	VFMADD231PS Y9, Y13, Y5
	VFMADD231PS Y10, Y13, Y6
	VFMADD231PS Y11, Y13, Y7

pairsum:
	REDUCE4(Y0, Y1, Y2, Y3, X0, X2)
	REDUCE4(Y4, Y5, Y6, Y7, X4, X6)
	MOVQ ldc+64(FP), R11
	LEAQ (DI)(R11*4), R13
	MOVL beta+72(FP), R11
	TESTL R11, R11
	JZ   pairstore
	VBROADCASTSS beta+72(FP), X15
	VFMADD231PS (DI), X15, X0
	VFMADD231PS (R13), X15, X4

pairstore:
	VMOVUPS X0, (DI)
	VMOVUPS X4, (R13)
	MOVQ lda+32(FP), R11
	SHLQ $3, R11
	ADDQ R11, AX
	MOVQ ldc+64(FP), R11
	SHLQ $3, R11
	ADDQ R11, DI
	SUBQ $2, CX
	JMP  pair

single4:
	CMPQ CX, $0
	JEQ  wnext
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ DX, DX
	LEAQ -32(R9), R13
	CMPQ DX, R13
	JGE  single4one

single4loop:
	VMOVUPS (AX)(DX*1), Y12
	VMOVUPS 32(AX)(DX*1), Y13
	VFMADD231PS (SI)(DX*1), Y12, Y0
	VFMADD231PS (R8)(DX*1), Y12, Y1
	VFMADD231PS (R10)(DX*1), Y12, Y2
	VFMADD231PS (R12)(DX*1), Y12, Y3
	VFMADD231PS 32(SI)(DX*1), Y13, Y4
	VFMADD231PS 32(R8)(DX*1), Y13, Y5
	VFMADD231PS 32(R10)(DX*1), Y13, Y6
	VFMADD231PS 32(R12)(DX*1), Y13, Y7
	ADDQ $64, DX
	CMPQ DX, R13
	JLT  single4loop

single4one:
	CMPQ DX, R9
	JGE  single4tail
	VMOVUPS (AX)(DX*1), Y12
	VFMADD231PS (SI)(DX*1), Y12, Y0
	VFMADD231PS (R8)(DX*1), Y12, Y1
	VFMADD231PS (R10)(DX*1), Y12, Y2
	VFMADD231PS (R12)(DX*1), Y12, Y3
	ADDQ $32, DX

single4tail:
	MOVQ k+16(FP), R11
	ANDQ $7, R11
	JZ   single4sum
	VMASKMOVPS (AX)(DX*1), Y14, Y12
	VMASKMOVPS (SI)(DX*1), Y14, Y8
	VMASKMOVPS (R8)(DX*1), Y14, Y9
	VMASKMOVPS (R10)(DX*1), Y14, Y10
	VMASKMOVPS (R12)(DX*1), Y14, Y11
	VFMADD231PS Y8, Y12, Y4
	VFMADD231PS Y9, Y12, Y5
	VFMADD231PS Y10, Y12, Y6
	VFMADD231PS Y11, Y12, Y7

single4sum:
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3
	REDUCE4(Y0, Y1, Y2, Y3, X0, X2)
	MOVL beta+72(FP), R11
	TESTL R11, R11
	JZ   single4store
	VBROADCASTSS beta+72(FP), X15
	VFMADD231PS (DI), X15, X0

single4store:
	VMOVUPS X0, (DI)

wnext:
	MOVQ ldw+48(FP), R11
	SHLQ $4, R11
	ADDQ R11, SI
	ADDQ $16, ccol-16(SP)
	SUBQ $4, wleft-8(SP)
	JMP  wblock

// One W row at a time: C[i][j] for every A row i.
wsingle:
	CMPQ R11, $0
	JEQ  done
	MOVQ m+0(FP), CX
	MOVQ a+24(FP), AX
	MOVQ ccol-16(SP), DI

wsrow:
	CMPQ CX, $0
	JEQ  wsnext
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ DX, DX
	LEAQ -32(R9), R13
	CMPQ DX, R13
	JGE  wsone

wsloop:
	VMOVUPS (AX)(DX*1), Y12
	VMOVUPS 32(AX)(DX*1), Y13
	VFMADD231PS (SI)(DX*1), Y12, Y0
	VFMADD231PS 32(SI)(DX*1), Y13, Y1
	ADDQ $64, DX
	CMPQ DX, R13
	JLT  wsloop

wsone:
	CMPQ DX, R9
	JGE  wstail
	VMOVUPS (AX)(DX*1), Y12
	VFMADD231PS (SI)(DX*1), Y12, Y0
	ADDQ $32, DX

wstail:
	MOVQ k+16(FP), R11
	ANDQ $7, R11
	JZ   wssum
	VMASKMOVPS (AX)(DX*1), Y14, Y12
	VMASKMOVPS (SI)(DX*1), Y14, Y8
	VFMADD231PS Y8, Y12, Y1

wssum:
	VADDPS Y1, Y0, Y0
	REDUCE1(Y0, X0, X1)
	MOVL beta+72(FP), R11
	TESTL R11, R11
	JZ   wsstore
	VMOVSS beta+72(FP), X15
	VFMADD231SS (DI), X15, X0

wsstore:
	VMOVSS X0, (DI)
	MOVQ lda+32(FP), R11
	LEAQ (AX)(R11*4), AX
	MOVQ ldc+64(FP), R11
	LEAQ (DI)(R11*4), DI
	DECQ CX
	JMP  wsrow

wsnext:
	MOVQ ldw+48(FP), R11
	LEAQ (SI)(R11*4), SI
	ADDQ $4, ccol-16(SP)
	DECQ wleft-8(SP)
	MOVQ wleft-8(SP), R11
	JMP  wsingle

done:
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
	LOADMASK(R9, R11, R10, Y14)
	MOVQ w+16(FP), SI
	MOVQ ldw+24(FP), R8
	SHLQ $2, R8
	MOVQ y+40(FP), BX
	VBROADCASTSS beta+48(FP), Y15

tcol64:
	CMPQ R9, $64
	JLT  tcol8
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
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
