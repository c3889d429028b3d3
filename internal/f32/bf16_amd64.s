//go:build !purego

#include "textflag.h"
#include "macros_amd64.h"

// himask<> keeps the high half of each 32-bit lane.
DATA himask<>+0(SB)/4, $0xffff0000
DATA himask<>+4(SB)/4, $0xffff0000
DATA himask<>+8(SB)/4, $0xffff0000
DATA himask<>+12(SB)/4, $0xffff0000
DATA himask<>+16(SB)/4, $0xffff0000
DATA himask<>+20(SB)/4, $0xffff0000
DATA himask<>+24(SB)/4, $0xffff0000
DATA himask<>+28(SB)/4, $0xffff0000
GLOBL himask<>(SB), RODATA|NOPTR, $32

// The bf16 kernels read sixteen bf16 values (32 bytes) of a W row at a
// time. Lane i of that load holds values 2i (low half) and 2i+1 (high
// half); as float32 they are the lane shifted left 16 bits and the lane
// with its low half cleared, so no value needs a shuffle. The x chunk is
// shuffled instead, once for every row it meets: its even values into
// one register and its odd values into another (XSPLIT).

// XSPLIT loads x[p..p+16) from (P)(DX*2) and leaves its even values in
// E and odd values in O; clobbers T and U.
#define XSPLIT(P, E, O, T, U) \
	VMOVUPS (P)(DX*2), T       \
	VMOVUPS 32(P)(DX*2), U     \
	VSHUFPS $0x88, U, T, E     \
	VSHUFPS $0xDD, U, T, O     \
	VPERMPD $0xD8, E, E        \
	VPERMPD $0xD8, O, O

// XSPLITM is XSPLIT for the first DX (2..14, even) values at (P), the
// rest read as zeros; XT and XU are T's and U's low halves.
#define XSPLITM(P, E, O, T, U, XT, XU) \
	LANEMASK(DX, XT, E)        \
	VMASKMOVPS (P), E, T       \
	LEAQ -8(DX), DX            \
	LANEMASK(DX, XU, O)        \
	VMASKMOVPS 32(P), O, U     \
	LEAQ 8(DX), DX             \
	VSHUFPS $0x88, U, T, E     \
	VSHUFPS $0xDD, U, T, O     \
	VPERMPD $0xD8, E, E        \
	VPERMPD $0xD8, O, O

// WROW widens the sixteen bf16 values at DX of the row at P into Y13
// (even) and Y12 (odd); Y14 holds himask. WROWM does the same for the
// value pairs at (P) that Y15 masks, the rest read as zeros.
#define WROW(P) \
	VMOVDQU (P)(DX*1), Y12     \
	VPSLLD $16, Y12, Y13       \
	VPAND Y14, Y12, Y12

#define WROWM(P) \
	VPMASKMOVD (P), Y15, Y12   \
	VPSLLD $16, Y12, Y13       \
	VPAND Y14, Y12, Y12

// FMA1 adds the widened row (Y13, Y12) times x (even Y10, odd Y11) into
// ACC; FMA2 adds it times two rows of x (Y8, Y9 and Y10, Y11) into ACC0
// and ACC1.
#define FMA1(ACC) \
	VFMADD231PS Y13, Y10, ACC \
	VFMADD231PS Y12, Y11, ACC

#define FMA2(ACC0, ACC1) \
	VFMADD231PS Y13, Y8, ACC0  \
	VFMADD231PS Y12, Y9, ACC0  \
	VFMADD231PS Y13, Y10, ACC1 \
	VFMADD231PS Y12, Y11, ACC1

// BFTAIL sets up a kernel's last rem2 (0..14, even) columns: DX = rem2,
// zero flag set when there are none, else Y15 = the mask of rem2/2 value
// pairs (DX unchanged).
#define BFTAIL \
	MOVQ rem2+16(FP), DX      \
	SHRQ $1, DX               \
	LANEMASK(DX, X15, Y15)    \
	SHLQ $1, DX

// func gemvBF16x8(n, k16, rem2 int, a *float32, w *uint16, ldw int, c *float32, beta float32)
//
// c[j] = beta*c[j] + Σ_{p<k16+rem2} a[p]·W[j][p] for j < n, W bf16, k16 a
// multiple of 16 and rem2 an even 0..14: one row of A against eight W
// rows at a time; a short last panel repeats its last row, not stored.
//
// Registers: SI the end of a's k16 values; AX, BX, R8..R13 the same for
// the W rows; DX the byte offset in W (negative; x's is twice it); CX the
// W rows left; DI c; R14 ldw in bytes.
TEXT ·gemvBF16x8(SB), NOSPLIT, $0-60
	MOVQ n+0(FP), CX
	MOVQ k16+8(FP), DX
	MOVQ a+24(FP), SI
	LEAQ (SI)(DX*4), SI
	MOVQ w+32(FP), AX
	LEAQ (AX)(DX*2), AX
	MOVQ ldw+40(FP), R14
	SHLQ $1, R14
	MOVQ c+48(FP), DI
	VMOVDQU himask<>(SB), Y14

pb8:
	ROWS8(pb8go, doneb8)

pb8go:
	ZERO8
	MOVQ k16+8(FP), DX
	SHLQ $1, DX
	NEGQ DX
	JZ   tb8

lb8:
	XSPLIT(SI, Y10, Y11, Y8, Y9)
	WROW(AX)
	FMA1(Y0)
	WROW(BX)
	FMA1(Y1)
	WROW(R8)
	FMA1(Y2)
	WROW(R9)
	FMA1(Y3)
	WROW(R10)
	FMA1(Y4)
	WROW(R11)
	FMA1(Y5)
	WROW(R12)
	FMA1(Y6)
	WROW(R13)
	FMA1(Y7)
	ADDQ $32, DX
	JNZ  lb8

tb8:
	BFTAIL
	JZ   rb8
	XSPLITM(SI, Y10, Y11, Y8, Y9, X8, X9)
	WROWM(AX)
	FMA1(Y0)
	WROWM(BX)
	FMA1(Y1)
	WROWM(R8)
	FMA1(Y2)
	WROWM(R9)
	FMA1(Y3)
	WROWM(R10)
	FMA1(Y4)
	WROWM(R11)
	FMA1(Y5)
	WROWM(R12)
	FMA1(Y6)
	WROWM(R13)
	FMA1(Y7)

rb8:
	REDUCE8
	STORE18(beta+56(FP), pb8)

doneb8:
	VZEROUPPER
	RET

// func gemmBF16x2x4(n, k16, rem2 int, a *float32, lda int, w *uint16, ldw int, c *float32, ldc int, beta float32)
//
// C = A·Wᵀ + beta·C over the first k16+rem2 columns (as gemvBF16x8's) for
// two rows of A against four bf16 W rows at a time.
//
// Registers: SI, R12 the ends of the A rows' k16 values; AX, BX, R8, R9
// the same for four W rows; DX the byte offset in W; CX the W rows left;
// R10 C's first row; R11 ldc and R14 ldw in bytes.
TEXT ·gemmBF16x2x4(SB), NOSPLIT, $0-76
	MOVQ n+0(FP), CX
	MOVQ k16+8(FP), DX
	MOVQ a+24(FP), SI
	MOVQ lda+32(FP), R12
	LEAQ (SI)(R12*4), R12
	LEAQ (SI)(DX*4), SI
	LEAQ (R12)(DX*4), R12
	MOVQ w+40(FP), AX
	LEAQ (AX)(DX*2), AX
	MOVQ ldw+48(FP), R14
	SHLQ $1, R14
	MOVQ c+56(FP), R10
	MOVQ ldc+64(FP), R11
	SHLQ $2, R11
	VMOVDQU himask<>(SB), Y14

pb24:
	ROWS4(pb24go, doneb24)

pb24go:
	ZERO8
	MOVQ k16+8(FP), DX
	SHLQ $1, DX
	NEGQ DX
	JZ   tb24

lb24:
	XSPLIT(SI, Y8, Y9, Y12, Y13)
	XSPLIT(R12, Y10, Y11, Y12, Y13)
	WROW(AX)
	FMA2(Y0, Y4)
	WROW(BX)
	FMA2(Y1, Y5)
	WROW(R8)
	FMA2(Y2, Y6)
	WROW(R9)
	FMA2(Y3, Y7)
	ADDQ $32, DX
	JNZ  lb24

tb24:
	BFTAIL
	JZ   rb24
	XSPLITM(SI, Y8, Y9, Y12, Y13, X12, X13)
	XSPLITM(R12, Y10, Y11, Y12, Y13, X12, X13)
	WROWM(AX)
	FMA2(Y0, Y4)
	WROWM(BX)
	FMA2(Y1, Y5)
	WROWM(R8)
	FMA2(Y2, Y6)
	WROWM(R9)
	FMA2(Y3, Y7)

rb24:
	REDUCE8
	STORE24(beta+72(FP), pb24)

doneb24:
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
	ZERO8

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

// expMask holds the float32 exponent bits in every lane.
DATA ·expMask+0(SB)/4, $0x7f800000
GLOBL ·expMask(SB), RODATA|NOPTR, $4

// func finiteAVX2(x *float32, n int) bool
//
// Reports whether none of the n (a multiple of 32) floats at x has all
// exponent bits set (an infinity or a NaN): each chunk's exponents are
// compared with the all-ones exponent and the results ORed together.
TEXT ·finiteAVX2(SB), NOSPLIT, $0-17
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	SHLQ $2, CX
	ADDQ SI, CX
	VPBROADCASTD ·expMask(SB), Y7
	VPXOR Y6, Y6, Y6

finloop:
	CMPQ SI, CX
	JGE  findone
	VPAND (SI), Y7, Y0
	VPAND 32(SI), Y7, Y1
	VPAND 64(SI), Y7, Y2
	VPAND 96(SI), Y7, Y3
	VPCMPEQD Y7, Y0, Y0
	VPCMPEQD Y7, Y1, Y1
	VPCMPEQD Y7, Y2, Y2
	VPCMPEQD Y7, Y3, Y3
	VPOR Y1, Y0, Y0
	VPOR Y3, Y2, Y2
	VPOR Y0, Y6, Y6
	VPOR Y2, Y6, Y6
	ADDQ $128, SI
	JMP  finloop

findone:
	VPTEST Y6, Y6
	SETEQ ret+16(FP)
	VZEROUPPER
	RET
