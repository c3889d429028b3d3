//go:build !purego

#include "textflag.h"
#include "macros_amd64.h"

// Z6W multiplies W row chunk WADDR, broadcast to both halves of Z27, by
// the three A pairs in Z24..Z26 into R0, R1, R2.
#define Z6W(WADDR, R0, R1, R2) \
	VBROADCASTF32X8 WADDR, Z27 \
	VFMADD231PS Z27, Z24, R0   \
	VFMADD231PS Z27, Z25, R1   \
	VFMADD231PS Z27, Z26, R2

// Z4W and Z2W are Z6W for two pairs (Z24, Z25) and one (Z24).
#define Z4W(WADDR, R0, R1) \
	VBROADCASTF32X8 WADDR, Z27 \
	VFMADD231PS Z27, Z24, R0   \
	VFMADD231PS Z27, Z25, R1

#define Z2W(WADDR, R0) \
	VBROADCASTF32X8 WADDR, Z27 \
	VFMADD231PS Z27, Z24, R0

// ZAPAIR loads a chunk of A row LO into the lower half of ZR (Y its
// lower half) and of row HI into the upper.
#define ZAPAIR(LO, HI, Y, ZR) \
	VMOVUPS      LO, Y \
	VINSERTF32X8 $1, HI, ZR, ZR

// Z6NEXT moves A row 0 and the three W row pointers a chunk on.
#define Z6NEXT \
	ADDQ $32, SI \
	ADDQ $32, AX \
	ADDQ $32, R8 \
	ADDQ $32, BX

// ZHADD is VHADDPS on each 256-bit half of a 512-bit register (there is
// no 512-bit VHADDPS): D = [S1₀+S1₁, S1₂+S1₃, S2₀+S2₁, S2₂+S2₃] in every
// 128-bit lane, the even elements and the odd ones gathered by VSHUFPS
// and added, the same sums as VHADDPS's. Clobbers Z30 and Z31.
#define ZHADD(S2, S1, D) \
	VSHUFPS $0x88, S2, S1, Z30 \
	VSHUFPS $0xdd, S2, S1, Z31 \
	VADDPS  Z31, Z30, D

// Z6PAIR sums the lanes of a pair of A rows' accumulators P0..P7 (row
// 2p in the lower halves, row 2p+1 in the upper) as REDUCE8 does each
// half, both rows at once: the horizontal sums by ZHADD, then
// REDUCE8's last step (the low 128 bits of the first sum and of the
// second plus their high 128 bits) with VSHUFF32X4, the sums put in
// order by one more. The eight sums of row 2p end in the lower half of
// P0, of row 2p+1 in the upper; beta·C is added by one fused
// multiply-add (beta == 0: C is not read) and the halves stored at SI
// and at SI plus DX. LO is P0's lower half. Clobbers Z28..Z31.
#define Z6PAIR(P0, P1, P2, P3, P4, P5, P6, P7, LO, PUT) \
	ZHADD(P1, P0, P0)                        \
	ZHADD(P3, P2, P2)                        \
	ZHADD(P5, P4, P4)                        \
	ZHADD(P7, P6, P6)                        \
	ZHADD(P2, P0, P0)                        \
	ZHADD(P6, P4, P4)                        \
	VSHUFF32X4 $0x88, P4, P0, Z30            \
	VSHUFF32X4 $0xdd, P4, P0, Z31            \
	VADDPS     Z31, Z30, P0                  \
	VSHUFF32X4 $0xd8, P0, P0, P0             \
	CMPL beta+64(FP), $0                     \
	JEQ  PUT                                 \
	VMOVUPS      (SI), Y28                   \
	VINSERTF32X8 $1, (SI)(DX*1), Z28, Z28    \
	VBROADCASTSS beta+64(FP), Z29            \
	VFMADD231PS  Z28, Z29, P0                \
PUT:                                         \
	VMOVUPS       LO, (SI)                   \
	VEXTRACTF32X8 $1, P0, (SI)(DX*1)

// func gemmNT6x8Z(panels, k8 int, a *float32, lda int, w *float32, ldw int, c *float32, ldc int, beta float32, pairs int)
//
// gemmNT3x8Y for 2·pairs rows of A (pairs 1, 2 or 3) with 512-bit
// operations: two A rows to a register (a chunk of row 2p in the lower
// half, of row 2p+1 in the upper), each W row's chunk broadcast to both
// halves and multiplied by every pair, so a W chunk is loaded once for up
// to six rows and every multiply-add does sixteen lanes. Lane l of each
// half sums its A row's columns p ≡ l (mod 8) in increasing p, as every
// GemmNT kernel does; a pair's halves are then summed as REDUCE8 sums
// one row, both rows at once (Z6PAIR), and every element has
// gemmNT3x8Y's bits. For CPUs that run 512-bit operations whole (Zen 4
// splits them; see wide512).
//
// Registers: Z0..Z7 the sums of A rows 0-1 against the panel's W rows
// 0..7, Z8..Z15 of rows 2-3, Z16..Z23 of rows 4-5; Z24..Z26 the A pairs,
// Z27 a W chunk. SI and R9 A rows 0 and 3, R15 lda bytes; AX, R8, BX W
// rows 0, 2 and 3, R14 ldw bytes; CX the chunks left; R13 the panels
// left; R10 the panel's first W row, R12 eight W rows in bytes; R11 A;
// DI C's first row at the panel, DX ldc bytes. At a panel's end SI walks
// C's rows, a pair at a time; Z28..Z31 are Z6PAIR's.
TEXT ·gemmNT6x8Z(SB), NOSPLIT, $0-80
	MOVQ panels+0(FP), R13
	MOVQ a+16(FP), R11
	MOVQ lda+24(FP), R15
	SHLQ $2, R15
	MOVQ w+32(FP), R10
	MOVQ ldw+40(FP), R14
	SHLQ $2, R14
	MOVQ R14, R12
	SHLQ $3, R12
	MOVQ c+48(FP), DI
	MOVQ ldc+56(FP), DX
	SHLQ $2, DX

z6panel:
	TESTQ R13, R13
	JZ    z6done
	ZEROZ8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	ZEROZ8(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15)
	ZEROZ8(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23)
	MOVQ R11, SI
	LEAQ (R11)(R15*2), R9
	ADDQ R15, R9
	MOVQ R10, AX
	LEAQ (R10)(R14*2), R8
	LEAQ (R8)(R14*1), BX
	MOVQ k8+8(FP), CX
	CMPQ pairs+72(FP), $2
	JLT  z2loop
	JEQ  z4loop

z6loop:
	ZAPAIR((SI), (SI)(R15*1), Y24, Z24)
	ZAPAIR((SI)(R15*2), (R9), Y25, Z25)
	ZAPAIR((R9)(R15*1), (R9)(R15*2), Y26, Z26)
	Z6W((AX), Z0, Z8, Z16)
	Z6W((AX)(R14*1), Z1, Z9, Z17)
	Z6W((R8), Z2, Z10, Z18)
	Z6W((BX), Z3, Z11, Z19)
	Z6W((AX)(R14*4), Z4, Z12, Z20)
	Z6W((BX)(R14*2), Z5, Z13, Z21)
	Z6W((R8)(R14*4), Z6, Z14, Z22)
	Z6W((BX)(R14*4), Z7, Z15, Z23)
	Z6NEXT
	ADDQ $32, R9
	DECQ CX
	JNZ  z6loop
	JMP  z6sums

	// Two pairs: rows 0-3.
z4loop:
	ZAPAIR((SI), (SI)(R15*1), Y24, Z24)
	ZAPAIR((SI)(R15*2), (R9), Y25, Z25)
	Z4W((AX), Z0, Z8)
	Z4W((AX)(R14*1), Z1, Z9)
	Z4W((R8), Z2, Z10)
	Z4W((BX), Z3, Z11)
	Z4W((AX)(R14*4), Z4, Z12)
	Z4W((BX)(R14*2), Z5, Z13)
	Z4W((R8)(R14*4), Z6, Z14)
	Z4W((BX)(R14*4), Z7, Z15)
	Z6NEXT
	ADDQ $32, R9
	DECQ CX
	JNZ  z4loop
	JMP  z6sums

	// One pair: rows 0-1.
z2loop:
	ZAPAIR((SI), (SI)(R15*1), Y24, Z24)
	Z2W((AX), Z0)
	Z2W((AX)(R14*1), Z1)
	Z2W((R8), Z2)
	Z2W((BX), Z3)
	Z2W((AX)(R14*4), Z4)
	Z2W((BX)(R14*2), Z5)
	Z2W((R8)(R14*4), Z6)
	Z2W((BX)(R14*4), Z7)
	Z6NEXT
	DECQ CX
	JNZ  z2loop

z6sums:
	MOVQ DI, SI
	Z6PAIR(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Y0, z6put0)
	CMPQ pairs+72(FP), $2
	JLT  z6next
	LEAQ (SI)(DX*2), SI
	Z6PAIR(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15, Y8, z6put1)
	CMPQ pairs+72(FP), $3
	JLT  z6next
	LEAQ (SI)(DX*2), SI
	Z6PAIR(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Y16, z6put2)

z6next:
	ADDQ $32, DI
	ADDQ R12, R10
	DECQ R13
	JMP  z6panel

z6done:
	VZEROUPPER
	RET
