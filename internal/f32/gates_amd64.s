//go:build !purego

#include "textflag.h"
#include "macros_amd64.h"

// Eight-lane copies of the constants of the float32 exp, sigmoid and tanh
// approximations (approx.go documents them), for use as memory operands.

// log2e: log2(e)
DATA log2e<>+0(SB)/4, $0x3fb8aa3b
DATA log2e<>+4(SB)/4, $0x3fb8aa3b
DATA log2e<>+8(SB)/4, $0x3fb8aa3b
DATA log2e<>+12(SB)/4, $0x3fb8aa3b
DATA log2e<>+16(SB)/4, $0x3fb8aa3b
DATA log2e<>+20(SB)/4, $0x3fb8aa3b
DATA log2e<>+24(SB)/4, $0x3fb8aa3b
DATA log2e<>+28(SB)/4, $0x3fb8aa3b
GLOBL log2e<>(SB), RODATA|NOPTR, $32

// ln2hi: ln 2, high part (0.693359375, exact in 9 bits)
DATA ln2hi<>+0(SB)/4, $0x3f318000
DATA ln2hi<>+4(SB)/4, $0x3f318000
DATA ln2hi<>+8(SB)/4, $0x3f318000
DATA ln2hi<>+12(SB)/4, $0x3f318000
DATA ln2hi<>+16(SB)/4, $0x3f318000
DATA ln2hi<>+20(SB)/4, $0x3f318000
DATA ln2hi<>+24(SB)/4, $0x3f318000
DATA ln2hi<>+28(SB)/4, $0x3f318000
GLOBL ln2hi<>(SB), RODATA|NOPTR, $32

// ln2lo: ln 2 - ln2hi
DATA ln2lo<>+0(SB)/4, $0xb95e8083
DATA ln2lo<>+4(SB)/4, $0xb95e8083
DATA ln2lo<>+8(SB)/4, $0xb95e8083
DATA ln2lo<>+12(SB)/4, $0xb95e8083
DATA ln2lo<>+16(SB)/4, $0xb95e8083
DATA ln2lo<>+20(SB)/4, $0xb95e8083
DATA ln2lo<>+24(SB)/4, $0xb95e8083
DATA ln2lo<>+28(SB)/4, $0xb95e8083
GLOBL ln2lo<>(SB), RODATA|NOPTR, $32

// exphi: 88: exp clamps its argument to [-87, 88]
DATA exphi<>+0(SB)/4, $0x42b00000
DATA exphi<>+4(SB)/4, $0x42b00000
DATA exphi<>+8(SB)/4, $0x42b00000
DATA exphi<>+12(SB)/4, $0x42b00000
DATA exphi<>+16(SB)/4, $0x42b00000
DATA exphi<>+20(SB)/4, $0x42b00000
DATA exphi<>+24(SB)/4, $0x42b00000
DATA exphi<>+28(SB)/4, $0x42b00000
GLOBL exphi<>(SB), RODATA|NOPTR, $32

// explo: -87
DATA explo<>+0(SB)/4, $0xc2ae0000
DATA explo<>+4(SB)/4, $0xc2ae0000
DATA explo<>+8(SB)/4, $0xc2ae0000
DATA explo<>+12(SB)/4, $0xc2ae0000
DATA explo<>+16(SB)/4, $0xc2ae0000
DATA explo<>+20(SB)/4, $0xc2ae0000
DATA explo<>+24(SB)/4, $0xc2ae0000
DATA explo<>+28(SB)/4, $0xc2ae0000
GLOBL explo<>(SB), RODATA|NOPTR, $32

// c2: 1/2!
DATA c2<>+0(SB)/4, $0x3f000000
DATA c2<>+4(SB)/4, $0x3f000000
DATA c2<>+8(SB)/4, $0x3f000000
DATA c2<>+12(SB)/4, $0x3f000000
DATA c2<>+16(SB)/4, $0x3f000000
DATA c2<>+20(SB)/4, $0x3f000000
DATA c2<>+24(SB)/4, $0x3f000000
DATA c2<>+28(SB)/4, $0x3f000000
GLOBL c2<>(SB), RODATA|NOPTR, $32

// c3: 1/3!
DATA c3<>+0(SB)/4, $0x3e2aaaab
DATA c3<>+4(SB)/4, $0x3e2aaaab
DATA c3<>+8(SB)/4, $0x3e2aaaab
DATA c3<>+12(SB)/4, $0x3e2aaaab
DATA c3<>+16(SB)/4, $0x3e2aaaab
DATA c3<>+20(SB)/4, $0x3e2aaaab
DATA c3<>+24(SB)/4, $0x3e2aaaab
DATA c3<>+28(SB)/4, $0x3e2aaaab
GLOBL c3<>(SB), RODATA|NOPTR, $32

// c4: 1/4!
DATA c4<>+0(SB)/4, $0x3d2aaaab
DATA c4<>+4(SB)/4, $0x3d2aaaab
DATA c4<>+8(SB)/4, $0x3d2aaaab
DATA c4<>+12(SB)/4, $0x3d2aaaab
DATA c4<>+16(SB)/4, $0x3d2aaaab
DATA c4<>+20(SB)/4, $0x3d2aaaab
DATA c4<>+24(SB)/4, $0x3d2aaaab
DATA c4<>+28(SB)/4, $0x3d2aaaab
GLOBL c4<>(SB), RODATA|NOPTR, $32

// c5: 1/5!
DATA c5<>+0(SB)/4, $0x3c088889
DATA c5<>+4(SB)/4, $0x3c088889
DATA c5<>+8(SB)/4, $0x3c088889
DATA c5<>+12(SB)/4, $0x3c088889
DATA c5<>+16(SB)/4, $0x3c088889
DATA c5<>+20(SB)/4, $0x3c088889
DATA c5<>+24(SB)/4, $0x3c088889
DATA c5<>+28(SB)/4, $0x3c088889
GLOBL c5<>(SB), RODATA|NOPTR, $32

// c6: 1/6!
DATA c6<>+0(SB)/4, $0x3ab60b61
DATA c6<>+4(SB)/4, $0x3ab60b61
DATA c6<>+8(SB)/4, $0x3ab60b61
DATA c6<>+12(SB)/4, $0x3ab60b61
DATA c6<>+16(SB)/4, $0x3ab60b61
DATA c6<>+20(SB)/4, $0x3ab60b61
DATA c6<>+24(SB)/4, $0x3ab60b61
DATA c6<>+28(SB)/4, $0x3ab60b61
GLOBL c6<>(SB), RODATA|NOPTR, $32

// c7: 1/7!
DATA c7<>+0(SB)/4, $0x39500d01
DATA c7<>+4(SB)/4, $0x39500d01
DATA c7<>+8(SB)/4, $0x39500d01
DATA c7<>+12(SB)/4, $0x39500d01
DATA c7<>+16(SB)/4, $0x39500d01
DATA c7<>+20(SB)/4, $0x39500d01
DATA c7<>+24(SB)/4, $0x39500d01
DATA c7<>+28(SB)/4, $0x39500d01
GLOBL c7<>(SB), RODATA|NOPTR, $32

// one: 1
DATA one<>+0(SB)/4, $0x3f800000
DATA one<>+4(SB)/4, $0x3f800000
DATA one<>+8(SB)/4, $0x3f800000
DATA one<>+12(SB)/4, $0x3f800000
DATA one<>+16(SB)/4, $0x3f800000
DATA one<>+20(SB)/4, $0x3f800000
DATA one<>+24(SB)/4, $0x3f800000
DATA one<>+28(SB)/4, $0x3f800000
GLOBL one<>(SB), RODATA|NOPTR, $32

// two: 2
DATA two<>+0(SB)/4, $0x40000000
DATA two<>+4(SB)/4, $0x40000000
DATA two<>+8(SB)/4, $0x40000000
DATA two<>+12(SB)/4, $0x40000000
DATA two<>+16(SB)/4, $0x40000000
DATA two<>+20(SB)/4, $0x40000000
DATA two<>+24(SB)/4, $0x40000000
DATA two<>+28(SB)/4, $0x40000000
GLOBL two<>(SB), RODATA|NOPTR, $32

// tthr: 0.625: below it tanh uses its odd polynomial
DATA tthr<>+0(SB)/4, $0x3f200000
DATA tthr<>+4(SB)/4, $0x3f200000
DATA tthr<>+8(SB)/4, $0x3f200000
DATA tthr<>+12(SB)/4, $0x3f200000
DATA tthr<>+16(SB)/4, $0x3f200000
DATA tthr<>+20(SB)/4, $0x3f200000
DATA tthr<>+24(SB)/4, $0x3f200000
DATA tthr<>+28(SB)/4, $0x3f200000
GLOBL tthr<>(SB), RODATA|NOPTR, $32

// t1: tanh(a) = a + a³·(t1 + t2·a² + t3·a⁴ + t4·a⁶ + t5·a⁸) on [0, 0.625]
DATA t1<>+0(SB)/4, $0xbeaaaa99
DATA t1<>+4(SB)/4, $0xbeaaaa99
DATA t1<>+8(SB)/4, $0xbeaaaa99
DATA t1<>+12(SB)/4, $0xbeaaaa99
DATA t1<>+16(SB)/4, $0xbeaaaa99
DATA t1<>+20(SB)/4, $0xbeaaaa99
DATA t1<>+24(SB)/4, $0xbeaaaa99
DATA t1<>+28(SB)/4, $0xbeaaaa99
GLOBL t1<>(SB), RODATA|NOPTR, $32

DATA t2<>+0(SB)/4, $0x3e08836b
DATA t2<>+4(SB)/4, $0x3e08836b
DATA t2<>+8(SB)/4, $0x3e08836b
DATA t2<>+12(SB)/4, $0x3e08836b
DATA t2<>+16(SB)/4, $0x3e08836b
DATA t2<>+20(SB)/4, $0x3e08836b
DATA t2<>+24(SB)/4, $0x3e08836b
DATA t2<>+28(SB)/4, $0x3e08836b
GLOBL t2<>(SB), RODATA|NOPTR, $32

DATA t3<>+0(SB)/4, $0xbd5c19a6
DATA t3<>+4(SB)/4, $0xbd5c19a6
DATA t3<>+8(SB)/4, $0xbd5c19a6
DATA t3<>+12(SB)/4, $0xbd5c19a6
DATA t3<>+16(SB)/4, $0xbd5c19a6
DATA t3<>+20(SB)/4, $0xbd5c19a6
DATA t3<>+24(SB)/4, $0xbd5c19a6
DATA t3<>+28(SB)/4, $0xbd5c19a6
GLOBL t3<>(SB), RODATA|NOPTR, $32

DATA t4<>+0(SB)/4, $0x3ca8f8f1
DATA t4<>+4(SB)/4, $0x3ca8f8f1
DATA t4<>+8(SB)/4, $0x3ca8f8f1
DATA t4<>+12(SB)/4, $0x3ca8f8f1
DATA t4<>+16(SB)/4, $0x3ca8f8f1
DATA t4<>+20(SB)/4, $0x3ca8f8f1
DATA t4<>+24(SB)/4, $0x3ca8f8f1
DATA t4<>+28(SB)/4, $0x3ca8f8f1
GLOBL t4<>(SB), RODATA|NOPTR, $32

DATA t5<>+0(SB)/4, $0xbbba85c2
DATA t5<>+4(SB)/4, $0xbbba85c2
DATA t5<>+8(SB)/4, $0xbbba85c2
DATA t5<>+12(SB)/4, $0xbbba85c2
DATA t5<>+16(SB)/4, $0xbbba85c2
DATA t5<>+20(SB)/4, $0xbbba85c2
DATA t5<>+24(SB)/4, $0xbbba85c2
DATA t5<>+28(SB)/4, $0xbbba85c2
GLOBL t5<>(SB), RODATA|NOPTR, $32

// absmask: clears the sign bit
DATA absmask<>+0(SB)/4, $0x7fffffff
DATA absmask<>+4(SB)/4, $0x7fffffff
DATA absmask<>+8(SB)/4, $0x7fffffff
DATA absmask<>+12(SB)/4, $0x7fffffff
DATA absmask<>+16(SB)/4, $0x7fffffff
DATA absmask<>+20(SB)/4, $0x7fffffff
DATA absmask<>+24(SB)/4, $0x7fffffff
DATA absmask<>+28(SB)/4, $0x7fffffff
GLOBL absmask<>(SB), RODATA|NOPTR, $32

// signmask: the sign bit
DATA signmask<>+0(SB)/4, $0x80000000
DATA signmask<>+4(SB)/4, $0x80000000
DATA signmask<>+8(SB)/4, $0x80000000
DATA signmask<>+12(SB)/4, $0x80000000
DATA signmask<>+16(SB)/4, $0x80000000
DATA signmask<>+20(SB)/4, $0x80000000
DATA signmask<>+24(SB)/4, $0x80000000
DATA signmask<>+28(SB)/4, $0x80000000
GLOBL signmask<>(SB), RODATA|NOPTR, $32

// bias127: float32 exponent bias, as int32
DATA bias127<>+0(SB)/4, $0x0000007f
DATA bias127<>+4(SB)/4, $0x0000007f
DATA bias127<>+8(SB)/4, $0x0000007f
DATA bias127<>+12(SB)/4, $0x0000007f
DATA bias127<>+16(SB)/4, $0x0000007f
DATA bias127<>+20(SB)/4, $0x0000007f
DATA bias127<>+24(SB)/4, $0x0000007f
DATA bias127<>+28(SB)/4, $0x0000007f
GLOBL bias127<>(SB), RODATA|NOPTR, $32
// EXPPS sets X to exp(X) in every lane (approx.go: expf); clobbers T and U.
// Range reduction x = n·ln2 + r with |r| <= ln2/2, Taylor polynomial of
// degree 7 for e^r, then 2^n built in the exponent field.
#define EXPPS(X, T, U) \
	VMAXPS explo<>(SB), X, X       \
	VMINPS exphi<>(SB), X, X       \
	VMULPS log2e<>(SB), X, T       \
	VROUNDPS $0, T, T              \
	VFNMADD231PS ln2hi<>(SB), T, X \
	VFNMADD231PS ln2lo<>(SB), T, X \
	VMOVUPS c7<>(SB), U            \
	VFMADD213PS c6<>(SB), X, U     \
	VFMADD213PS c5<>(SB), X, U     \
	VFMADD213PS c4<>(SB), X, U     \
	VFMADD213PS c3<>(SB), X, U     \
	VFMADD213PS c2<>(SB), X, U     \
	VFMADD213PS one<>(SB), X, U    \
	VFMADD213PS one<>(SB), X, U    \
	VCVTPS2DQ T, T                 \
	VPADDD bias127<>(SB), T, T     \
	VPSLLD $23, T, T               \
	VMULPS T, U, X

// SIGMOID sets X to 1/(1+exp(-X)); clobbers T and U.
#define SIGMOID(X, T, U) \
	VXORPS signmask<>(SB), X, X \
	EXPPS(X, T, U)              \
	VADDPS one<>(SB), X, X      \
	VMOVUPS one<>(SB), T        \
	VDIVPS X, T, X

// TANH sets X to tanh(X): for |x| >= 0.625, 1 - 2/(exp(2|x|)+1), else the
// odd polynomial; the sign is x's. Clobbers T, U, A and S.
#define TANH(X, T, U, A, S) \
	VANDPS absmask<>(SB), X, A     \
	VANDPS signmask<>(SB), X, S    \
	VADDPS A, A, X                 \
	EXPPS(X, T, U)                 \
	VADDPS one<>(SB), X, X         \
	VMOVUPS two<>(SB), T           \
	VDIVPS X, T, X                 \
	VMOVUPS one<>(SB), T           \
	VSUBPS X, T, X                 \
	VMULPS A, A, T                 \
	VMOVUPS t5<>(SB), U            \
	VFMADD213PS t4<>(SB), T, U     \
	VFMADD213PS t3<>(SB), T, U     \
	VFMADD213PS t2<>(SB), T, U     \
	VFMADD213PS t1<>(SB), T, U     \
	VMULPS A, T, T                 \
	VFMADD213PS A, T, U            \
	VCMPPS $1, tthr<>(SB), A, T    \
	VBLENDVPS T, U, X, X           \
	VORPS S, X, X

// CELLC updates c at CPTR from the pre-activations (biases added) i, f,
// g, o of eight units in Y0..Y3, leaving the new c in Y0 and σ(o) in
// Y3. Clobbers Y1, Y2 and Y8..Y11.
#define CELLC(CPTR) \
	SIGMOID(Y0, Y8, Y9)          \
	SIGMOID(Y1, Y8, Y9)          \
	TANH(Y2, Y8, Y9, Y10, Y11)   \
	SIGMOID(Y3, Y8, Y9)          \
	VMULPS Y2, Y0, Y0            \
	VFMADD231PS CPTR, Y1, Y0     \
	VMOVUPS Y0, CPTR

// LSTMCELL finishes eight units from the pre-activations (biases added)
// i, f, g, o in Y0..Y3: c at CPTR is updated and h stored at HPTR.
// Clobbers Y0..Y3 and Y8..Y11.
#define LSTMCELL(CPTR, HPTR) \
	CELLC(CPTR)                  \
	TANH(Y0, Y8, Y9, Y10, Y11)   \
	VMULPS Y3, Y0, Y0            \
	VMOVUPS Y0, HPTR

// LSTMPANEL adds W_q·h to the eight sums of gate Q's panel of the units
// at CX bytes: DI is the panel's first W row (rows R14 bytes apart), SI
// the end of h, LOOP a label of its own. Each sum is made as gemmNT1x8
// makes it with beta 1: adding xp with one more rounding is what its
// fused multiply-add by 1 does. The sums go to xp and stay in YOUT; DI
// moves on to gate Q+1's panel, n rows further.
#define LSTMPANEL(Q, YOUT, LOOP) \
	MOVQ k+8(FP), DX                \
	SHLQ $2, DX                     \
	LEAQ (DI)(DX*1), AX             \
	NEXT7ROWS                       \
	NEGQ DX                         \
	ZERO8                           \
LOOP:                               \
	VMOVUPS (SI)(DX*1), Y8          \
	FMA18(0)                        \
	ADDQ $32, DX                    \
	JNZ  LOOP                       \
	REDUCE8                         \
	MOVQ n+0(FP), DX                \
	IMULQ $(4*Q), DX                \
	ADDQ xp+40(FP), DX              \
	VADDPS (DX)(CX*1), Y0, YOUT     \
	VMOVUPS YOUT, (DX)(CX*1)        \
	MOVQ n+0(FP), DX                \
	IMULQ R14, DX                   \
	ADDQ DX, DI

// CELLIN is the first part of LSTMCELL: from the pre-activations i, f,
// g, o in Y0..Y3 it updates c at CPTR and leaves the new c in Y10 and
// σ(o) in Y11 for CELLOUT, which lstmStepAVX2 runs after the next
// group's products so that the two parts' chains overlap.
#define CELLIN(CPTR) \
	CELLC(CPTR)                  \
	VMOVAPS Y0, Y10              \
	VMOVAPS Y3, Y11

// CELLOUT stores h = σ(o)·tanh(c) at HPTR from CELLIN's Y10 and Y11;
// clobbers Y0..Y3.
#define CELLOUT(HPTR) \
	TANH(Y10, Y0, Y1, Y2, Y3)    \
	VMULPS Y11, Y10, Y10         \
	VMOVUPS Y10, HPTR

// func lstmAVX2(n int, stride int, y *float32, bias *float32, c *float32, h *float32)
//
// One batch row of LSTMGates for the first n (a multiple of 8) units; y and
// bias hold four gate blocks (i, f, g, o), stride elements apart.
TEXT ·lstmAVX2(SB), NOSPLIT, $0-48
	MOVQ n+0(FP), R12
	SHLQ $2, R12
	MOVQ stride+8(FP), R11
	SHLQ $2, R11
	MOVQ y+16(FP), SI
	LEAQ (SI)(R11*1), AX
	LEAQ (AX)(R11*1), R13
	LEAQ (R13)(R11*1), BX
	MOVQ bias+24(FP), DI
	LEAQ (DI)(R11*1), R10
	LEAQ (R10)(R11*1), CX
	LEAQ (CX)(R11*1), R11
	MOVQ c+32(FP), R8
	MOVQ h+40(FP), R9
	XORQ DX, DX

lstmloop:
	CMPQ DX, R12
	JGE  lstmdone
	VMOVUPS (SI)(DX*1), Y0
	VADDPS (DI)(DX*1), Y0, Y0
	VMOVUPS (AX)(DX*1), Y1
	VADDPS (R10)(DX*1), Y1, Y1
	VMOVUPS (R13)(DX*1), Y2
	VADDPS (CX)(DX*1), Y2, Y2
	VMOVUPS (BX)(DX*1), Y3
	VADDPS (R11)(DX*1), Y3, Y3
	LSTMCELL((R8)(DX*1), (R9)(DX*1))
	ADDQ $32, DX
	JMP  lstmloop

lstmdone:
	VZEROUPPER
	RET

// func lstmStepAVX2(n, k int, h, w *float32, ldw int, xp, bias, c, hout *float32, lo, hi int)
//
// One LSTM time step of one batch row, units [lo, hi) of n (n, k, lo and
// hi multiples of 8, k positive), eight units at a time: the four gate
// panels (W rows q*n+u .. q*n+u+7, ldw floats apart) against h, added to
// xp and stored there, then the gates of those eight units as lstmAVX2
// computes them, from the sums still in Y12..Y15, in two parts: c is
// updated at once (CELLIN), and h = σ(o)·tanh(c) is written after the
// next group's panels (CELLOUT), so that tanh(c), the second half of a
// group's long chain of dependent operations, runs beside the next
// group's first half rather than after it: at hidden 64, where the
// gates are a quarter of a step, the step ran 1.07x faster on AMD's
// Zen 3 (BenchmarkLSTMStep) and P 1.03-1.07x (docs/performance.md).
// Every bit is as before. hout must not overlap h.
//
// Registers: SI the end of h; DI the panel's first W row; AX, BX,
// R8..R13 the ends of its eight rows; DX their byte offset; CX the
// group's first unit, in bytes; R14 ldw in bytes; Y10 and Y11 the group
// before's new c and σ(o), from CELLIN to its CELLOUT.
TEXT ·lstmStepAVX2(SB), NOSPLIT, $0-88
	MOVQ k+8(FP), SI
	SHLQ $2, SI
	ADDQ h+16(FP), SI
	MOVQ ldw+32(FP), R14
	SHLQ $2, R14
	MOVQ lo+72(FP), CX
	SHLQ $2, CX

stepgroup:
	MOVQ hi+80(FP), DX
	SHLQ $2, DX
	CMPQ CX, DX
	JGE  stepdone
	MOVQ CX, DI
	IMULQ ldw+32(FP), DI
	ADDQ w+24(FP), DI
	LSTMPANEL(0, Y12, steppi)
	LSTMPANEL(1, Y13, steppf)
	LSTMPANEL(2, Y14, steppg)
	LSTMPANEL(3, Y15, steppo)
	MOVQ hout+64(FP), R10
	MOVQ lo+72(FP), DX
	SHLQ $2, DX
	CMPQ CX, DX
	JEQ  stepfirst
	CELLOUT(-32(R10)(CX*1))

stepfirst:
	MOVQ n+0(FP), AX
	SHLQ $2, AX
	MOVQ bias+48(FP), BX
	ADDQ CX, BX
	LEAQ (BX)(AX*2), R8
	VADDPS (BX), Y12, Y0
	VADDPS (BX)(AX*1), Y13, Y1
	VADDPS (R8), Y14, Y2
	VADDPS (R8)(AX*1), Y15, Y3
	MOVQ c+56(FP), R9
	CELLIN((R9)(CX*1))
	ADDQ $32, CX
	JMP  stepgroup

stepdone:
	MOVQ lo+72(FP), DX
	SHLQ $2, DX
	CMPQ CX, DX
	JEQ  stepnone
	MOVQ hout+64(FP), R10
	CELLOUT(-32(R10)(CX*1))

stepnone:
	VZEROUPPER
	RET

// func gruAVX2(n int, stride int, x *float32, p *float32, bih *float32, bhh *float32, hprev *float32, hout *float32)
//
// One batch row of GRUGates for the first n (a multiple of 8) units; x, p,
// bih and bhh hold three gate blocks (r, z, n), stride elements apart.
TEXT ·gruAVX2(SB), NOSPLIT, $0-64
	MOVQ n+0(FP), R12
	SHLQ $2, R12
	MOVQ stride+8(FP), R10
	SHLQ $2, R10
	LEAQ (R10)(R10*1), R11
	MOVQ x+16(FP), SI
	MOVQ p+24(FP), AX
	MOVQ bih+32(FP), DI
	MOVQ bhh+40(FP), BX
	XORQ DX, DX

gruloop:
	CMPQ DX, R12
	JGE  grudone
	LEAQ (SI)(DX*1), R13
	LEAQ (AX)(DX*1), CX
	LEAQ (DI)(DX*1), R8
	LEAQ (BX)(DX*1), R9
	VMOVUPS (R13), Y0
	VADDPS (R8), Y0, Y0
	VADDPS (CX), Y0, Y0
	VADDPS (R9), Y0, Y0
	SIGMOID(Y0, Y8, Y9)
	VMOVUPS (R13)(R10*1), Y1
	VADDPS (R8)(R10*1), Y1, Y1
	VADDPS (CX)(R10*1), Y1, Y1
	VADDPS (R9)(R10*1), Y1, Y1
	SIGMOID(Y1, Y8, Y9)
	VMOVUPS (CX)(R11*1), Y2
	VADDPS (R9)(R11*1), Y2, Y2
	VMOVUPS (R13)(R11*1), Y3
	VADDPS (R8)(R11*1), Y3, Y3
	VFMADD231PS Y2, Y0, Y3
	TANH(Y3, Y8, Y9, Y10, Y11)
	MOVQ hprev+48(FP), R8
	VMOVUPS (R8)(DX*1), Y4
	VSUBPS Y3, Y4, Y4
	VFMADD213PS Y3, Y1, Y4
	MOVQ hout+56(FP), R9
	VMOVUPS Y4, (R9)(DX*1)
	ADDQ $32, DX
	JMP  gruloop

grudone:
	VZEROUPPER
	RET

// func sigmoidAVX2(n int, x *float32, y *float32)
// y[i] = σ(x[i]) for i < n, n a multiple of 8.
TEXT ·sigmoidAVX2(SB), NOSPLIT, $0-24
	MOVQ n+0(FP), CX
	SHLQ $2, CX
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	XORQ DX, DX

sigloop:
	CMPQ DX, CX
	JGE  sigdone
	VMOVUPS (SI)(DX*1), Y0
	SIGMOID(Y0, Y8, Y9)
	VMOVUPS Y0, (DI)(DX*1)
	ADDQ $32, DX
	JMP  sigloop

sigdone:
	VZEROUPPER
	RET

// func tanhAVX2(n int, x *float32, y *float32)
// y[i] = tanh(x[i]) for i < n, n a multiple of 8.
TEXT ·tanhAVX2(SB), NOSPLIT, $0-24
	MOVQ n+0(FP), CX
	SHLQ $2, CX
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	XORQ DX, DX

tanhloop:
	CMPQ DX, CX
	JGE  tanhdone
	VMOVUPS (SI)(DX*1), Y0
	TANH(Y0, Y8, Y9, Y10, Y11)
	VMOVUPS Y0, (DI)(DX*1)
	ADDQ $32, DX
	JMP  tanhloop

tanhdone:
	VZEROUPPER
	RET

// The Binary TreeLSTM kernels go through their units 64 at a time in two
// passes: first each gate's nonlinearity over the 64 units into a frame
// on the stack (one sigmoid or tanh per loop iteration, so the iterations
// are independent and the core overlaps them), then the state update over
// the same units. Fused in one pass, an iteration's chains (a gate's
// nonlinearity, the products into c, tanh(c)) are longer than the
// out-of-order window covers, and it ran at a third of the speed. The
// arithmetic, and so every bit, is that of one fused pass.

// TREEGATE runs pass one for the gate at Y (its pre-activations) and B
// (its biases): ACT(y + b) for DX bytes of units into the frame at F.
// Clobbers AX, Y0, Y8..Y11.
#define TREEGATE(Y, B, F, ACT, LOOP) \
	XORQ AX, AX                \
LOOP:                          \
	VMOVUPS (Y)(AX*1), Y0      \
	VADDPS (B)(AX*1), Y0, Y0   \
	ACT                        \
	VMOVUPS Y0, F(R13)(AX*1)   \
	ADDQ $32, AX               \
	CMPQ AX, DX                \
	JLT  LOOP

// TREECHUNK ends the kernel at DONE when no units are left (CX bytes),
// else sets DX to the bytes of this chunk: min(CX, 256), 64 units.
#define TREECHUNK(DONE) \
	TESTQ CX, CX    \
	JLE   DONE      \
	MOVQ  $256, DX  \
	CMPQ  CX, DX    \
	CMOVQLT CX, DX

#define SIG0 SIGMOID(Y0, Y8, Y9)
#define TANH0 TANH(Y0, Y8, Y9, Y10, Y11)

// func treeLeafAVX2(n int, stride int, y *float32, bias *float32, c *float32, h *float32)
//
// One Binary TreeLSTM leaf (TreeLeafGates) for the first n (a multiple of
// 8) units; y and bias hold three gate blocks (i, o, u), stride elements
// apart. Frame: σ(i) at 0, σ(o) at 256, tanh(u) at 512.
TEXT ·treeLeafAVX2(SB), 0, $768-48
	MOVQ n+0(FP), CX
	SHLQ $2, CX
	MOVQ stride+8(FP), R11
	SHLQ $2, R11
	MOVQ y+16(FP), SI
	MOVQ bias+24(FP), DI
	MOVQ c+32(FP), R8
	MOVQ h+40(FP), R9
	LEAQ 0(SP), R13

leafchunk:
	TREECHUNK(leafdone)
	TREEGATE(SI, DI, 0, SIG0, leafi)
	LEAQ (SI)(R11*1), R14
	LEAQ (DI)(R11*1), R12
	TREEGATE(R14, R12, 256, SIG0, leafo)
	LEAQ (SI)(R11*2), R14
	LEAQ (DI)(R11*2), R12
	TREEGATE(R14, R12, 512, TANH0, leafu)
	XORQ AX, AX

leafstate:
	VMOVUPS 0(R13)(AX*1), Y0
	VMULPS 512(R13)(AX*1), Y0, Y0
	VMOVUPS Y0, (R8)(AX*1)
	TANH(Y0, Y8, Y9, Y10, Y11)
	VMULPS 256(R13)(AX*1), Y0, Y0
	VMOVUPS Y0, (R9)(AX*1)
	ADDQ $32, AX
	CMPQ AX, DX
	JLT  leafstate
	ADDQ DX, SI
	ADDQ DX, DI
	ADDQ DX, R8
	ADDQ DX, R9
	SUBQ DX, CX
	JMP  leafchunk

leafdone:
	VZEROUPPER
	RET

// func treeInnerAVX2(n int, stride int, y *float32, bias *float32, cl *float32, cr *float32, c *float32, h *float32)
//
// One Binary TreeLSTM inner node (TreeInnerGates) for the first n (a
// multiple of 8) units; y and bias hold five gate blocks (i, f_l, f_r, o,
// u), stride elements apart. Frame: σ(i), σ(f_l), σ(f_r), σ(o), tanh(u)
// at 0, 256, 512, 768, 1024. c = i·u, then + f_l·c_l and + f_r·c_r by
// fused multiply-adds.
TEXT ·treeInnerAVX2(SB), 0, $1280-64
	MOVQ n+0(FP), CX
	SHLQ $2, CX
	MOVQ stride+8(FP), R11
	SHLQ $2, R11
	MOVQ y+16(FP), SI
	MOVQ bias+24(FP), DI
	MOVQ cl+32(FP), R8
	MOVQ cr+40(FP), R9
	MOVQ c+48(FP), R10
	MOVQ h+56(FP), BX
	LEAQ 0(SP), R13

innerchunk:
	TREECHUNK(innerdone)
	TREEGATE(SI, DI, 0, SIG0, inneri)
	LEAQ (SI)(R11*1), R14
	LEAQ (DI)(R11*1), R12
	TREEGATE(R14, R12, 256, SIG0, innerfl)
	LEAQ (SI)(R11*2), R14
	LEAQ (DI)(R11*2), R12
	TREEGATE(R14, R12, 512, SIG0, innerfr)
	ADDQ R11, R14
	ADDQ R11, R12
	TREEGATE(R14, R12, 768, SIG0, innero)
	LEAQ (SI)(R11*4), R14
	LEAQ (DI)(R11*4), R12
	TREEGATE(R14, R12, 1024, TANH0, inneru)
	XORQ AX, AX

innerstate:
	VMOVUPS 0(R13)(AX*1), Y0
	VMULPS 1024(R13)(AX*1), Y0, Y0
	VMOVUPS 256(R13)(AX*1), Y1
	VFMADD231PS (R8)(AX*1), Y1, Y0
	VMOVUPS 512(R13)(AX*1), Y2
	VFMADD231PS (R9)(AX*1), Y2, Y0
	VMOVUPS Y0, (R10)(AX*1)
	TANH(Y0, Y8, Y9, Y10, Y11)
	VMULPS 768(R13)(AX*1), Y0, Y0
	VMOVUPS Y0, (BX)(AX*1)
	ADDQ $32, AX
	CMPQ AX, DX
	JLT  innerstate
	ADDQ DX, SI
	ADDQ DX, DI
	ADDQ DX, R8
	ADDQ DX, R9
	ADDQ DX, R10
	ADDQ DX, BX
	SUBQ DX, CX
	JMP  innerchunk

innerdone:
	VZEROUPPER
	RET
