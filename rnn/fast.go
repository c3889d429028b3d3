package rnn

import "rnnserve/internal/f32"

// The kernels the partitioned schedule needs beyond MatMulT and the
// pointwise steps: products with bf16 weights, and a GRU step whose
// previous and new state live in different rows.

// KernelImpl names the kernels in use: "avx2+fma" (assembly, chosen at run
// time from the CPU's features) or "go" (pure Go: another CPU, or a build
// with -tags purego).
func KernelImpl() string { return f32.Impl() }

// ToBF16 rounds src to bf16 (the high 16 bits of a float32, to nearest
// even) into dst.
func ToBF16(dst []uint16, src []float32) { f32.ToBF16(dst, src) }

// FromBF16 widens bf16 src into dst, exactly.
func FromBF16(dst []float32, src []uint16) { f32.FromBF16(dst, src) }

// MatMulTBF16 is MatMulT with W stored as bf16, computed in float32.
func MatMulTBF16(m, n, k int, a []float32, lda int, w []uint16, ldw int, beta float32, c []float32, ldc int) {
	f32.GemmNTBF16(m, n, k, a, lda, w, ldw, beta, c, ldc)
}

// GRUPointwiseTo is GRUPointwise with h_{t-1} read from hprev [B][H]
// (leading dimension ldhp) and h_t written to hout [B][H] (ldho); the gate
// blocks of x and hp are stride apart (stride >= H), so a slice of a
// layer's units can be finished on its own.
func GRUPointwiseTo(B, H, stride int, x []float32, ldx int, hp []float32, ldp int, bih, bhh, hprev []float32, ldhp int, hout []float32, ldho int) {
	for b := 0; b < B; b++ {
		f32.GRUGates(H, stride, x[b*ldx:b*ldx+2*stride+H], hp[b*ldp:b*ldp+2*stride+H], bih, bhh,
			hprev[b*ldhp:b*ldhp+H], hout[b*ldho:b*ldho+H])
	}
}
