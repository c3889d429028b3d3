//go:build !purego

package f32

import "rnnserve/internal/host"

// The AVX-512 float32 kernels. Each computes every element as its AVX2
// counterpart does, in the same order, so the paths agree bit for bit;
// they take sixteen lanes (or two eight-lane rows) per instruction where
// the AVX2 kernels take eight.

// wide512 says whether the AVX-512 products (gemvPackedZ, gemmPackedZ3)
// run by default on this host: where the CPU runs a 512-bit operation at
// once, not as two 256-bit halves. AMD's Zen 4 (family 25 with AVX-512)
// splits them: there a 512-bit FMA has half the throughput of a 256-bit
// one, and the products, which loads bound, ran no faster with the wider
// registers (0.81-1.05x; docs/data/avx512.md). The gates, chains of
// dependent operations, ran 1.5x faster on Zen 4 too, about 2x with four
// groups of sixteen interleaved (doc.go), and run wherever the CPU has
// AVX-512. The build tag avx512f32 makes the products the
// default anyway, for timing them.
var wide512 = avx512F32 || !zen4(host.Get())

func zen4(d *host.Description) bool { return d.Vendor == "AuthenticAMD" && d.Family == 25 }

//go:noescape
func lstmAVX512(n int, stride int, y *float32, bias *float32, c *float32, h *float32)

//go:noescape
func lstmStepZ(n, k int, h, w *float32, ldw int, xp, bias, c, hout *float32, lo, hi int)

//go:noescape
func gemmNT3x8Y(panels, k8 int, a *float32, lda int, w *float32, ldw int, c *float32, ldc int, beta float32)

//go:noescape
func gemmNT6x8Z(panels, k8 int, a *float32, lda int, w *float32, ldw int, c *float32, ldc int, beta float32, pairs int)

//go:noescape
func gruAVX512(n int, stride int, x *float32, p *float32, bih *float32, bhh *float32, hprev *float32, hout *float32)

//go:noescape
func gemvPackedZ(panels, k int, a, w, c *float32, beta float32)

// gemvPacked is one row of A against the whole panels of a packed W:
// gemvPackedZ where the AVX-512 kernels run, else gemvPacked8.
func gemvPacked(panels, k int, a, w, c *float32, beta float32) {
	if useZProducts {
		gemvPackedZ(panels, k, a, w, c, beta)
		return
	}
	gemvPacked8(panels, k, a, w, c, beta)
}

//go:noescape
func gemmPackedZ3(panels, k8, rows int, a *float32, lda int, w, c *float32, ldc int, beta float32)

// gemmPacked3 is two or three rows of A against the whole panels of a
// packed W with k a multiple of 8: gemmPackedZ3 where the AVX-512 kernels
// run, else gemmPacked3x4, which on the way prefetches pfBytes from pf
// into L2, spread evenly over its passes (pfBytes 0: none; the AVX-512
// products prefetch nothing, and gemmPackedAsm asks them for none).
func gemmPacked3(panels, k8, rows int, a *float32, lda int, w, c *float32, ldc int, beta float32, pf *float32, pfBytes int) {
	if useZProducts {
		gemmPackedZ3(panels, k8, rows, a, lda, w, c, ldc, beta)
		return
	}
	passes := 2 * panels * k8 // half a panel a pass
	gemmPacked3x4(panels, k8, rows, a, lda, w, c, ldc, beta, pf, (pfBytes+passes-1)/passes)
}
