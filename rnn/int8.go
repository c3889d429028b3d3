package rnn

import "rnnserve/internal/f32"

// int8 weights (internal/f32's int8.go has the quantization and the
// layout): W quantized per output row and packed once, A quantized per
// row as each product runs.

// I8Stride is the bytes of one quantized row of k values.
func I8Stride(k int) int { return f32.I8Stride(k) }

// I8PanelBytes is the bytes of one panel (16 rows) of a packed W of rows
// k values long.
func I8PanelBytes(k int) int { return f32.I8PanelBytes(k) }

// PackedI8Bytes is the bytes of W [n][k] packed by PackI8, scales
// included.
func PackedI8Bytes(n, k int) int { return f32.PackedI8Bytes(n, k) }

// NewPackedI8 allocates room for W [n][k] packed, aligned for the kernels.
func NewPackedI8(n, k int) []uint8 { return f32.NewPackedI8(n, k) }

// PackI8 quantizes W [n][k] (leading dimension ldw) per row into dst.
func PackI8(dst []uint8, n, k int, w []float32, ldw int) { f32.PackI8(dst, n, k, w, ldw) }

// UnpackI8Row writes row j of a packed W [n][k] into q and returns its
// scale.
func UnpackI8Row(q []int8, n, k int, p []uint8, j int) float32 { return f32.UnpackI8Row(q, n, k, p, j) }

// QuantizeI8 quantizes the m rows of A [m][k] (lda) into q (rows ldq
// bytes apart) and their scales into s.
func QuantizeI8(m, k int, a []float32, lda int, q []uint8, ldq int, s []float32) {
	f32.QuantizeI8(m, k, a, lda, q, ldq, s)
}

// MatMulTI8 is MatMulT with A quantized by QuantizeI8 (q, ldq, s) and W
// packed by PackI8: C = A·Wᵀ + beta·C, summed exactly in int32.
func MatMulTI8(m, n, k int, q []uint8, ldq int, s []float32, p []uint8, beta float32, c []float32, ldc int) {
	f32.GemmNTI8(m, n, k, q, ldq, s, p, beta, c, ldc)
}

// I8KernelImpl names the int8 kernels in use: "avx512vnni", "avx2" or
// "go".
func I8KernelImpl() string { return f32.I8Impl() }

// MaxI8K is the longest row (input width) int8 products take.
const MaxI8K = f32.MaxI8K
