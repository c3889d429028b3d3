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
