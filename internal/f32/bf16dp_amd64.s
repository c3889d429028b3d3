//go:build !purego

#include "textflag.h"
#include "macros_amd64.h"

// The bf16 kernels for CPUs with AVX512_BF16. VDPBF16PS multiplies pairs
// of bf16 values and adds both products to a float32 lane: lane i of the
// accumulator gains w[2i]·x[2i] + w[2i+1]·x[2i+1], each product exact in
// float32, each addition rounded to nearest even (denormal inputs and
// results are taken as zero). So sixteen lanes take 32 columns of a W row
// per instruction, with no widening.
//
// x must be bf16 too. splitBF16DP writes each value as the sum of two
// bf16 values, hi its top 16 bits and lo the exact float32 difference x -
// hi rounded to bf16 (nearest even), so that hi + lo is x to within 2^-16
// of it, and the products go through both: W·x = W·hi + W·lo. The weights carry
// their own bf16 rounding (2^-9); x keeps nearly all its precision. The
// split x is laid out a 32-column chunk at a time, hi's 32 values (64
// bytes) then lo's, 128 bytes a chunk, and padded with zeros to whole
// chunks.
//
// The Go assembler has no AVX512_BF16 mnemonics, so DPBF spells
// VDPBF16PS Z(d), Z(s1), Z(s2) (Intel order: Z(d) += pairs of Z(s1) and
// Z(s2)) in bytes: EVEX.512.F3.0F38.W0 52 /r, register operands only.
#define DPBF(D, S1, S2) \
	BYTE $0x62; \
	BYTE $(0xF2 ^ (((D)&8)<<4) ^ (((S2)&8)<<2) ^ (((S2)&16)<<2) ^ ((D)&16)); \
	BYTE $(((15 ^ ((S1)&15))<<3) | 6); \
	BYTE $(0x48 ^ (((S1)&16)>>1)); \
	BYTE $0x52; \
	BYTE $(0xC0 | (((D)&7)<<3) | ((S2)&7))

// oddWords<> indexes the odd 16-bit words of two registers (VPERMI2W):
// the high halves of 32 float32 values, in order.
DATA oddWords<>+0(SB)/8, $0x0007000500030001
DATA oddWords<>+8(SB)/8, $0x000f000d000b0009
DATA oddWords<>+16(SB)/8, $0x0017001500130011
DATA oddWords<>+24(SB)/8, $0x001f001d001b0019
DATA oddWords<>+32(SB)/8, $0x0027002500230021
DATA oddWords<>+40(SB)/8, $0x002f002d002b0029
DATA oddWords<>+48(SB)/8, $0x0037003500330031
DATA oddWords<>+56(SB)/8, $0x003f003d003b0039
GLOBL oddWords<>(SB), RODATA|NOPTR, $64

// hiBits<> keeps the high 16 bits of a 32-bit lane; half<> is 0x7fff
// and lsb<> 1, for rounding to nearest even at bit 16.
DATA hiBits<>+0(SB)/4, $0xffff0000
GLOBL hiBits<>(SB), RODATA|NOPTR, $4
DATA half<>+0(SB)/4, $0x00007fff
GLOBL half<>(SB), RODATA|NOPTR, $4
DATA lsb<>+0(SB)/4, $0x00000001
GLOBL lsb<>(SB), RODATA|NOPTR, $4

// ROUND16 rounds the float32 values in Z to nearest even at bit 16 (the
// bf16 value is then the high half of each lane). Clobbers T.
#define ROUND16(Z, T) \
	VPSRLD $16, Z, T             \
	VPANDD.BCST lsb<>(SB), T, T  \
	VPADDD.BCST half<>(SB), T, T \
	VPADDD T, Z, Z

// TAILMASK sets K1 to the mask of a row's last k%32 columns; clobbers
// DX and T. DPTAIL sets the zero flag when there are none; clobbers DX.
#define TAILMASK(T) \
	MOVQ  k+8(FP), DX  \
	ANDQ  $31, DX      \
	MOVQ  $-1, T       \
	BZHIQ DX, T, T     \
	KMOVD T, K1

#define DPTAIL \
	MOVQ k+8(FP), DX \
	ANDQ $31, DX

// SPLIT32 splits the 32 values in Z0 (the first 16) and Z1 into hi and
// lo at (DI) and 64(DI); Z6 holds oddWords. Clobbers Z2..Z5.
#define SPLIT32 \
	VPANDD.BCST hiBits<>(SB), Z0, Z2 \
	VPANDD.BCST hiBits<>(SB), Z1, Z3 \
	VSUBPS Z2, Z0, Z0                \
	VSUBPS Z3, Z1, Z1                \
	ROUND16(Z0, Z4)                  \
	ROUND16(Z1, Z5)                  \
	VMOVDQU32 Z6, Z4                 \
	VPERMI2W Z3, Z2, Z4              \
	VMOVDQU32 Z6, Z5                 \
	VPERMI2W Z1, Z0, Z5              \
	VMOVDQU32 Z4, (DI)               \
	VMOVDQU32 Z5, 64(DI)

// SPLITROW writes the CX values at SI split into hi and lo (above) to
// DI, a 32-column chunk (128 bytes) at a time, the last chunk's columns
// from CX on zeros; Z6 holds oddWords. Clobbers AX, CX, SI, DI, Z0..Z5,
// K2 and K3. Labels of its own: one expansion per function.
#define SPLITROW \
split32:                     \
	CMPQ CX, $32             \
	JLT  splittail           \
	VMOVUPS (SI), Z0         \
	VMOVUPS 64(SI), Z1       \
	SPLIT32                  \
	ADDQ $128, SI            \
	ADDQ $128, DI            \
	SUBQ $32, CX             \
	JMP  split32             \
splittail:                   \
	TESTQ CX, CX             \
	JZ    splitdone          \
	MOVQ  $-1, AX            \
	BZHIQ CX, AX, AX         \
	KMOVQ AX, K2             \
	KSHIFTRQ $16, K2, K3     \
	VMOVUPS.Z (SI), K2, Z0   \
	VMOVUPS.Z 64(SI), K3, Z1 \
	SPLIT32                  \
splitdone:

// func splitBF16DP(k int, x *float32, dst *uint16)
//
// Writes x[0:k] split into hi and lo (above) to dst, as the kernels below
// split their rows of A (tests compare it with splitBF16Go). dst holds
// 64·ceil(k/32) values.
TEXT ·splitBF16DP(SB), NOSPLIT, $0-24
	MOVQ k+0(FP), CX
	MOVQ x+8(FP), SI
	MOVQ dst+16(FP), DI
	VMOVDQU32 oddWords<>(SB), Z6
	SPLITROW
	VZEROUPPER
	RET

// DPROW loads the 32 bf16 values at DX of the W row at P into ZR (number
// R) and adds its products with x's hi (Z24) to Z(ACC) and with its lo
// (Z25) to Z(ACC+8): two chains, so that a short row is not one long
// chain of dependent products. DPROWM loads only the columns K1 masks,
// the rest as zeros.
#define DPROW(P, ZR, R, ACC) \
	VMOVDQU16 (P)(DX*1), ZR \
	DPBF(ACC, R, 24)        \
	DPBF(ACC+8, R, 25)

#define DPROWM(P, ZR, R, ACC) \
	VMOVDQU16.Z (P), K1, ZR \
	DPBF(ACC, R, 24)        \
	DPBF(ACC+8, R, 25)

// FOLD16 adds the high eight lanes of each of Z0..Z7 to its low eight,
// leaving eight-lane sums in Y0..Y7 for REDUCE8. Clobbers Y8.
#define FOLD16 \
	VEXTRACTF32X8 $1, Z0, Y8 \
	VADDPS Y8, Y0, Y0        \
	VEXTRACTF32X8 $1, Z1, Y8 \
	VADDPS Y8, Y1, Y1        \
	VEXTRACTF32X8 $1, Z2, Y8 \
	VADDPS Y8, Y2, Y2        \
	VEXTRACTF32X8 $1, Z3, Y8 \
	VADDPS Y8, Y3, Y3        \
	VEXTRACTF32X8 $1, Z4, Y8 \
	VADDPS Y8, Y4, Y4        \
	VEXTRACTF32X8 $1, Z5, Y8 \
	VADDPS Y8, Y5, Y5        \
	VEXTRACTF32X8 $1, Z6, Y8 \
	VADDPS Y8, Y6, Y6        \
	VEXTRACTF32X8 $1, Z7, Y8 \
	VADDPS Y8, Y7, Y7

// ZERO16Z clears Z0..Z15; MERGE16Z adds Z8..Z15 into Z0..Z7.
#define ZERO16Z \
	VPXORD Z0, Z0, Z0    \
	VPXORD Z1, Z1, Z1    \
	VPXORD Z2, Z2, Z2    \
	VPXORD Z3, Z3, Z3    \
	VPXORD Z4, Z4, Z4    \
	VPXORD Z5, Z5, Z5    \
	VPXORD Z6, Z6, Z6    \
	VPXORD Z7, Z7, Z7    \
	VPXORD Z8, Z8, Z8    \
	VPXORD Z9, Z9, Z9    \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11 \
	VPXORD Z12, Z12, Z12 \
	VPXORD Z13, Z13, Z13 \
	VPXORD Z14, Z14, Z14 \
	VPXORD Z15, Z15, Z15

#define MERGE16Z \
	VADDPS Z8, Z0, Z0   \
	VADDPS Z9, Z1, Z1   \
	VADDPS Z10, Z2, Z2  \
	VADDPS Z11, Z3, Z3  \
	VADDPS Z12, Z4, Z4  \
	VADDPS Z13, Z5, Z5  \
	VADDPS Z14, Z6, Z6  \
	VADDPS Z15, Z7, Z7

// func gemvBF16DP(n, k int, a *float32, w *uint16, ldw int, c *float32, beta float32)
//
// c[j] = beta*c[j] + Σ_p a[p]·W[j][p] for j < n, W bf16 [n][k] (leading
// dimension ldw), k <= dpBlock: a split into hi and lo in the frame
// (SPLITROW), then one row against eight W rows at a time, 32 columns a
// step, then the masked last k%32 columns; beta == 0 means c is not read.
// A short last panel repeats its last row, computed but not stored. The
// frame is not a Go variable, so nothing clears it before the split.
//
// Registers: SI the end of the split row's whole chunks; AX, BX, R8..R13 the same for
// eight W rows; DX the byte offset in W (negative; in x twice it); CX the
// W rows left; DI c; R14 ldw in bytes. Z24, Z25 hold a chunk of x, Z16..Z23
// the W rows'; W row q's products with hi add up in Zq, with lo in Z(8+q).
TEXT ·gemvBF16DP(SB), 0, $4096-52
	VMOVDQU32 oddWords<>(SB), Z6
	MOVQ a+16(FP), SI
	LEAQ xs-4096(SP), DI
	MOVQ k+8(FP), CX
	SPLITROW
	MOVQ n+0(FP), CX
	MOVQ k+8(FP), DX
	ANDQ $-32, DX
	SHLQ $1, DX
	LEAQ xs-4096(SP), SI
	LEAQ (SI)(DX*2), SI
	MOVQ w+24(FP), AX
	ADDQ DX, AX
	MOVQ ldw+32(FP), R14
	SHLQ $1, R14
	MOVQ c+40(FP), DI
	TAILMASK(BX)

pdp18:
	ROWS8(pdp18go, donedp18)

pdp18go:
	ZERO16Z
	MOVQ k+8(FP), DX
	ANDQ $-32, DX
	SHLQ $1, DX
	NEGQ DX
	JZ   tdp18

ldp18:
	VMOVDQU16 (SI)(DX*2), Z24
	VMOVDQU16 64(SI)(DX*2), Z25
	DPROW(AX, Z16, 16, 0)
	DPROW(BX, Z17, 17, 1)
	DPROW(R8, Z18, 18, 2)
	DPROW(R9, Z19, 19, 3)
	DPROW(R10, Z20, 20, 4)
	DPROW(R11, Z21, 21, 5)
	DPROW(R12, Z22, 22, 6)
	DPROW(R13, Z23, 23, 7)
	ADDQ $64, DX
	JNZ  ldp18

tdp18:
	DPTAIL
	JZ rdp18
	VMOVDQU16 (SI), Z24
	VMOVDQU16 64(SI), Z25
	DPROWM(AX, Z16, 16, 0)
	DPROWM(BX, Z17, 17, 1)
	DPROWM(R8, Z18, 18, 2)
	DPROWM(R9, Z19, 19, 3)
	DPROWM(R10, Z20, 20, 4)
	DPROWM(R11, Z21, 21, 5)
	DPROWM(R12, Z22, 22, 6)
	DPROWM(R13, Z23, 23, 7)

rdp18:
	MERGE16Z
	FOLD16
	REDUCE8
	STORE18(beta+48(FP), pdp18)

donedp18:
	VZEROUPPER
	RET

// DPROW2 is DPROW for two rows of x (hi and lo in Z24, Z25 and Z26,
// Z27) into Z(ACC0) and Z(ACC1), their lo products into Z(ACC0+8) and
// Z(ACC1+8); DPROW2M loads only the columns K1 masks.
#define DPROW2(P, ZR, R, ACC0, ACC1) \
	VMOVDQU16 (P)(DX*1), ZR \
	DPBF(ACC0, R, 24)       \
	DPBF(ACC0+8, R, 25)     \
	DPBF(ACC1, R, 26)       \
	DPBF(ACC1+8, R, 27)

#define DPROW2M(P, ZR, R, ACC0, ACC1) \
	VMOVDQU16.Z (P), K1, ZR \
	DPBF(ACC0, R, 24)       \
	DPBF(ACC0+8, R, 25)     \
	DPBF(ACC1, R, 26)       \
	DPBF(ACC1+8, R, 27)

// func gemmBF16DP2x4(n, k int, a *float32, lda int, w *uint16, ldw int, c *float32, ldc int, beta float32)
//
// C = A·Wᵀ + beta·C for two rows of A (k <= dpBlock), each split into
// hi and lo in the frame (4096 bytes a row), against four bf16 W rows at
// a time.
//
// Registers: SI, R12 the ends of the two split rows' whole chunks; AX, BX,
// R8, R9 the same for four W rows; DX the byte offset in W; CX the W rows
// left; R10 C's first row; R11 ldc and R14 ldw in bytes. Row 0 of A and W
// row q accumulate in Zq, row 1 in Z(4+q).
TEXT ·gemmBF16DP2x4(SB), 0, $8192-68
	VMOVDQU32 oddWords<>(SB), Z6
	MOVQ a+16(FP), R8
	MOVQ lda+24(FP), R9
	SHLQ $2, R9
	LEAQ xs-8192(SP), R10
	MOVQ $2, R11

split2:
	MOVQ R8, SI
	MOVQ R10, DI
	MOVQ k+8(FP), CX
	SPLITROW
	ADDQ R9, R8
	ADDQ $4096, R10
	DECQ R11
	JNZ  split2
	MOVQ n+0(FP), CX
	MOVQ k+8(FP), DX
	ANDQ $-32, DX
	SHLQ $1, DX
	LEAQ xs-8192(SP), SI
	LEAQ 4096(SI), R12
	LEAQ (SI)(DX*2), SI
	LEAQ (R12)(DX*2), R12
	MOVQ w+32(FP), AX
	ADDQ DX, AX
	MOVQ ldw+40(FP), R14
	SHLQ $1, R14
	MOVQ c+48(FP), R10
	MOVQ ldc+56(FP), R11
	SHLQ $2, R11
	TAILMASK(BX)

pdp24:
	ROWS4(pdp24go, donedp24)

pdp24go:
	ZERO16Z
	MOVQ k+8(FP), DX
	ANDQ $-32, DX
	SHLQ $1, DX
	NEGQ DX
	JZ   tdp24

ldp24:
	VMOVDQU16 (SI)(DX*2), Z24
	VMOVDQU16 64(SI)(DX*2), Z25
	VMOVDQU16 (R12)(DX*2), Z26
	VMOVDQU16 64(R12)(DX*2), Z27
	DPROW2(AX, Z16, 16, 0, 4)
	DPROW2(BX, Z17, 17, 1, 5)
	DPROW2(R8, Z18, 18, 2, 6)
	DPROW2(R9, Z19, 19, 3, 7)
	ADDQ $64, DX
	JNZ  ldp24

tdp24:
	DPTAIL
	JZ rdp24
	VMOVDQU16 (SI), Z24
	VMOVDQU16 64(SI), Z25
	VMOVDQU16 (R12), Z26
	VMOVDQU16 64(R12), Z27
	DPROW2M(AX, Z16, 16, 0, 4)
	DPROW2M(BX, Z17, 17, 1, 5)
	DPROW2M(R8, Z18, 18, 2, 6)
	DPROW2M(R9, Z19, 19, 3, 7)

rdp24:
	MERGE16Z
	FOLD16
	REDUCE8
	STORE24(beta+64(FP), pdp24)

donedp24:
	VZEROUPPER
	RET
