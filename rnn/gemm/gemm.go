// Package gemm is a float32 matrix product for the tree executors: C =
// alpha·A·Wᵀ + beta·C with A [m][k] and W [n][k] both row-major, the layout
// of activations times PyTorch weights. It is served behind gonum's BLAS
// interface (Implementation embeds gonum's and overrides Sgemm and Sgemv
// for that layout), so code written against blas.Float32 can use it.
//
// Every element of C is one dot product computed the same way whatever m,
// n and the element's position: eight lanes accumulate k in steps of eight
// (fused multiply-add on AVX2 hardware), the last k%8 products go to the
// lanes in order, and the lanes are summed in a fixed order. So a product
// of one row and a product of many rows give the same bits for that row,
// which is what lets the recursive (one node at a time) and depth-batched
// (many nodes at once) tree executors agree exactly. It runs on the
// caller's goroutine: the executors parallelise above it.
//
// On amd64 with AVX2 and FMA the kernels are assembly, register-blocked
// four rows of A by three rows of W; elsewhere they are the Go loops of
// dotGeneric, which define the arithmetic.
package gemm

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// Implementation is gonum's BLAS with Sgemm (A·Wᵀ) and Sgemv (no
// transpose) replaced by this package's deterministic kernel; every other
// routine and layout is gonum's.
type Implementation struct {
	gonum.Implementation
}

var _ blas.Float32 = Implementation{}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C.
func (impl Implementation) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if tA != blas.NoTrans || tB != blas.Trans || m < 0 || n < 0 || k < 0 || lda < max(1, k) || ldb < max(1, k) || ldc < max(1, n) ||
		m > 0 && n > 0 && (len(a) < (m-1)*lda+k || len(b) < (n-1)*ldb+k || len(c) < (m-1)*ldc+n) {
		// Other layouts, and argument errors (gonum panics with its messages).
		impl.Implementation.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	MulT(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Sgemv computes y = alpha·A·x + beta·y for A [m][n] (NoTrans) with the
// same kernel; unit strides only, else gonum's.
func (impl Implementation) Sgemv(tA blas.Transpose, m, n int, alpha float32, a []float32, lda int, x []float32, incX int, beta float32, y []float32, incY int) {
	if tA != blas.NoTrans || incX != 1 || incY != 1 || m < 0 || n < 0 || lda < max(1, n) ||
		m > 0 && n > 0 && (len(a) < (m-1)*lda+n || len(x) < n || len(y) < m) {
		impl.Implementation.Sgemv(tA, m, n, alpha, a, lda, x, incX, beta, y, incY)
		return
	}
	MulT(1, m, n, alpha, x, n, a, lda, beta, y, m)
}

// MulT computes C = alpha·A·Wᵀ + beta·C for A [m][k] (lda), W [n][k] (ldw)
// and C [m][n] (ldc). With beta == 0, C is overwritten (NaNs in it do not
// propagate).
func MulT(m, n, k int, alpha float32, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				c[i*ldc+j] = store(0, alpha, beta, c[i*ldc+j])
			}
		}
		return
	}
	mulT(m, n, k, alpha, a, lda, w, ldw, beta, c, ldc)
}

func store(dot, alpha, beta, old float32) float32 {
	v := alpha * dot
	if beta != 0 {
		v += beta * old
	}
	return v
}

// mulTGeneric is MulT on dotGeneric, element by element.
func mulTGeneric(m, n, k int, alpha float32, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		ai := a[i*lda : i*lda+k]
		for j := 0; j < n; j++ {
			c[i*ldc+j] = store(dotGeneric(ai, w[j*ldw:j*ldw+k]), alpha, beta, c[i*ldc+j])
		}
	}
}

// dotGeneric is the dot product of x and y (same length) as every kernel
// of this package computes it: for l in 0..7, lane l sums x[i]·y[i] over
// i ≡ l (mod 8) in increasing i; then ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
// (The assembly fuses each multiply-add; this loop rounds the product
// first, so the two agree only to float rounding.)
func dotGeneric(x, y []float32) float32 {
	var l [8]float32
	for i, v := range x {
		l[i&7] += v * y[i]
	}
	return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}
