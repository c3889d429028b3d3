//go:build !amd64

package gemm

func mulT(m, n, k int, alpha float32, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	mulTGeneric(m, n, k, alpha, a, lda, w, ldw, beta, c, ldc)
}
