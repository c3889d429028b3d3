// Macros shared by the amd64 kernels.

// ZERO8 clears Y0..Y7.
#define ZERO8 \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7

// ZEROZ8 zeroes eight 512-bit registers.
#define ZEROZ8(R0, R1, R2, R3, R4, R5, R6, R7) \
	VPXORD R0, R0, R0 \
	VPXORD R1, R1, R1 \
	VPXORD R2, R2, R2 \
	VPXORD R3, R3, R3 \
	VPXORD R4, R4, R4 \
	VPXORD R5, R5, R5 \
	VPXORD R6, R6, R6 \
	VPXORD R7, R7, R7

// FMA18 accumulates the A chunk in Y8 times the eight W rows at OFF(ptr)(DX),
// the rows in AX, BX, R8..R13, into Y0..Y7.
#define FMA18(OFF) \
	VFMADD231PS OFF(AX)(DX*1), Y8, Y0  \
	VFMADD231PS OFF(BX)(DX*1), Y8, Y1  \
	VFMADD231PS OFF(R8)(DX*1), Y8, Y2  \
	VFMADD231PS OFF(R9)(DX*1), Y8, Y3  \
	VFMADD231PS OFF(R10)(DX*1), Y8, Y4 \
	VFMADD231PS OFF(R11)(DX*1), Y8, Y5 \
	VFMADD231PS OFF(R12)(DX*1), Y8, Y6 \
	VFMADD231PS OFF(R13)(DX*1), Y8, Y7

// REDUCE8 sums the eight lanes of each of Y0..Y7 and leaves the sums in
// Y0, lane i holding Yi's: ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)), the
// order every GemmNT kernel (and gemmNTGo) uses. Clobbers Y1..Y7.
#define REDUCE8 \
	VHADDPS Y1, Y0, Y0             \
	VHADDPS Y3, Y2, Y2             \
	VHADDPS Y5, Y4, Y4             \
	VHADDPS Y7, Y6, Y6             \
	VHADDPS Y2, Y0, Y0             \
	VHADDPS Y6, Y4, Y4             \
	VPERM2F128 $0x20, Y4, Y0, Y1   \
	VPERM2F128 $0x31, Y4, Y0, Y2   \
	VADDPS Y2, Y1, Y0

// REDUCE4 sums each of A, B, C, D (eight lanes each) and leaves the four
// sums in the low four lanes of A's X register: [ΣA, ΣB, ΣC, ΣD]. The
// upper half of A's Y register is garbage afterwards; C is clobbered.
#define REDUCE4(A, B, C, D, XA, XC) \
	VHADDPS B, A, A            \
	VHADDPS D, C, C            \
	VHADDPS C, A, A            \
	VEXTRACTF128 $1, A, XC     \
	VADDPS XC, XA, XA

// REDUCE1 sums the eight lanes of A into lane 0 of XA; clobbers XT.
#define REDUCE1(A, XA, XT) \
	VEXTRACTF128 $1, A, XT     \
	VADDPS XT, XA, XA          \
	VHADDPS XA, XA, XA         \
	VHADDPS XA, XA, XA

// LANEMASK sets V (an X or Y register, with X its low half) to the mask of
// its first R lanes (0 <= R; 8 or more sets all), the mask VMASKMOVPS
// needs for a row's last k%8 columns or a panel's missing rows.
#define LANEMASK(R, X, V) \
	VMOVQ R, X                   \
	VPBROADCASTD X, V            \
	VPCMPGTD ·laneIota(SB), V, V

// NEXTROW sets D to the row after P (P + R14), or to P itself when the
// row does not exist (CX, the rows left, is at most S).
#define NEXTROW(P, D, S) \
	LEAQ (P)(R14*1), D \
	CMPQ CX, $S        \
	CMOVQLE P, D

// The stores that end a panel, shared by the float32 and bf16 kernels
// (labels are local to each TEXT block, so each kernel may expand one of
// these once). They take the eight sums in Y0 (REDUCE8's order), CX the
// W rows left (a short last panel stores only those), R14 the W row
// stride in bytes and AX the panel's first W row, and jump to NEXT for
// the next panel or fall through after a short last one. BETA is the
// beta argument; zero means C is not read.

// STORE18 stores one row of eight sums at DI. Clobbers Y8, Y9, Y15, DX.
#define STORE18(BETA, NEXT) \
	MOVL BETA, DX                 \
	CMPQ CX, $8                   \
	JLT  s18part                  \
	TESTL DX, DX                  \
	JZ    s18put                  \
	VBROADCASTSS BETA, Y15        \
	VFMADD231PS (DI), Y15, Y0     \
s18put:                           \
	VMOVUPS Y0, (DI)              \
	ADDQ $32, DI                  \
	LEAQ (AX)(R14*8), AX          \
	SUBQ $8, CX                   \
	JMP  NEXT                     \
s18part:                          \
	LANEMASK(CX, X15, Y15)        \
	TESTL DX, DX                  \
	JZ    s18mput                 \
	VMASKMOVPS (DI), Y15, Y9      \
	VBROADCASTSS BETA, Y8         \
	VFMADD231PS Y9, Y8, Y0        \
s18mput:                          \
	VMASKMOVPS Y0, Y15, (DI)

// STORE24 stores two rows of four sums at R10 and R10+R11. Clobbers X1,
// X2, X13, X15, DX.
#define STORE24(BETA, NEXT) \
	VEXTRACTF128 $1, Y0, X1            \
	MOVL BETA, DX                      \
	CMPQ CX, $4                        \
	JLT  s24part                       \
	TESTL DX, DX                       \
	JZ    s24put                       \
	VBROADCASTSS BETA, X15             \
	VFMADD231PS (R10), X15, X0         \
	VFMADD231PS (R10)(R11*1), X15, X1  \
s24put:                                \
	VMOVUPS X0, (R10)                  \
	VMOVUPS X1, (R10)(R11*1)           \
	ADDQ $16, R10                      \
	LEAQ (AX)(R14*4), AX               \
	SUBQ $4, CX                        \
	JMP  NEXT                          \
s24part:                               \
	LANEMASK(CX, X13, X13)             \
	TESTL DX, DX                       \
	JZ    s24mput                      \
	VBROADCASTSS BETA, X15             \
	VMASKMOVPS (R10), X13, X2          \
	VFMADD231PS X2, X15, X0            \
	VMASKMOVPS (R10)(R11*1), X13, X2   \
	VFMADD231PS X2, X15, X1            \
s24mput:                               \
	VMASKMOVPS X0, X13, (R10)          \
	VMASKMOVPS X1, X13, (R10)(R11*1)

// NEXT7ROWS points BX, R8..R13 at the seven W rows after AX, R14 bytes
// apart.
#define NEXT7ROWS \
	LEAQ (AX)(R14*1), BX  \
	LEAQ (AX)(R14*2), R8  \
	LEAQ (BX)(R14*2), R9  \
	LEAQ (AX)(R14*4), R10 \
	LEAQ (BX)(R14*4), R11 \
	LEAQ (R8)(R14*4), R12 \
	LEAQ (R9)(R14*4), R13

// ROWS8 points BX, R8..R13 at the seven W rows after AX (R14 bytes apart)
// for a panel of eight, repeating the last row where fewer than eight
// are left (CX), and jumps to DONE when none are; ROWS4 does the same
// for BX, R8, R9 and a panel of four. Both continue at GO.
#define ROWS8(GO, DONE) \
	CMPQ CX, $8               \
	JLT  rows8part            \
	NEXT7ROWS                 \
	JMP  GO                   \
rows8part:                    \
	TESTQ CX, CX              \
	JLE   DONE                \
	NEXTROW(AX, BX, 1)        \
	NEXTROW(BX, R8, 2)        \
	NEXTROW(R8, R9, 3)        \
	NEXTROW(R9, R10, 4)       \
	NEXTROW(R10, R11, 5)      \
	NEXTROW(R11, R12, 6)      \
	NEXTROW(R12, R13, 7)

#define ROWS4(GO, DONE) \
	CMPQ CX, $4               \
	JLT  rows4part            \
	LEAQ (AX)(R14*1), BX      \
	LEAQ (AX)(R14*2), R8      \
	LEAQ (BX)(R14*2), R9      \
	JMP  GO                   \
rows4part:                    \
	TESTQ CX, CX              \
	JLE   DONE                \
	NEXTROW(AX, BX, 1)        \
	NEXTROW(BX, R8, 2)        \
	NEXTROW(R8, R9, 3)
