//go:build !purego

#include "textflag.h"
#include "reduce_amd64.h"

// BF16ROW4 multiplies eight bf16 columns at byte offset off of the four W
// rows by the float32 x chunk XV, into accumulators A0..A3. A bf16 value is
// the high half of a float32: zero-extend each to 32 bits and shift left 16.
#define BF16ROW4(off, XV, A0, A1, A2, A3) \
	VPMOVZXWD off(SI)(DX*2), Y8     \
	VPMOVZXWD off(R8)(DX*2), Y9     \
	VPMOVZXWD off(R10)(DX*2), Y10   \
	VPMOVZXWD off(R12)(DX*2), Y11   \
	VPSLLD $16, Y8, Y8              \
	VPSLLD $16, Y9, Y9              \
	VPSLLD $16, Y10, Y10            \
	VPSLLD $16, Y11, Y11            \
	VFMADD231PS Y8, XV, A0          \
	VFMADD231PS Y9, XV, A1          \
	VFMADD231PS Y10, XV, A2         \
	VFMADD231PS Y11, XV, A3

// func gemvBF16AVX2(n, k8 int, w *uint16, ldw int, x *float32, y *float32, beta float32)
//
// y[i] = beta*y[i] + Σ_{p<k8} W[i][p]·x[p] for i < n, W bf16 [n][ldw], k8 a
// multiple of 8; beta == 0 means y is not read. Rows go four at a time
// with the columns unrolled twice, then one at a time.
//
// Registers: SI, R8, R10, R12 the W rows; R11 the row stride in bytes; DI
// x; BX y; CX rows left; DX the column; R9 k8; R13 the unrolled bound.
TEXT ·gemvBF16AVX2(SB), NOSPLIT, $0-52
	MOVQ n+0(FP), CX
	MOVQ k8+8(FP), R9
	MOVQ w+16(FP), SI
	MOVQ ldw+24(FP), R11
	SHLQ $1, R11
	MOVQ x+32(FP), DI
	MOVQ y+40(FP), BX
	LEAQ -8(R9), R13

brows4:
	CMPQ CX, $4
	JLT  brows1
	LEAQ (SI)(R11*1), R8
	LEAQ (R8)(R11*1), R10
	LEAQ (R10)(R11*1), R12
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ DX, DX
	CMPQ DX, R13
	JGE  b4one

b4loop:
	VMOVUPS (DI)(DX*4), Y12
	VMOVUPS 32(DI)(DX*4), Y13
	BF16ROW4(0, Y12, Y0, Y1, Y2, Y3)
	BF16ROW4(16, Y13, Y4, Y5, Y6, Y7)
	ADDQ $16, DX
	CMPQ DX, R13
	JLT  b4loop

b4one:
	CMPQ DX, R9
	JGE  b4sum
	VMOVUPS (DI)(DX*4), Y12
	BF16ROW4(0, Y12, Y0, Y1, Y2, Y3)

b4sum:
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3
	REDUCE4(Y0, Y1, Y2, Y3, X0, X2)
	MOVL beta+48(FP), AX
	TESTL AX, AX
	JZ   b4store
	VBROADCASTSS beta+48(FP), X15
	VFMADD231PS (BX), X15, X0

b4store:
	VMOVUPS X0, (BX)
	LEAQ (R12)(R11*1), SI
	ADDQ $16, BX
	SUBQ $4, CX
	JMP  brows4

brows1:
	TESTQ CX, CX
	JZ   bdone
	VXORPS Y0, Y0, Y0
	XORQ DX, DX

b1loop:
	CMPQ DX, R9
	JGE  b1sum
	VPMOVZXWD (SI)(DX*2), Y8
	VPSLLD $16, Y8, Y8
	VFMADD231PS (DI)(DX*4), Y8, Y0
	ADDQ $8, DX
	JMP  b1loop

b1sum:
	REDUCE1(Y0, X0, X1)
	MOVL beta+48(FP), AX
	TESTL AX, AX
	JZ   b1store
	VMOVSS beta+48(FP), X15
	VFMADD231SS (BX), X15, X0

b1store:
	VMOVSS X0, (BX)
	ADDQ R11, SI
	ADDQ $4, BX
	DECQ CX
	JMP  brows1

bdone:
	VZEROUPPER
	RET

// func bf16ToF32AVX2(n int, src *uint16, dst *float32)
// dst[i] = float32 of bf16 src[i] for i < n, n a multiple of 8.
TEXT ·bf16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ n+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ dst+16(FP), DI
	XORQ DX, DX

cvtloop:
	CMPQ DX, CX
	JGE  cvtdone
	VPMOVZXWD (SI)(DX*2), Y0
	VPSLLD $16, Y0, Y0
	VMOVUPS Y0, (DI)(DX*4)
	ADDQ $8, DX
	JMP  cvtloop

cvtdone:
	VZEROUPPER
	RET

// func sumAVX2(x *float32, n int) float32
//
// Σ x[i] for i < n, n a multiple of 64: eight independent accumulators, so
// the loop runs at the speed the loads arrive. cmd/roofline times it to
// measure read bandwidth.
TEXT ·sumAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	SHLQ $2, CX
	ADDQ SI, CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

sumloop:
	CMPQ SI, CX
	JGE  sumdone
	VADDPS (SI), Y0, Y0
	VADDPS 32(SI), Y1, Y1
	VADDPS 64(SI), Y2, Y2
	VADDPS 96(SI), Y3, Y3
	VADDPS 128(SI), Y4, Y4
	VADDPS 160(SI), Y5, Y5
	VADDPS 192(SI), Y6, Y6
	VADDPS 224(SI), Y7, Y7
	ADDQ $256, SI
	JMP  sumloop

sumdone:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y5, Y4, Y4
	VADDPS Y7, Y6, Y6
	VADDPS Y2, Y0, Y0
	VADDPS Y6, Y4, Y4
	VADDPS Y4, Y0, Y0
	REDUCE1(Y0, X0, X1)
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET
