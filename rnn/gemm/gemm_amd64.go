//go:build amd64

package gemm

import "golang.org/x/sys/cpu"

// useAsm: the assembly kernels need AVX2 and FMA.
var useAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dot1x1 returns the dot product of a[:k] and w[:k].
//
//go:noescape
func dot1x1(k int, a, w *float32) float32

// dot1x4 writes the dot products of a[:k] with four rows of w (stride ldw).
//
//go:noescape
func dot1x4(k int, a, w *float32, ldw int, out *[4]float32)

// dot4x3 writes the dot products of four rows of a (stride lda) with three
// rows of w (stride ldw), row by row: out[3r+c] = a_r·w_c.
//
//go:noescape
func dot4x3(k int, a *float32, lda int, w *float32, ldw int, out *[12]float32)

func mulT(m, n, k int, alpha float32, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	if !useAsm {
		mulTGeneric(m, n, k, alpha, a, lda, w, ldw, beta, c, ldc)
		return
	}
	var o12 [12]float32
	var o4 [4]float32
	i := 0
	for ; i+4 <= m; i += 4 {
		j := 0
		for ; j+3 <= n; j += 3 {
			dot4x3(k, &a[i*lda], lda, &w[j*ldw], ldw, &o12)
			for r := 0; r < 4; r++ {
				cr := c[(i+r)*ldc+j : (i+r)*ldc+j+3]
				for q := range cr {
					cr[q] = store(o12[3*r+q], alpha, beta, cr[q])
				}
			}
		}
		for ; j < n; j++ {
			for r := 0; r < 4; r++ {
				p := &c[(i+r)*ldc+j]
				*p = store(dot1x1(k, &a[(i+r)*lda], &w[j*ldw]), alpha, beta, *p)
			}
		}
	}
	for ; i < m; i++ {
		ai := &a[i*lda]
		cr := c[i*ldc : i*ldc+n]
		j := 0
		for ; j+4 <= n; j += 4 {
			dot1x4(k, ai, &w[j*ldw], ldw, &o4)
			for q := 0; q < 4; q++ {
				cr[j+q] = store(o4[q], alpha, beta, cr[j+q])
			}
		}
		for ; j < n; j++ {
			cr[j] = store(dot1x1(k, ai, &w[j*ldw]), alpha, beta, cr[j])
		}
	}
}
