//go:build !purego

#include "textflag.h"
#include "macros_amd64.h"

// The int8 kernels (int8.go has the layout and the arithmetic). Every
// kernel takes whole panels of sixteen rows and rows of quads (four
// bytes); the Go side hands the last partial panel over through a
// sixteen-column scratch C.
//
// AVX-512 VNNI: a quad of A (A7+64, unsigned) is broadcast to all
// sixteen lanes and VPDPBUSD adds it times a panel's 64-byte quad, lane
// r summing row r. The epilogue subtracts the panel's 64·Σ W8, converts
// to float32 and scales. C is read through a mask that is empty when
// beta == 0, so C is then never read.
//
// AVX2: the same panels as two halves of eight rows. VPMADDUBSW takes
// the broadcast quad of A as its unsigned bytes (at most 127, so a pair
// of products never saturates its int16) and W's as the signed ones;
// VPMADDWD by ones adds the int16 pairs into int32; the epilogue is
// VNNI's.

// VNNI epilogue of one accumulator: panel sums at (P)(R8*1), scales at
// 64(P)(R8*1); Z24 holds s[i], Z29 beta, K7 is all lanes when beta != 0
// and none otherwise. C goes to OFF(DX).
#define VEPI(ACC, P, OFF) \
	VPSUBD (P)(R8*1), ACC, ACC        \
	VCVTDQ2PS ACC, ACC                \
	VMULPS 64(P)(R8*1), Z24, Z25      \
	VMULPS Z25, ACC, ACC              \
	VMOVUPS.Z OFF(DX), K7, Z26        \
	VMULPS Z26, Z29, Z26              \
	VADDPS Z26, ACC, ACC              \
	VMOVUPS ACC, OFF(DX)

// BETAMASK sets K7 to every lane when the float32 at MEM is not zero.
#define BETAMASK(MEM) \
	KXORW K7, K7, K7                  \
	MOVL MEM, AX                      \
	TESTL AX, AX                      \
	JZ 2(PC)                          \
	KXNORW K7, K7, K7

// ROWPTRS points BX, CX and R13 at the second, third and fourth of AX
// rows (1..4) of A, DX bytes apart from SI's; a row past AX is the last
// real one (the tiles compute it again and do not store it).
#define ROWPTRS \
	MOVQ SI, BX                       \
	CMPQ AX, $2                       \
	JLT 2(PC)                         \
	ADDQ DX, BX                       \
	MOVQ BX, CX                       \
	CMPQ AX, $3                       \
	JLT 2(PC)                         \
	ADDQ DX, CX                       \
	MOVQ CX, R13                      \
	CMPQ AX, $4                       \
	JLT 2(PC)                         \
	ADDQ DX, R13

// func i8GemvVNNI(groups, quads int, q *uint8, s float32, p *uint8, c *float32, beta float32)
//
// One row of A (quads quads at q, scale s) times groups groups of four
// panels (quads·64+128 bytes each) from p, into c[0, 64·groups).
// Four panels at a time, each quad's sums split in two (even and odd
// quads) for eight independent accumulators.
TEXT ·i8GemvVNNI(SB), NOSPLIT, $0-52
	BETAMASK(beta+48(FP))
	MOVQ groups+0(FP), CX
	MOVQ quads+8(FP), R8
	MOVQ q+16(FP), SI
	VBROADCASTSS s+24(FP), Z24
	MOVQ p+32(FP), DI
	MOVQ c+40(FP), DX
	VBROADCASTSS beta+48(FP), Z29
	SHLQ $6, R8                       // R8: a panel's weight bytes
	LEAQ 128(R8), R12                 // R12: panel stride
	LEAQ -64(R8), BX                  // two quads fit while AX < BX

gv_group:
	TESTQ CX, CX
	JZ gv_done
	LEAQ (DI)(R12*1), R9
	LEAQ (R9)(R12*1), R10
	LEAQ (R10)(R12*1), R11
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	XORQ AX, AX
	MOVQ SI, R13

gv_two:
	CMPQ AX, BX
	JGE gv_one
	VPBROADCASTD (R13), Z16
	VPBROADCASTD 4(R13), Z17
	VPDPBUSD (DI)(AX*1), Z16, Z0
	VPDPBUSD (R9)(AX*1), Z16, Z1
	VPDPBUSD (R10)(AX*1), Z16, Z2
	VPDPBUSD (R11)(AX*1), Z16, Z3
	VPDPBUSD 64(DI)(AX*1), Z17, Z4
	VPDPBUSD 64(R9)(AX*1), Z17, Z5
	VPDPBUSD 64(R10)(AX*1), Z17, Z6
	VPDPBUSD 64(R11)(AX*1), Z17, Z7
	ADDQ $8, R13
	SUBQ $-128, AX
	JMP gv_two

gv_one:
	CMPQ AX, R8
	JGE gv_epi
	VPBROADCASTD (R13), Z16
	VPDPBUSD (DI)(AX*1), Z16, Z0
	VPDPBUSD (R9)(AX*1), Z16, Z1
	VPDPBUSD (R10)(AX*1), Z16, Z2
	VPDPBUSD (R11)(AX*1), Z16, Z3

gv_epi:
	VPADDD Z4, Z0, Z0
	VPADDD Z5, Z1, Z1
	VPADDD Z6, Z2, Z2
	VPADDD Z7, Z3, Z3
	VEPI(Z0, DI, 0)
	VEPI(Z1, R9, 64)
	VEPI(Z2, R10, 128)
	VEPI(Z3, R11, 192)
	ADDQ $256, DX
	LEAQ (R11)(R12*1), DI
	DECQ CX
	JMP gv_group

gv_done:
	VZEROUPPER
	RET

// func i8TileVNNI(np, rows, quads int, q *uint8, ldq int, s *float32, p *uint8, c *float32, ldc int, beta float32)
//
// rows (1..4) rows of A (ldq bytes apart) times np (1..4) consecutive
// panels from p, into C (ldc floats apart, 16 columns a panel): sixteen
// accumulators, row r and panel j in Z(4r+j). Rows and panels past rows
// and np read the last real ones and are not stored.
TEXT ·i8TileVNNI(SB), NOSPLIT, $0-76
	BETAMASK(beta+72(FP))
	MOVQ quads+16(FP), R8
	SHLQ $6, R8                       // R8: a panel's weight bytes
	LEAQ 128(R8), R12                 // R12: panel stride
	MOVQ np+0(FP), AX
	MOVQ p+48(FP), DI
	MOVQ DI, R9
	CMPQ AX, $2
	JLT 2(PC)
	ADDQ R12, R9
	MOVQ R9, R10
	CMPQ AX, $3
	JLT 2(PC)
	ADDQ R12, R10
	MOVQ R10, R11
	CMPQ AX, $4
	JLT 2(PC)
	ADDQ R12, R11

	MOVQ rows+8(FP), AX
	MOVQ ldq+32(FP), DX
	MOVQ q+24(FP), SI
	ROWPTRS

	ZEROZ8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	ZEROZ8(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15)
	XORQ AX, AX                       // byte offset in the panels
	XORQ DX, DX                       // byte offset in the rows of A

tv_loop:
	VMOVDQU32 (DI)(AX*1), Z16
	VMOVDQU32 (R9)(AX*1), Z17
	VMOVDQU32 (R10)(AX*1), Z18
	VMOVDQU32 (R11)(AX*1), Z19
	VPBROADCASTD (SI)(DX*1), Z20
	VPBROADCASTD (BX)(DX*1), Z21
	VPBROADCASTD (CX)(DX*1), Z22
	VPBROADCASTD (R13)(DX*1), Z23
	VPDPBUSD Z16, Z20, Z0
	VPDPBUSD Z17, Z20, Z1
	VPDPBUSD Z18, Z20, Z2
	VPDPBUSD Z19, Z20, Z3
	VPDPBUSD Z16, Z21, Z4
	VPDPBUSD Z17, Z21, Z5
	VPDPBUSD Z18, Z21, Z6
	VPDPBUSD Z19, Z21, Z7
	VPDPBUSD Z16, Z22, Z8
	VPDPBUSD Z17, Z22, Z9
	VPDPBUSD Z18, Z22, Z10
	VPDPBUSD Z19, Z22, Z11
	VPDPBUSD Z16, Z23, Z12
	VPDPBUSD Z17, Z23, Z13
	VPDPBUSD Z18, Z23, Z14
	VPDPBUSD Z19, Z23, Z15
	ADDQ $64, AX
	ADDQ $4, DX
	CMPQ AX, R8
	JLT tv_loop

	VBROADCASTSS beta+72(FP), Z29
	MOVQ s+40(FP), SI
	MOVQ c+56(FP), DX
	MOVQ ldc+64(FP), BX
	SHLQ $2, BX                       // BX: C's row stride in bytes
	MOVQ np+0(FP), CX
	MOVQ rows+8(FP), R13

	VBROADCASTSS 0(SI), Z24
	VEPI(Z0, DI, 0)
	CMPQ CX, $2
	JLT tv_r1
	VEPI(Z1, R9, 64)
	CMPQ CX, $3
	JLT tv_r1
	VEPI(Z2, R10, 128)
	CMPQ CX, $4
	JLT tv_r1
	VEPI(Z3, R11, 192)
tv_r1:
	CMPQ R13, $2
	JLT tv_done
	ADDQ BX, DX
	VBROADCASTSS 4(SI), Z24
	VEPI(Z4, DI, 0)
	CMPQ CX, $2
	JLT tv_r2
	VEPI(Z5, R9, 64)
	CMPQ CX, $3
	JLT tv_r2
	VEPI(Z6, R10, 128)
	CMPQ CX, $4
	JLT tv_r2
	VEPI(Z7, R11, 192)
tv_r2:
	CMPQ R13, $3
	JLT tv_done
	ADDQ BX, DX
	VBROADCASTSS 8(SI), Z24
	VEPI(Z8, DI, 0)
	CMPQ CX, $2
	JLT tv_r3
	VEPI(Z9, R9, 64)
	CMPQ CX, $3
	JLT tv_r3
	VEPI(Z10, R10, 128)
	CMPQ CX, $4
	JLT tv_r3
	VEPI(Z11, R11, 192)
tv_r3:
	CMPQ R13, $4
	JLT tv_done
	ADDQ BX, DX
	VBROADCASTSS 12(SI), Z24
	VEPI(Z12, DI, 0)
	CMPQ CX, $2
	JLT tv_done
	VEPI(Z13, R9, 64)
	CMPQ CX, $3
	JLT tv_done
	VEPI(Z14, R10, 128)
	CMPQ CX, $4
	JLT tv_done
	VEPI(Z15, R11, 192)
tv_done:
	VZEROUPPER
	RET

// AVX2ONES sets Y14 to int16 ones.
#define AVX2ONES \
	MOVL $0x00010001, AX              \
	VMOVD AX, X14                     \
	VPBROADCASTD X14, Y14

// DOT adds the unsigned quad broadcast in A times the 32 signed bytes W
// (a register or memory) to the eight int32 sums in ACC; clobbers T.
#define DOT(W, A, T, ACC) \
	VPMADDUBSW W, A, T                \
	VPMADDWD Y14, T, T                \
	VPADDD T, ACC, ACC

// AVX2 epilogue of eight rows: sums in ACC, their 64·Σ W8 at SUMS and
// scales at SC, Y12 holds s[i] broadcast, Y13 beta, Y11 all ones when
// beta != 0 (C is read through it) and zero otherwise. C goes to
// OFF(DX). Clobbers Y8, Y9.
#define AEPI(ACC, SUMS, SC, OFF) \
	VPSUBD SUMS, ACC, ACC             \
	VCVTDQ2PS ACC, ACC                \
	VMULPS SC, Y12, Y8                \
	VMULPS Y8, ACC, ACC               \
	VMASKMOVPS OFF(DX), Y11, Y9       \
	VMULPS Y9, Y13, Y9                \
	VADDPS Y9, ACC, ACC               \
	VMOVUPS ACC, OFF(DX)

// APANEL is AEPI for both halves of the panel at P, into OFF(DX).
#define APANEL(A, B, P, OFF) \
	AEPI(A, (P)(R8*1), 64(P)(R8*1), OFF) \
	AEPI(B, 32(P)(R8*1), 96(P)(R8*1), OFF+32)

// ABETA sets Y11 to all ones when the float32 at MEM is not zero and
// loads it into Y13.
#define ABETA(MEM) \
	VXORPS Y11, Y11, Y11              \
	VBROADCASTSS MEM, Y13             \
	VCMPPS $4, Y11, Y13, Y11

// func i8GemvAVX2(groups, quads int, q *uint8, s float32, p *uint8, c *float32, beta float32)
//
// One row of A times groups groups of four panels, into c[0, 64·groups):
// each quad of A is broadcast once for the eight halves (Y0..Y7), whose
// weights VPMADDUBSW reads from memory.
TEXT ·i8GemvAVX2(SB), NOSPLIT, $0-52
	AVX2ONES
	MOVQ groups+0(FP), CX
	MOVQ quads+8(FP), R8
	MOVQ q+16(FP), SI
	MOVQ p+32(FP), DI
	MOVQ c+40(FP), DX
	SHLQ $6, R8                       // R8: a panel's weight bytes
	LEAQ 128(R8), R12                 // R12: panel stride

ag_group:
	TESTQ CX, CX
	JZ ag_done
	LEAQ (DI)(R12*1), R9
	LEAQ (R9)(R12*1), R10
	LEAQ (R10)(R12*1), R11
	ZERO8
	XORQ AX, AX
	MOVQ SI, R13

ag_quad:
	VPBROADCASTD (R13), Y10
	DOT((DI)(AX*1), Y10, Y12, Y0)
	DOT(32(DI)(AX*1), Y10, Y13, Y1)
	DOT((R9)(AX*1), Y10, Y12, Y2)
	DOT(32(R9)(AX*1), Y10, Y13, Y3)
	DOT((R10)(AX*1), Y10, Y12, Y4)
	DOT(32(R10)(AX*1), Y10, Y13, Y5)
	DOT((R11)(AX*1), Y10, Y12, Y6)
	DOT(32(R11)(AX*1), Y10, Y13, Y7)
	ADDQ $4, R13
	ADDQ $64, AX
	CMPQ AX, R8
	JLT ag_quad

	ABETA(beta+48(FP))
	VBROADCASTSS s+24(FP), Y12
	APANEL(Y0, Y1, DI, 0)
	APANEL(Y2, Y3, R9, 64)
	APANEL(Y4, Y5, R10, 128)
	APANEL(Y6, Y7, R11, 192)
	ADDQ $256, DX
	LEAQ (R11)(R12*1), DI
	DECQ CX
	JMP ag_group

ag_done:
	VZEROUPPER
	RET

// TROW adds a quad of the row at ROW times the panel's halves in Y8, Y9
// to the row's sums A, B (i8TileAVX2).
#define TROW(ROW, A, B) \
	VPBROADCASTD (ROW)(DX*1), Y10     \
	DOT(Y8, Y10, Y12, A)              \
	DOT(Y9, Y10, Y13, B)

// TROWS3 is TROW for the first three rows.
#define TROWS3 \
	TROW(SI, Y0, Y1)                  \
	TROW(BX, Y2, Y3)                  \
	TROW(CX, Y4, Y5)

// TQUAD loads the panel's quad at AX into Y8, Y9.
#define TQUAD \
	VMOVDQU (DI)(AX*1), Y8            \
	VMOVDQU 32(DI)(AX*1), Y9

// TNEXT moves to the next quad and compares with the panel's end.
#define TNEXT \
	ADDQ $64, AX                      \
	ADDQ $4, DX                       \
	CMPQ AX, R8

// TEPI writes a row's sums A, B (its scale at SOFF(AX)) to C at DX.
#define TEPI(SOFF, A, B) \
	VBROADCASTSS SOFF(AX), Y12        \
	APANEL(A, B, DI, 0)

// func i8TileAVX2(np, rows, quads int, q *uint8, ldq int, s *float32, p *uint8, c *float32, ldc int, beta float32)
//
// rows (1..4) rows of A (ldq bytes apart) times np consecutive panels,
// into C (ldc floats apart; panel j's sixteen columns from 16j), a panel
// at a time: row r's halves in Y(2r), Y(2r+1), each quad of the panel
// loaded once for every row. Each row count has its own loop, so no work
// is done for rows that are not there.
TEXT ·i8TileAVX2(SB), NOSPLIT, $0-76
	AVX2ONES
	MOVQ quads+16(FP), R8
	SHLQ $6, R8                       // R8: a panel's weight bytes
	LEAQ 128(R8), R12                 // R12: panel stride
	MOVQ rows+8(FP), AX
	MOVQ ldq+32(FP), DX
	MOVQ q+24(FP), SI
	ROWPTRS
	MOVQ p+48(FP), DI
	MOVQ c+56(FP), R9
	MOVQ ldc+64(FP), R14
	SHLQ $2, R14                      // R14: C's row stride in bytes
	MOVQ np+0(FP), R11

at_panel:
	ZERO8
	XORQ AX, AX
	XORQ DX, DX
	MOVQ rows+8(FP), R10
	CMPQ R10, $4
	JEQ at_q4
	CMPQ R10, $3
	JEQ at_q3
	CMPQ R10, $2
	JEQ at_q2
at_q1:
	TQUAD
	TROW(SI, Y0, Y1)
	TNEXT
	JLT at_q1
	JMP at_epi
at_q2:
	TQUAD
	TROW(SI, Y0, Y1)
	TROW(BX, Y2, Y3)
	TNEXT
	JLT at_q2
	JMP at_epi
at_q3:
	TQUAD
	TROWS3
	TNEXT
	JLT at_q3
	JMP at_epi
at_q4:
	TQUAD
	TROWS3
	TROW(R13, Y6, Y7)
	TNEXT
	JLT at_q4

at_epi:
	ABETA(beta+72(FP))
	MOVQ s+40(FP), AX
	MOVQ R9, DX
	TEPI(0, Y0, Y1)
	CMPQ R10, $2
	JLT at_next
	ADDQ R14, DX
	TEPI(4, Y2, Y3)
	CMPQ R10, $3
	JLT at_next
	ADDQ R14, DX
	TEPI(8, Y4, Y5)
	CMPQ R10, $4
	JLT at_next
	ADDQ R14, DX
	TEPI(12, Y6, Y7)
at_next:
	ADDQ R12, DI
	ADDQ $64, R9
	DECQ R11
	JNZ at_panel
	VZEROUPPER
	RET

// func absMaxAVX2(n int, x *float32) float32
//
// max |x[i]| over n (a multiple of 32) values.
TEXT ·absMaxAVX2(SB), NOSPLIT, $0-20
	MOVQ n+0(FP), CX
	MOVQ x+8(FP), SI
	MOVL $0x7fffffff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
am_loop:
	VANDPS (SI), Y15, Y4
	VANDPS 32(SI), Y15, Y5
	VANDPS 64(SI), Y15, Y6
	VANDPS 96(SI), Y15, Y7
	VMAXPS Y4, Y0, Y0
	VMAXPS Y5, Y1, Y1
	VMAXPS Y6, Y2, Y2
	VMAXPS Y7, Y3, Y3
	SUBQ $-128, SI
	SUBQ $32, CX
	JNZ am_loop
	VMAXPS Y1, Y0, Y0
	VMAXPS Y3, Y2, Y2
	VMAXPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4E, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xB1, X0, X1
	VMAXPS X1, X0, X0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func quantizeAVX2(n int, x *float32, inv float32, q *uint8)
//
// q[i] = 64 + clamp(roundEven(x[i]·inv), -63, 63) for n (a multiple of
// 32) values: VCVTPS2DQ rounds to nearest even, the packs saturate and
// keep the values in order after VPERMD, VPMAXSB and VPMINSB clamp.
TEXT ·quantizeAVX2(SB), NOSPLIT, $0-32
	MOVQ n+0(FP), CX
	MOVQ x+8(FP), SI
	VBROADCASTSS inv+16(FP), Y15
	MOVQ q+24(FP), DI
	MOVL $0xc1c1c1c1, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14             // -63 in every byte
	MOVL $0x3f3f3f3f, AX
	VMOVD AX, X9
	VPBROADCASTD X9, Y9               // 63
	MOVL $0x40404040, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13             // 64
	// VPERMD order: dwords 0,4,1,5,2,6,3,7
	MOVQ $0x0000000400000000, AX
	VMOVQ AX, X12
	MOVQ $0x0000000500000001, AX
	VMOVQ AX, X11
	VPUNPCKLQDQ X11, X12, X12
	MOVQ $0x0000000600000002, AX
	VMOVQ AX, X11
	MOVQ $0x0000000700000003, AX
	VMOVQ AX, X10
	VPUNPCKLQDQ X10, X11, X11
	VINSERTI128 $1, X11, Y12, Y12
qz_loop:
	VMULPS (SI), Y15, Y0
	VMULPS 32(SI), Y15, Y1
	VMULPS 64(SI), Y15, Y2
	VMULPS 96(SI), Y15, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y12, Y0
	VPMAXSB Y14, Y0, Y0
	VPMINSB Y9, Y0, Y0
	VPADDB Y13, Y0, Y0
	VMOVDQU Y0, (DI)
	SUBQ $-128, SI
	ADDQ $32, DI
	SUBQ $32, CX
	JNZ qz_loop
	VZEROUPPER
	RET
