//go:build !purego

#include "textflag.h"
#include "macros_amd64.h"

// The gate kernels for sixteen units at a time (AVX-512), computing every
// unit as gates_amd64.s's eight-lane kernels do, operation for operation,
// so the two paths agree bit for bit. The constants are single float32
// values (bit patterns of approx.go's), broadcast from memory.

// log2e: log2(e)
DATA zlog2e<>+0(SB)/4, $0x3fb8aa3b
GLOBL zlog2e<>(SB), RODATA|NOPTR, $4

// ln2hi: ln 2, high part
DATA zln2hi<>+0(SB)/4, $0x3f318000
GLOBL zln2hi<>(SB), RODATA|NOPTR, $4

// ln2lo: ln 2 - ln2hi
DATA zln2lo<>+0(SB)/4, $0xb95e8083
GLOBL zln2lo<>(SB), RODATA|NOPTR, $4

// exphi: 88
DATA zexphi<>+0(SB)/4, $0x42b00000
GLOBL zexphi<>(SB), RODATA|NOPTR, $4

// explo: -87
DATA zexplo<>+0(SB)/4, $0xc2ae0000
GLOBL zexplo<>(SB), RODATA|NOPTR, $4

// c2: 1/2!
DATA zc2<>+0(SB)/4, $0x3f000000
GLOBL zc2<>(SB), RODATA|NOPTR, $4

// c3: 1/3!
DATA zc3<>+0(SB)/4, $0x3e2aaaab
GLOBL zc3<>(SB), RODATA|NOPTR, $4

// c4: 1/4!
DATA zc4<>+0(SB)/4, $0x3d2aaaab
GLOBL zc4<>(SB), RODATA|NOPTR, $4

// c5: 1/5!
DATA zc5<>+0(SB)/4, $0x3c088889
GLOBL zc5<>(SB), RODATA|NOPTR, $4

// c6: 1/6!
DATA zc6<>+0(SB)/4, $0x3ab60b61
GLOBL zc6<>(SB), RODATA|NOPTR, $4

// c7: 1/7!
DATA zc7<>+0(SB)/4, $0x39500d01
GLOBL zc7<>(SB), RODATA|NOPTR, $4

// one: 1
DATA zone<>+0(SB)/4, $0x3f800000
GLOBL zone<>(SB), RODATA|NOPTR, $4

// two: 2
DATA ztwo<>+0(SB)/4, $0x40000000
GLOBL ztwo<>(SB), RODATA|NOPTR, $4

// tthr: 0.625
DATA ztthr<>+0(SB)/4, $0x3f200000
GLOBL ztthr<>(SB), RODATA|NOPTR, $4

// t1: tanh's polynomial
DATA zt1<>+0(SB)/4, $0xbeaaaa99
GLOBL zt1<>(SB), RODATA|NOPTR, $4

DATA zt2<>+0(SB)/4, $0x3e08836b
GLOBL zt2<>(SB), RODATA|NOPTR, $4

DATA zt3<>+0(SB)/4, $0xbd5c19a6
GLOBL zt3<>(SB), RODATA|NOPTR, $4

DATA zt4<>+0(SB)/4, $0x3ca8f8f1
GLOBL zt4<>(SB), RODATA|NOPTR, $4

DATA zt5<>+0(SB)/4, $0xbbba85c2
GLOBL zt5<>(SB), RODATA|NOPTR, $4

// abs: clears the sign bit
DATA zabs<>+0(SB)/4, $0x7fffffff
GLOBL zabs<>(SB), RODATA|NOPTR, $4

// sign: the sign bit
DATA zsign<>+0(SB)/4, $0x80000000
GLOBL zsign<>(SB), RODATA|NOPTR, $4

// bias127: float32 exponent bias, as int32
DATA zbias127<>+0(SB)/4, $0x0000007f
GLOBL zbias127<>(SB), RODATA|NOPTR, $4

// ZEXP sets X to exp(X) in every lane (approx.go: expf, gates_amd64.s:
// EXPPS); clobbers T and U.
#define ZEXP(X, T, U) \
	VMAXPS.BCST zexplo<>(SB), X, X       \
	VMINPS.BCST zexphi<>(SB), X, X       \
	VMULPS.BCST zlog2e<>(SB), X, T       \
	VRNDSCALEPS $0, T, T                 \
	VFNMADD231PS.BCST zln2hi<>(SB), T, X \
	VFNMADD231PS.BCST zln2lo<>(SB), T, X \
	VBROADCASTSS zc7<>(SB), U            \
	VFMADD213PS.BCST zc6<>(SB), X, U     \
	VFMADD213PS.BCST zc5<>(SB), X, U     \
	VFMADD213PS.BCST zc4<>(SB), X, U     \
	VFMADD213PS.BCST zc3<>(SB), X, U     \
	VFMADD213PS.BCST zc2<>(SB), X, U     \
	VFMADD213PS.BCST zone<>(SB), X, U    \
	VFMADD213PS.BCST zone<>(SB), X, U    \
	VCVTPS2DQ T, T                       \
	VPADDD.BCST zbias127<>(SB), T, T     \
	VPSLLD $23, T, T                     \
	VMULPS T, U, X

// ZSIGMOID sets X to 1/(1+exp(-X)); clobbers T and U.
#define ZSIGMOID(X, T, U) \
	VPXORD.BCST zsign<>(SB), X, X \
	ZEXP(X, T, U)                 \
	VADDPS.BCST zone<>(SB), X, X  \
	VBROADCASTSS zone<>(SB), T    \
	VDIVPS X, T, X

// ZTANH sets X to tanh(X): for |x| >= 0.625, 1 - 2/(exp(2|x|)+1), else the
// odd polynomial; the sign is x's. Clobbers T, U, A, S and K1.
#define ZTANH(X, T, U, A, S) \
	VPANDD.BCST zabs<>(SB), X, A         \
	VPANDD.BCST zsign<>(SB), X, S        \
	VADDPS A, A, X                       \
	ZEXP(X, T, U)                        \
	VADDPS.BCST zone<>(SB), X, X         \
	VBROADCASTSS ztwo<>(SB), T           \
	VDIVPS X, T, X                       \
	VBROADCASTSS zone<>(SB), T           \
	VSUBPS X, T, X                       \
	VMULPS A, A, T                       \
	VBROADCASTSS zt5<>(SB), U            \
	VFMADD213PS.BCST zt4<>(SB), T, U     \
	VFMADD213PS.BCST zt3<>(SB), T, U     \
	VFMADD213PS.BCST zt2<>(SB), T, U     \
	VFMADD213PS.BCST zt1<>(SB), T, U     \
	VMULPS A, T, T                       \
	VFMADD213PS A, T, U                  \
	VCMPPS.BCST $1, ztthr<>(SB), A, K1   \
	VMOVAPS U, K1, X                     \
	VPORD S, X, X

// ZLSTMCELL finishes sixteen units from the pre-activations (biases
// added) i, f, g, o in Z0..Z3: c at CPTR is updated and h stored at HPTR
// (gates_amd64.s: LSTMCELL). Clobbers Z0..Z3, Z8..Z11 and K1.
#define ZLSTMCELL(CPTR, HPTR) \
	ZSIGMOID(Z0, Z8, Z9)           \
	ZSIGMOID(Z1, Z8, Z9)           \
	ZTANH(Z2, Z8, Z9, Z10, Z11)    \
	ZSIGMOID(Z3, Z8, Z9)           \
	VMULPS Z2, Z0, Z0              \
	VFMADD231PS CPTR, Z1, Z0       \
	VMOVUPS Z0, CPTR               \
	ZTANH(Z0, Z8, Z9, Z10, Z11)    \
	VMULPS Z3, Z0, Z0              \
	VMOVUPS Z0, HPTR

// ZEXP2, ZSIGMOID2 and ZTANH2 are ZEXP, ZSIGMOID and ZTANH on two sets of
// registers at once, their instructions interleaved one for one (ZTANH2's
// second set takes K2): two independent chains side by side, which the
// out-of-order core overlaps where one chain alone leaves it waiting on
// latencies. Each lane is computed as the single forms compute it.
#define ZEXP2(X, T, U, X2, T2, U2) \
	VMAXPS.BCST zexplo<>(SB), X, X          \
	VMAXPS.BCST zexplo<>(SB), X2, X2        \
	VMINPS.BCST zexphi<>(SB), X, X          \
	VMINPS.BCST zexphi<>(SB), X2, X2        \
	VMULPS.BCST zlog2e<>(SB), X, T          \
	VMULPS.BCST zlog2e<>(SB), X2, T2        \
	VRNDSCALEPS $0, T, T                    \
	VRNDSCALEPS $0, T2, T2                  \
	VFNMADD231PS.BCST zln2hi<>(SB), T, X    \
	VFNMADD231PS.BCST zln2hi<>(SB), T2, X2  \
	VFNMADD231PS.BCST zln2lo<>(SB), T, X    \
	VFNMADD231PS.BCST zln2lo<>(SB), T2, X2  \
	VBROADCASTSS zc7<>(SB), U               \
	VBROADCASTSS zc7<>(SB), U2              \
	VFMADD213PS.BCST zc6<>(SB), X, U        \
	VFMADD213PS.BCST zc6<>(SB), X2, U2      \
	VFMADD213PS.BCST zc5<>(SB), X, U        \
	VFMADD213PS.BCST zc5<>(SB), X2, U2      \
	VFMADD213PS.BCST zc4<>(SB), X, U        \
	VFMADD213PS.BCST zc4<>(SB), X2, U2      \
	VFMADD213PS.BCST zc3<>(SB), X, U        \
	VFMADD213PS.BCST zc3<>(SB), X2, U2      \
	VFMADD213PS.BCST zc2<>(SB), X, U        \
	VFMADD213PS.BCST zc2<>(SB), X2, U2      \
	VFMADD213PS.BCST zone<>(SB), X, U       \
	VFMADD213PS.BCST zone<>(SB), X2, U2     \
	VFMADD213PS.BCST zone<>(SB), X, U       \
	VFMADD213PS.BCST zone<>(SB), X2, U2     \
	VCVTPS2DQ T, T                          \
	VCVTPS2DQ T2, T2                        \
	VPADDD.BCST zbias127<>(SB), T, T        \
	VPADDD.BCST zbias127<>(SB), T2, T2      \
	VPSLLD $23, T, T                        \
	VPSLLD $23, T2, T2                      \
	VMULPS T, U, X                          \
	VMULPS T2, U2, X2

#define ZSIGMOID2(X, T, U, X2, T2, U2) \
	VPXORD.BCST zsign<>(SB), X, X    \
	VPXORD.BCST zsign<>(SB), X2, X2  \
	ZEXP2(X, T, U, X2, T2, U2)       \
	VADDPS.BCST zone<>(SB), X, X     \
	VADDPS.BCST zone<>(SB), X2, X2   \
	VBROADCASTSS zone<>(SB), T       \
	VBROADCASTSS zone<>(SB), T2      \
	VDIVPS X, T, X                   \
	VDIVPS X2, T2, X2

#define ZTANH2(X, T, U, A, S, X2, T2, U2, A2, S2) \
	VPANDD.BCST zabs<>(SB), X, A         \
	VPANDD.BCST zabs<>(SB), X2, A2       \
	VPANDD.BCST zsign<>(SB), X, S        \
	VPANDD.BCST zsign<>(SB), X2, S2      \
	VADDPS A, A, X                       \
	VADDPS A2, A2, X2                    \
	ZEXP2(X, T, U, X2, T2, U2)           \
	VADDPS.BCST zone<>(SB), X, X         \
	VADDPS.BCST zone<>(SB), X2, X2       \
	VBROADCASTSS ztwo<>(SB), T           \
	VBROADCASTSS ztwo<>(SB), T2          \
	VDIVPS X, T, X                       \
	VDIVPS X2, T2, X2                    \
	VBROADCASTSS zone<>(SB), T           \
	VBROADCASTSS zone<>(SB), T2          \
	VSUBPS X, T, X                       \
	VSUBPS X2, T2, X2                    \
	VMULPS A, A, T                       \
	VMULPS A2, A2, T2                    \
	VBROADCASTSS zt5<>(SB), U            \
	VBROADCASTSS zt5<>(SB), U2           \
	VFMADD213PS.BCST zt4<>(SB), T, U     \
	VFMADD213PS.BCST zt4<>(SB), T2, U2   \
	VFMADD213PS.BCST zt3<>(SB), T, U     \
	VFMADD213PS.BCST zt3<>(SB), T2, U2   \
	VFMADD213PS.BCST zt2<>(SB), T, U     \
	VFMADD213PS.BCST zt2<>(SB), T2, U2   \
	VFMADD213PS.BCST zt1<>(SB), T, U     \
	VFMADD213PS.BCST zt1<>(SB), T2, U2   \
	VMULPS A, T, T                       \
	VMULPS A2, T2, T2                    \
	VFMADD213PS A, T, U                  \
	VFMADD213PS A2, T2, U2               \
	VCMPPS.BCST $1, ztthr<>(SB), A, K1   \
	VCMPPS.BCST $1, ztthr<>(SB), A2, K2  \
	VMOVAPS U, K1, X                     \
	VMOVAPS U2, K2, X2                   \
	VPORD S, X, X                        \
	VPORD S2, X2, X2

// ZLSTMCELL2 is ZLSTMCELL for thirty-two units: the first sixteen from
// Z0..Z3 as ZLSTMCELL takes them, the next sixteen from Z4..Z7, their
// c at CPTR+64 and h at HPTR+64 (CPTR2, HPTR2). Clobbers Z0..Z15, K1 and
// K2.
#define ZLSTMCELL2(CPTR, HPTR, CPTR2, HPTR2) \
	ZSIGMOID2(Z0, Z8, Z9, Z4, Z12, Z13)                  \
	ZSIGMOID2(Z1, Z8, Z9, Z5, Z12, Z13)                  \
	ZTANH2(Z2, Z8, Z9, Z10, Z11, Z6, Z12, Z13, Z14, Z15) \
	ZSIGMOID2(Z3, Z8, Z9, Z7, Z12, Z13)                  \
	VMULPS Z2, Z0, Z0                                    \
	VMULPS Z6, Z4, Z4                                    \
	VFMADD231PS CPTR, Z1, Z0                             \
	VFMADD231PS CPTR2, Z5, Z4                            \
	VMOVUPS Z0, CPTR                                     \
	VMOVUPS Z4, CPTR2                                    \
	ZTANH2(Z0, Z8, Z9, Z10, Z11, Z4, Z12, Z13, Z14, Z15) \
	VMULPS Z3, Z0, Z0                                    \
	VMULPS Z7, Z4, Z4                                    \
	VMOVUPS Z0, HPTR                                     \
	VMOVUPS Z4, HPTR2

// ZEXP4, ZSIGMOID4 and ZTANH4: the same on four sets of registers (K1..K4).
#define ZEXP4(X, T, U, X2, T2, U2, X3, T3, U3, X4, T4, U4) \
	VMAXPS.BCST zexplo<>(SB), X, X          \
	VMAXPS.BCST zexplo<>(SB), X2, X2        \
	VMAXPS.BCST zexplo<>(SB), X3, X3        \
	VMAXPS.BCST zexplo<>(SB), X4, X4        \
	VMINPS.BCST zexphi<>(SB), X, X          \
	VMINPS.BCST zexphi<>(SB), X2, X2        \
	VMINPS.BCST zexphi<>(SB), X3, X3        \
	VMINPS.BCST zexphi<>(SB), X4, X4        \
	VMULPS.BCST zlog2e<>(SB), X, T          \
	VMULPS.BCST zlog2e<>(SB), X2, T2        \
	VMULPS.BCST zlog2e<>(SB), X3, T3        \
	VMULPS.BCST zlog2e<>(SB), X4, T4        \
	VRNDSCALEPS $0, T, T                    \
	VRNDSCALEPS $0, T2, T2                  \
	VRNDSCALEPS $0, T3, T3                  \
	VRNDSCALEPS $0, T4, T4                  \
	VFNMADD231PS.BCST zln2hi<>(SB), T, X    \
	VFNMADD231PS.BCST zln2hi<>(SB), T2, X2  \
	VFNMADD231PS.BCST zln2hi<>(SB), T3, X3  \
	VFNMADD231PS.BCST zln2hi<>(SB), T4, X4  \
	VFNMADD231PS.BCST zln2lo<>(SB), T, X    \
	VFNMADD231PS.BCST zln2lo<>(SB), T2, X2  \
	VFNMADD231PS.BCST zln2lo<>(SB), T3, X3  \
	VFNMADD231PS.BCST zln2lo<>(SB), T4, X4  \
	VBROADCASTSS zc7<>(SB), U               \
	VBROADCASTSS zc7<>(SB), U2              \
	VBROADCASTSS zc7<>(SB), U3              \
	VBROADCASTSS zc7<>(SB), U4              \
	VFMADD213PS.BCST zc6<>(SB), X, U        \
	VFMADD213PS.BCST zc6<>(SB), X2, U2      \
	VFMADD213PS.BCST zc6<>(SB), X3, U3      \
	VFMADD213PS.BCST zc6<>(SB), X4, U4      \
	VFMADD213PS.BCST zc5<>(SB), X, U        \
	VFMADD213PS.BCST zc5<>(SB), X2, U2      \
	VFMADD213PS.BCST zc5<>(SB), X3, U3      \
	VFMADD213PS.BCST zc5<>(SB), X4, U4      \
	VFMADD213PS.BCST zc4<>(SB), X, U        \
	VFMADD213PS.BCST zc4<>(SB), X2, U2      \
	VFMADD213PS.BCST zc4<>(SB), X3, U3      \
	VFMADD213PS.BCST zc4<>(SB), X4, U4      \
	VFMADD213PS.BCST zc3<>(SB), X, U        \
	VFMADD213PS.BCST zc3<>(SB), X2, U2      \
	VFMADD213PS.BCST zc3<>(SB), X3, U3      \
	VFMADD213PS.BCST zc3<>(SB), X4, U4      \
	VFMADD213PS.BCST zc2<>(SB), X, U        \
	VFMADD213PS.BCST zc2<>(SB), X2, U2      \
	VFMADD213PS.BCST zc2<>(SB), X3, U3      \
	VFMADD213PS.BCST zc2<>(SB), X4, U4      \
	VFMADD213PS.BCST zone<>(SB), X, U       \
	VFMADD213PS.BCST zone<>(SB), X2, U2     \
	VFMADD213PS.BCST zone<>(SB), X3, U3     \
	VFMADD213PS.BCST zone<>(SB), X4, U4     \
	VFMADD213PS.BCST zone<>(SB), X, U       \
	VFMADD213PS.BCST zone<>(SB), X2, U2     \
	VFMADD213PS.BCST zone<>(SB), X3, U3     \
	VFMADD213PS.BCST zone<>(SB), X4, U4     \
	VCVTPS2DQ T, T                          \
	VCVTPS2DQ T2, T2                        \
	VCVTPS2DQ T3, T3                        \
	VCVTPS2DQ T4, T4                        \
	VPADDD.BCST zbias127<>(SB), T, T        \
	VPADDD.BCST zbias127<>(SB), T2, T2      \
	VPADDD.BCST zbias127<>(SB), T3, T3      \
	VPADDD.BCST zbias127<>(SB), T4, T4      \
	VPSLLD $23, T, T                        \
	VPSLLD $23, T2, T2                      \
	VPSLLD $23, T3, T3                      \
	VPSLLD $23, T4, T4                      \
	VMULPS T, U, X                          \
	VMULPS T2, U2, X2                       \
	VMULPS T3, U3, X3                       \
	VMULPS T4, U4, X4

#define ZSIGMOID4(X, T, U, X2, T2, U2, X3, T3, U3, X4, T4, U4) \
	VPXORD.BCST zsign<>(SB), X, X                       \
	VPXORD.BCST zsign<>(SB), X2, X2                     \
	VPXORD.BCST zsign<>(SB), X3, X3                     \
	VPXORD.BCST zsign<>(SB), X4, X4                     \
	ZEXP4(X, T, U, X2, T2, U2, X3, T3, U3, X4, T4, U4)  \
	VADDPS.BCST zone<>(SB), X, X                        \
	VADDPS.BCST zone<>(SB), X2, X2                      \
	VADDPS.BCST zone<>(SB), X3, X3                      \
	VADDPS.BCST zone<>(SB), X4, X4                      \
	VBROADCASTSS zone<>(SB), T                          \
	VBROADCASTSS zone<>(SB), T2                         \
	VBROADCASTSS zone<>(SB), T3                         \
	VBROADCASTSS zone<>(SB), T4                         \
	VDIVPS X, T, X                                      \
	VDIVPS X2, T2, X2                                   \
	VDIVPS X3, T3, X3                                   \
	VDIVPS X4, T4, X4

#define ZTANH4(X, T, U, A, S, X2, T2, U2, A2, S2, X3, T3, U3, A3, S3, X4, T4, U4, A4, S4) \
	VPANDD.BCST zabs<>(SB), X, A                        \
	VPANDD.BCST zabs<>(SB), X2, A2                      \
	VPANDD.BCST zabs<>(SB), X3, A3                      \
	VPANDD.BCST zabs<>(SB), X4, A4                      \
	VPANDD.BCST zsign<>(SB), X, S                       \
	VPANDD.BCST zsign<>(SB), X2, S2                     \
	VPANDD.BCST zsign<>(SB), X3, S3                     \
	VPANDD.BCST zsign<>(SB), X4, S4                     \
	VADDPS A, A, X                                      \
	VADDPS A2, A2, X2                                   \
	VADDPS A3, A3, X3                                   \
	VADDPS A4, A4, X4                                   \
	ZEXP4(X, T, U, X2, T2, U2, X3, T3, U3, X4, T4, U4)  \
	VADDPS.BCST zone<>(SB), X, X                        \
	VADDPS.BCST zone<>(SB), X2, X2                      \
	VADDPS.BCST zone<>(SB), X3, X3                      \
	VADDPS.BCST zone<>(SB), X4, X4                      \
	VBROADCASTSS ztwo<>(SB), T                          \
	VBROADCASTSS ztwo<>(SB), T2                         \
	VBROADCASTSS ztwo<>(SB), T3                         \
	VBROADCASTSS ztwo<>(SB), T4                         \
	VDIVPS X, T, X                                      \
	VDIVPS X2, T2, X2                                   \
	VDIVPS X3, T3, X3                                   \
	VDIVPS X4, T4, X4                                   \
	VBROADCASTSS zone<>(SB), T                          \
	VBROADCASTSS zone<>(SB), T2                         \
	VBROADCASTSS zone<>(SB), T3                         \
	VBROADCASTSS zone<>(SB), T4                         \
	VSUBPS X, T, X                                      \
	VSUBPS X2, T2, X2                                   \
	VSUBPS X3, T3, X3                                   \
	VSUBPS X4, T4, X4                                   \
	VMULPS A, A, T                                      \
	VMULPS A2, A2, T2                                   \
	VMULPS A3, A3, T3                                   \
	VMULPS A4, A4, T4                                   \
	VBROADCASTSS zt5<>(SB), U                           \
	VBROADCASTSS zt5<>(SB), U2                          \
	VBROADCASTSS zt5<>(SB), U3                          \
	VBROADCASTSS zt5<>(SB), U4                          \
	VFMADD213PS.BCST zt4<>(SB), T, U                    \
	VFMADD213PS.BCST zt4<>(SB), T2, U2                  \
	VFMADD213PS.BCST zt4<>(SB), T3, U3                  \
	VFMADD213PS.BCST zt4<>(SB), T4, U4                  \
	VFMADD213PS.BCST zt3<>(SB), T, U                    \
	VFMADD213PS.BCST zt3<>(SB), T2, U2                  \
	VFMADD213PS.BCST zt3<>(SB), T3, U3                  \
	VFMADD213PS.BCST zt3<>(SB), T4, U4                  \
	VFMADD213PS.BCST zt2<>(SB), T, U                    \
	VFMADD213PS.BCST zt2<>(SB), T2, U2                  \
	VFMADD213PS.BCST zt2<>(SB), T3, U3                  \
	VFMADD213PS.BCST zt2<>(SB), T4, U4                  \
	VFMADD213PS.BCST zt1<>(SB), T, U                    \
	VFMADD213PS.BCST zt1<>(SB), T2, U2                  \
	VFMADD213PS.BCST zt1<>(SB), T3, U3                  \
	VFMADD213PS.BCST zt1<>(SB), T4, U4                  \
	VMULPS A, T, T                                      \
	VMULPS A2, T2, T2                                   \
	VMULPS A3, T3, T3                                   \
	VMULPS A4, T4, T4                                   \
	VFMADD213PS A, T, U                                 \
	VFMADD213PS A2, T2, U2                              \
	VFMADD213PS A3, T3, U3                              \
	VFMADD213PS A4, T4, U4                              \
	VCMPPS.BCST $1, ztthr<>(SB), A, K1                  \
	VCMPPS.BCST $1, ztthr<>(SB), A2, K2                 \
	VCMPPS.BCST $1, ztthr<>(SB), A3, K3                 \
	VCMPPS.BCST $1, ztthr<>(SB), A4, K4                 \
	VMOVAPS U, K1, X                                    \
	VMOVAPS U2, K2, X2                                  \
	VMOVAPS U3, K3, X3                                  \
	VMOVAPS U4, K4, X4                                  \
	VPORD S, X, X                                       \
	VPORD S2, X2, X2                                    \
	VPORD S3, X3, X3                                    \
	VPORD S4, X4, X4

// ZLSTMCELL4 is ZLSTMCELL for sixty-four units, four groups of sixteen:
// i, f, g, o in Z0..Z3, Z4..Z7, Z16..Z19, Z20..Z23; c at CPTR plus 0,
// 64, 128, 192 and h likewise at HPTR, both (R8)/(R9) indexed by DX.
// Clobbers Z0..Z31 and K1..K4.
#define ZLSTMCELL4 \
	ZSIGMOID4(Z0, Z8, Z9, Z4, Z12, Z13, Z16, Z24, Z25, Z20, Z28, Z29) \
	ZSIGMOID4(Z1, Z8, Z9, Z5, Z12, Z13, Z17, Z24, Z25, Z21, Z28, Z29) \
	ZTANH4(Z2, Z8, Z9, Z10, Z11, Z6, Z12, Z13, Z14, Z15, Z18, Z24, Z25, Z26, Z27, Z22, Z28, Z29, Z30, Z31) \
	ZSIGMOID4(Z3, Z8, Z9, Z7, Z12, Z13, Z19, Z24, Z25, Z23, Z28, Z29) \
	VMULPS Z2, Z0, Z0                  \
	VMULPS Z6, Z4, Z4                  \
	VMULPS Z18, Z16, Z16               \
	VMULPS Z22, Z20, Z20               \
	VFMADD231PS (R8)(DX*1), Z1, Z0     \
	VFMADD231PS 64(R8)(DX*1), Z5, Z4   \
	VFMADD231PS 128(R8)(DX*1), Z17, Z16 \
	VFMADD231PS 192(R8)(DX*1), Z21, Z20 \
	VMOVUPS Z0, (R8)(DX*1)             \
	VMOVUPS Z4, 64(R8)(DX*1)           \
	VMOVUPS Z16, 128(R8)(DX*1)         \
	VMOVUPS Z20, 192(R8)(DX*1)         \
	ZTANH4(Z0, Z8, Z9, Z10, Z11, Z4, Z12, Z13, Z14, Z15, Z16, Z24, Z25, Z26, Z27, Z20, Z28, Z29, Z30, Z31) \
	VMULPS Z3, Z0, Z0                  \
	VMULPS Z7, Z4, Z4                  \
	VMULPS Z19, Z16, Z16               \
	VMULPS Z23, Z20, Z20               \
	VMOVUPS Z0, (R9)(DX*1)             \
	VMOVUPS Z4, 64(R9)(DX*1)           \
	VMOVUPS Z16, 128(R9)(DX*1)         \
	VMOVUPS Z20, 192(R9)(DX*1)

// ZPANEL8 leaves in Y0 the eight sums of a panel of eight W rows (R14
// bytes apart, the first at DI, or eight rows on with SKIP) against h
// (SI its end), as gemmNT1x8 makes them (REDUCE8's order). LOOP is a
// label of its own. Clobbers AX, BX, DX, R8..R13, Y0..Y8.
#define ZPANEL8(SKIP, LOOP) \
	MOVQ k+8(FP), DX                \
	SHLQ $2, DX                     \
	LEAQ (DI)(DX*1), AX             \
	SKIP                            \
	NEXT7ROWS                       \
	NEGQ DX                         \
	ZERO8                           \
LOOP:                               \
	VMOVUPS (SI)(DX*1), Y8          \
	FMA18(0)                        \
	ADDQ $32, DX                    \
	JNZ  LOOP                       \
	REDUCE8

#define NOSKIP
#define SKIP8 LEAQ (AX)(R14*8), AX

// ZGATE adds W_q·h to the sixteen sums of gate Q's rows of the units at
// CX bytes, two panels of eight, into xp (stored) and ZOUT; DI moves on
// to gate Q+1's rows, n rows further. Each sum is the AVX2 step's.
#define ZGATE(Q, ZOUT, LOOPA, LOOPB) \
	ZPANEL8(NOSKIP, LOOPA)          \
	VMOVAPS Y0, Y20                 \
	ZPANEL8(SKIP8, LOOPB)           \
	VINSERTF32X8 $1, Y0, Z20, ZOUT  \
	MOVQ n+0(FP), DX                \
	IMULQ $(4*Q), DX                \
	ADDQ xp+40(FP), DX              \
	VADDPS (DX)(CX*1), ZOUT, ZOUT   \
	VMOVUPS ZOUT, (DX)(CX*1)        \
	MOVQ n+0(FP), DX                \
	IMULQ R14, DX                   \
	ADDQ DX, DI

// Z38PUT finishes one A row's eight sums of a panel, now in Y0..Y7:
// REDUCE8, then beta·C by one more fused multiply-add (beta == 0, in DX:
// C not read), stored at DST.
#define Z38PUT(DST, PUT) \
	REDUCE8                   \
	TESTL DX, DX              \
	JZ    PUT                 \
	VFMADD231PS DST, Y15, Y0  \
PUT:                          \
	VMOVUPS Y0, DST

// func lstmAVX512(n int, stride int, y *float32, bias *float32, c *float32, h *float32)
//
// lstmAVX2 for the first n (a multiple of 16) units: sixty-four at a time,
// four groups of sixteen side by side, while they last, then thirty-two,
// then sixteen.
TEXT ·lstmAVX512(SB), NOSPLIT, $0-48
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
	MOVQ R12, R14
	ANDQ $-256, R14

	// Sixty-four units a pass while they last (ZLSTMCELL4), then
	// thirty-two (ZLSTMCELL2), then sixteen; R14 the end of the units of
	// the wider passes.
zlstmloop4:
	CMPQ DX, R14
	JGE  zlstm2
	VMOVUPS (SI)(DX*1), Z0
	VADDPS (DI)(DX*1), Z0, Z0
	VMOVUPS (AX)(DX*1), Z1
	VADDPS (R10)(DX*1), Z1, Z1
	VMOVUPS (R13)(DX*1), Z2
	VADDPS (CX)(DX*1), Z2, Z2
	VMOVUPS (BX)(DX*1), Z3
	VADDPS (R11)(DX*1), Z3, Z3
	VMOVUPS 64(SI)(DX*1), Z4
	VADDPS 64(DI)(DX*1), Z4, Z4
	VMOVUPS 64(AX)(DX*1), Z5
	VADDPS 64(R10)(DX*1), Z5, Z5
	VMOVUPS 64(R13)(DX*1), Z6
	VADDPS 64(CX)(DX*1), Z6, Z6
	VMOVUPS 64(BX)(DX*1), Z7
	VADDPS 64(R11)(DX*1), Z7, Z7
	VMOVUPS 128(SI)(DX*1), Z16
	VADDPS 128(DI)(DX*1), Z16, Z16
	VMOVUPS 128(AX)(DX*1), Z17
	VADDPS 128(R10)(DX*1), Z17, Z17
	VMOVUPS 128(R13)(DX*1), Z18
	VADDPS 128(CX)(DX*1), Z18, Z18
	VMOVUPS 128(BX)(DX*1), Z19
	VADDPS 128(R11)(DX*1), Z19, Z19
	VMOVUPS 192(SI)(DX*1), Z20
	VADDPS 192(DI)(DX*1), Z20, Z20
	VMOVUPS 192(AX)(DX*1), Z21
	VADDPS 192(R10)(DX*1), Z21, Z21
	VMOVUPS 192(R13)(DX*1), Z22
	VADDPS 192(CX)(DX*1), Z22, Z22
	VMOVUPS 192(BX)(DX*1), Z23
	VADDPS 192(R11)(DX*1), Z23, Z23
	ZLSTMCELL4
	ADDQ $256, DX
	JMP  zlstmloop4

zlstm2:
	MOVQ R12, R14
	ANDQ $-128, R14

zlstmloop2:
	CMPQ DX, R14
	JGE  zlstmloop
	VMOVUPS (SI)(DX*1), Z0
	VADDPS (DI)(DX*1), Z0, Z0
	VMOVUPS 64(SI)(DX*1), Z4
	VADDPS 64(DI)(DX*1), Z4, Z4
	VMOVUPS (AX)(DX*1), Z1
	VADDPS (R10)(DX*1), Z1, Z1
	VMOVUPS 64(AX)(DX*1), Z5
	VADDPS 64(R10)(DX*1), Z5, Z5
	VMOVUPS (R13)(DX*1), Z2
	VADDPS (CX)(DX*1), Z2, Z2
	VMOVUPS 64(R13)(DX*1), Z6
	VADDPS 64(CX)(DX*1), Z6, Z6
	VMOVUPS (BX)(DX*1), Z3
	VADDPS (R11)(DX*1), Z3, Z3
	VMOVUPS 64(BX)(DX*1), Z7
	VADDPS 64(R11)(DX*1), Z7, Z7
	ZLSTMCELL2((R8)(DX*1), (R9)(DX*1), 64(R8)(DX*1), 64(R9)(DX*1))
	ADDQ $128, DX
	JMP  zlstmloop2

zlstmloop:
	CMPQ DX, R12
	JGE  zlstmdone
	VMOVUPS (SI)(DX*1), Z0
	VADDPS (DI)(DX*1), Z0, Z0
	VMOVUPS (AX)(DX*1), Z1
	VADDPS (R10)(DX*1), Z1, Z1
	VMOVUPS (R13)(DX*1), Z2
	VADDPS (CX)(DX*1), Z2, Z2
	VMOVUPS (BX)(DX*1), Z3
	VADDPS (R11)(DX*1), Z3, Z3
	ZLSTMCELL((R8)(DX*1), (R9)(DX*1))
	ADDQ $64, DX
	JMP  zlstmloop

zlstmdone:
	VZEROUPPER
	RET

// func gruAVX512(n int, stride int, x *float32, p *float32, bih *float32, bhh *float32, hprev *float32, hout *float32)
//
// gruAVX2 for the first n (a multiple of 16) units: sixty-four at a time,
// four groups of sixteen side by side, while they last, then thirty-two,
// then sixteen.
TEXT ·gruAVX512(SB), NOSPLIT, $0-64
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
	MOVQ R12, R14
	ANDQ $-256, R14

	// Sixty-four units a pass while they last, four groups of sixteen,
	// each with r, z and n's two sums in four registers (hprev then in
	// the one that held p + bhh), then thirty-two, then sixteen; R14 the
	// end of the wider passes' units.
zgruloop4:
	CMPQ DX, R14
	JGE  zgru2
	LEAQ (SI)(DX*1), R13
	LEAQ (AX)(DX*1), CX
	LEAQ (DI)(DX*1), R8
	LEAQ (BX)(DX*1), R9
	VMOVUPS (R13), Z0
	VMOVUPS 64(R13), Z4
	VMOVUPS 128(R13), Z16
	VMOVUPS 192(R13), Z20
	VADDPS (R8), Z0, Z0
	VADDPS 64(R8), Z4, Z4
	VADDPS 128(R8), Z16, Z16
	VADDPS 192(R8), Z20, Z20
	VADDPS (CX), Z0, Z0
	VADDPS 64(CX), Z4, Z4
	VADDPS 128(CX), Z16, Z16
	VADDPS 192(CX), Z20, Z20
	VADDPS (R9), Z0, Z0
	VADDPS 64(R9), Z4, Z4
	VADDPS 128(R9), Z16, Z16
	VADDPS 192(R9), Z20, Z20
	ZSIGMOID4(Z0, Z8, Z9, Z4, Z12, Z13, Z16, Z24, Z25, Z20, Z28, Z29)
	VMOVUPS (R13)(R10*1), Z1
	VMOVUPS 64(R13)(R10*1), Z5
	VMOVUPS 128(R13)(R10*1), Z17
	VMOVUPS 192(R13)(R10*1), Z21
	VADDPS (R8)(R10*1), Z1, Z1
	VADDPS 64(R8)(R10*1), Z5, Z5
	VADDPS 128(R8)(R10*1), Z17, Z17
	VADDPS 192(R8)(R10*1), Z21, Z21
	VADDPS (CX)(R10*1), Z1, Z1
	VADDPS 64(CX)(R10*1), Z5, Z5
	VADDPS 128(CX)(R10*1), Z17, Z17
	VADDPS 192(CX)(R10*1), Z21, Z21
	VADDPS (R9)(R10*1), Z1, Z1
	VADDPS 64(R9)(R10*1), Z5, Z5
	VADDPS 128(R9)(R10*1), Z17, Z17
	VADDPS 192(R9)(R10*1), Z21, Z21
	ZSIGMOID4(Z1, Z8, Z9, Z5, Z12, Z13, Z17, Z24, Z25, Z21, Z28, Z29)
	VMOVUPS (CX)(R11*1), Z2
	VMOVUPS 64(CX)(R11*1), Z6
	VMOVUPS 128(CX)(R11*1), Z18
	VMOVUPS 192(CX)(R11*1), Z22
	VADDPS (R9)(R11*1), Z2, Z2
	VADDPS 64(R9)(R11*1), Z6, Z6
	VADDPS 128(R9)(R11*1), Z18, Z18
	VADDPS 192(R9)(R11*1), Z22, Z22
	VMOVUPS (R13)(R11*1), Z3
	VMOVUPS 64(R13)(R11*1), Z7
	VMOVUPS 128(R13)(R11*1), Z19
	VMOVUPS 192(R13)(R11*1), Z23
	VADDPS (R8)(R11*1), Z3, Z3
	VADDPS 64(R8)(R11*1), Z7, Z7
	VADDPS 128(R8)(R11*1), Z19, Z19
	VADDPS 192(R8)(R11*1), Z23, Z23
	VFMADD231PS Z2, Z0, Z3
	VFMADD231PS Z6, Z4, Z7
	VFMADD231PS Z18, Z16, Z19
	VFMADD231PS Z22, Z20, Z23
	ZTANH4(Z3, Z8, Z9, Z10, Z11, Z7, Z12, Z13, Z14, Z15, Z19, Z24, Z25, Z26, Z27, Z23, Z28, Z29, Z30, Z31)
	MOVQ hprev+48(FP), R8
	VMOVUPS (R8)(DX*1), Z2
	VMOVUPS 64(R8)(DX*1), Z6
	VMOVUPS 128(R8)(DX*1), Z18
	VMOVUPS 192(R8)(DX*1), Z22
	VSUBPS Z3, Z2, Z2
	VSUBPS Z7, Z6, Z6
	VSUBPS Z19, Z18, Z18
	VSUBPS Z23, Z22, Z22
	VFMADD213PS Z3, Z1, Z2
	VFMADD213PS Z7, Z5, Z6
	VFMADD213PS Z19, Z17, Z18
	VFMADD213PS Z23, Z21, Z22
	MOVQ hout+56(FP), R9
	VMOVUPS Z2, (R9)(DX*1)
	VMOVUPS Z6, 64(R9)(DX*1)
	VMOVUPS Z18, 128(R9)(DX*1)
	VMOVUPS Z22, 192(R9)(DX*1)
	ADDQ $256, DX
	JMP  zgruloop4

zgru2:
	MOVQ R12, R14
	ANDQ $-128, R14

	// Thirty-two units: the next sixteen in Z16..Z20 beside the first
	// sixteen in Z0..Z4, the gates by the interleaved macros.
zgruloop2:
	CMPQ DX, R14
	JGE  zgruloop
	LEAQ (SI)(DX*1), R13
	LEAQ (AX)(DX*1), CX
	LEAQ (DI)(DX*1), R8
	LEAQ (BX)(DX*1), R9
	VMOVUPS (R13), Z0
	VMOVUPS 64(R13), Z16
	VADDPS (R8), Z0, Z0
	VADDPS 64(R8), Z16, Z16
	VADDPS (CX), Z0, Z0
	VADDPS 64(CX), Z16, Z16
	VADDPS (R9), Z0, Z0
	VADDPS 64(R9), Z16, Z16
	ZSIGMOID2(Z0, Z8, Z9, Z16, Z12, Z13)
	VMOVUPS (R13)(R10*1), Z1
	VMOVUPS 64(R13)(R10*1), Z17
	VADDPS (R8)(R10*1), Z1, Z1
	VADDPS 64(R8)(R10*1), Z17, Z17
	VADDPS (CX)(R10*1), Z1, Z1
	VADDPS 64(CX)(R10*1), Z17, Z17
	VADDPS (R9)(R10*1), Z1, Z1
	VADDPS 64(R9)(R10*1), Z17, Z17
	ZSIGMOID2(Z1, Z8, Z9, Z17, Z12, Z13)
	VMOVUPS (CX)(R11*1), Z2
	VMOVUPS 64(CX)(R11*1), Z18
	VADDPS (R9)(R11*1), Z2, Z2
	VADDPS 64(R9)(R11*1), Z18, Z18
	VMOVUPS (R13)(R11*1), Z3
	VMOVUPS 64(R13)(R11*1), Z19
	VADDPS (R8)(R11*1), Z3, Z3
	VADDPS 64(R8)(R11*1), Z19, Z19
	VFMADD231PS Z2, Z0, Z3
	VFMADD231PS Z18, Z16, Z19
	ZTANH2(Z3, Z8, Z9, Z10, Z11, Z19, Z12, Z13, Z14, Z15)
	MOVQ hprev+48(FP), R8
	VMOVUPS (R8)(DX*1), Z4
	VMOVUPS 64(R8)(DX*1), Z20
	VSUBPS Z3, Z4, Z4
	VSUBPS Z19, Z20, Z20
	VFMADD213PS Z3, Z1, Z4
	VFMADD213PS Z19, Z17, Z20
	MOVQ hout+56(FP), R9
	VMOVUPS Z4, (R9)(DX*1)
	VMOVUPS Z20, 64(R9)(DX*1)
	ADDQ $128, DX
	JMP  zgruloop2

zgruloop:
	CMPQ DX, R12
	JGE  zgrudone
	LEAQ (SI)(DX*1), R13
	LEAQ (AX)(DX*1), CX
	LEAQ (DI)(DX*1), R8
	LEAQ (BX)(DX*1), R9
	VMOVUPS (R13), Z0
	VADDPS (R8), Z0, Z0
	VADDPS (CX), Z0, Z0
	VADDPS (R9), Z0, Z0
	ZSIGMOID(Z0, Z8, Z9)
	VMOVUPS (R13)(R10*1), Z1
	VADDPS (R8)(R10*1), Z1, Z1
	VADDPS (CX)(R10*1), Z1, Z1
	VADDPS (R9)(R10*1), Z1, Z1
	ZSIGMOID(Z1, Z8, Z9)
	VMOVUPS (CX)(R11*1), Z2
	VADDPS (R9)(R11*1), Z2, Z2
	VMOVUPS (R13)(R11*1), Z3
	VADDPS (R8)(R11*1), Z3, Z3
	VFMADD231PS Z2, Z0, Z3
	ZTANH(Z3, Z8, Z9, Z10, Z11)
	MOVQ hprev+48(FP), R8
	VMOVUPS (R8)(DX*1), Z4
	VSUBPS Z3, Z4, Z4
	VFMADD213PS Z3, Z1, Z4
	MOVQ hout+56(FP), R9
	VMOVUPS Z4, (R9)(DX*1)
	ADDQ $64, DX
	JMP  zgruloop

zgrudone:
	VZEROUPPER
	RET

// func lstmStepZ(n, k int, h, w *float32, ldw int, xp, bias, c, hout *float32, lo, hi int)
//
// lstmStepAVX2 with the gates of sixteen units at a time (lo and hi-lo
// multiples of 16): for each gate, the two panels of eight rows of the
// units as lstmStepAVX2 makes them, then the gates of the sixteen units
// as lstmAVX512 computes them. Every bit is lstmStepAVX2's.
//
// Registers: SI the end of h; DI the gate's first W row; AX, BX,
// R8..R13 the ends of a panel's eight rows; DX their byte offset; CX the
// group's first unit, in bytes; R14 ldw in bytes; Z16..Z19 the gates'
// sums.
TEXT ·lstmStepZ(SB), NOSPLIT, $0-88
	MOVQ k+8(FP), SI
	SHLQ $2, SI
	ADDQ h+16(FP), SI
	MOVQ ldw+32(FP), R14
	SHLQ $2, R14
	MOVQ lo+72(FP), CX
	SHLQ $2, CX

zstepgroup:
	MOVQ hi+80(FP), DX
	SHLQ $2, DX
	CMPQ CX, DX
	JGE  zstepdone
	MOVQ CX, DI
	IMULQ ldw+32(FP), DI
	ADDQ w+24(FP), DI
	ZGATE(0, Z16, zsteppia, zsteppib)
	ZGATE(1, Z17, zsteppfa, zsteppfb)
	ZGATE(2, Z18, zsteppga, zsteppgb)
	ZGATE(3, Z19, zsteppoa, zsteppob)
	MOVQ n+0(FP), AX
	SHLQ $2, AX
	MOVQ bias+48(FP), BX
	ADDQ CX, BX
	LEAQ (BX)(AX*2), R8
	VADDPS (BX), Z16, Z0
	VADDPS (BX)(AX*1), Z17, Z1
	VADDPS (R8), Z18, Z2
	VADDPS (R8)(AX*1), Z19, Z3
	MOVQ c+56(FP), R9
	MOVQ hout+64(FP), R10
	ZLSTMCELL((R9)(CX*1), (R10)(CX*1))
	ADDQ $64, CX
	JMP  zstepgroup

zstepdone:
	VZEROUPPER
	RET

// func gemmNT3x8Y(panels, k8 int, a *float32, lda int, w *float32, ldw int, c *float32, ldc int, beta float32)
//
// C = A·Wᵀ + beta·C for three rows of A against 8·panels rows of a
// row-major W with k = 8·k8 columns, a panel of eight W rows at a time
// with twenty-four sums in 256-bit registers (AVX-512VL gives the
// thirty-two; no 512-bit operation, so it runs at full rate on Zen 4 too):
// row i of A and W row r of the panel in Y(r), Y(16+r), Y(24+r). Each
// element is computed as gemmNT1x8 computes it: eight lanes over the
// columns in order, REDUCE8, then beta·C.
//
// Registers: AX, BX, R8 W's panel rows 0, 3 and 2, the others R14 (ldw
// bytes) times 1, 2 or 4 from them; SI A's first row, the others R15 (lda
// bytes) and twice it on; CX the chunks left; R13 the panels left; R10
// the panel's first W row; R11 A; R12 eight rows of W in bytes; R9 ldc in
// bytes; DI C.
TEXT ·gemmNT3x8Y(SB), NOSPLIT, $0-68
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
	MOVQ ldc+56(FP), R9
	SHLQ $2, R9
	VBROADCASTSS beta+64(FP), Y15

z38panel:
	TESTQ R13, R13
	JZ    z38done
	MOVQ  R10, AX
	LEAQ  (R10)(R14*2), R8
	LEAQ  (R8)(R14*1), BX
	MOVQ  R11, SI
	MOVQ  k8+8(FP), CX
	ZERO8
	VXORPS Y16, Y16, Y16
	VXORPS Y17, Y17, Y17
	VXORPS Y18, Y18, Y18
	VXORPS Y19, Y19, Y19
	VXORPS Y20, Y20, Y20
	VXORPS Y21, Y21, Y21
	VXORPS Y22, Y22, Y22
	VXORPS Y23, Y23, Y23
	VXORPS Y24, Y24, Y24
	VXORPS Y25, Y25, Y25
	VXORPS Y26, Y26, Y26
	VXORPS Y27, Y27, Y27
	VXORPS Y28, Y28, Y28
	VXORPS Y29, Y29, Y29
	VXORPS Y30, Y30, Y30
	VXORPS Y31, Y31, Y31

z38loop:
	VMOVUPS (SI), Y8
	VMOVUPS (SI)(R15*1), Y9
	VMOVUPS (SI)(R15*2), Y10
	VMOVUPS (AX), Y11
	VFMADD231PS Y11, Y8, Y0
	VFMADD231PS Y11, Y9, Y16
	VFMADD231PS Y11, Y10, Y24
	VMOVUPS (AX)(R14*1), Y12
	VFMADD231PS Y12, Y8, Y1
	VFMADD231PS Y12, Y9, Y17
	VFMADD231PS Y12, Y10, Y25
	VMOVUPS (R8), Y11
	VFMADD231PS Y11, Y8, Y2
	VFMADD231PS Y11, Y9, Y18
	VFMADD231PS Y11, Y10, Y26
	VMOVUPS (BX), Y12
	VFMADD231PS Y12, Y8, Y3
	VFMADD231PS Y12, Y9, Y19
	VFMADD231PS Y12, Y10, Y27
	VMOVUPS (AX)(R14*4), Y11
	VFMADD231PS Y11, Y8, Y4
	VFMADD231PS Y11, Y9, Y20
	VFMADD231PS Y11, Y10, Y28
	VMOVUPS (BX)(R14*2), Y12
	VFMADD231PS Y12, Y8, Y5
	VFMADD231PS Y12, Y9, Y21
	VFMADD231PS Y12, Y10, Y29
	VMOVUPS (R8)(R14*4), Y11
	VFMADD231PS Y11, Y8, Y6
	VFMADD231PS Y11, Y9, Y22
	VFMADD231PS Y11, Y10, Y30
	VMOVUPS (BX)(R14*4), Y12
	VFMADD231PS Y12, Y8, Y7
	VFMADD231PS Y12, Y9, Y23
	VFMADD231PS Y12, Y10, Y31
	ADDQ $32, SI
	ADDQ $32, AX
	ADDQ $32, BX
	ADDQ $32, R8
	DECQ CX
	JNZ  z38loop

	MOVL beta+64(FP), DX
	Z38PUT((DI), z38put0)
	VMOVAPS Y16, Y0
	VMOVAPS Y17, Y1
	VMOVAPS Y18, Y2
	VMOVAPS Y19, Y3
	VMOVAPS Y20, Y4
	VMOVAPS Y21, Y5
	VMOVAPS Y22, Y6
	VMOVAPS Y23, Y7
	Z38PUT((DI)(R9*1), z38put1)
	VMOVAPS Y24, Y0
	VMOVAPS Y25, Y1
	VMOVAPS Y26, Y2
	VMOVAPS Y27, Y3
	VMOVAPS Y28, Y4
	VMOVAPS Y29, Y5
	VMOVAPS Y30, Y6
	VMOVAPS Y31, Y7
	Z38PUT((DI)(R9*2), z38put2)
	ADDQ $32, DI
	ADDQ R12, R10
	DECQ R13
	JMP  z38panel

z38done:
	VZEROUPPER
	RET
