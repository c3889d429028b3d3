//go:build !purego

package f32

// The AVX512_BF16 kernels of GemmNTBF16 (bf16dp_amd64.s).

//go:noescape
func splitBF16DP(k int, x *float32, dst *uint16)

//go:noescape
func gemvBF16DP(n, k int, a *float32, w *uint16, ldw int, c *float32, beta float32)

//go:noescape
func gemmBF16DP2x4(n, k int, a *float32, lda int, w *uint16, ldw int, c *float32, ldc int, beta float32)

// dpBlock is the most columns of A the kernels take in one call: they
// split each row of A into bf16 pairs in their own stack frame, 4 KiB a
// row.
const dpBlock = 1024

// gemmBF16DP is GemmNTBF16 on the AVX512_BF16 kernels: for each block
// of dpBlock columns, the rows two at a time through gemmBF16DP2x4 and a
// last odd one through gemvBF16DP. One or two rows stream W once; more go
// past W in blocks of rows that stay in L2 (blocking.packBlock bytes)
// while every pair passes them. The blocks of columns after the first
// add to C.
func gemmBF16DP(m, n, k int, a []float32, lda int, w []uint16, ldw int, beta float32, c []float32, ldc int) {
	for p0 := 0; p0 < k; p0 += dpBlock {
		kb := min(dpBlock, k-p0)
		b := beta
		if p0 > 0 {
			b = 1
		}
		nb := n
		if m > 2 {
			nb = max(8, blocks().packBlock/(2*kb)&^7)
		}
		for j0 := 0; j0 < n; j0 += nb {
			jb := min(nb, n-j0)
			wj := &w[j0*ldw+p0]
			for i0 := 0; i0 < m; i0 += 2 {
				if m-i0 == 1 {
					gemvBF16DP(jb, kb, &a[i0*lda+p0], wj, ldw, &c[i0*ldc+j0], b)
				} else {
					gemmBF16DP2x4(jb, kb, &a[i0*lda+p0], lda, wj, ldw, &c[i0*ldc+j0], ldc, b)
				}
			}
		}
	}
}
