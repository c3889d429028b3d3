// Horizontal sums shared by the amd64 kernels.

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
