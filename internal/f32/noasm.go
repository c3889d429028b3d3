//go:build purego || !amd64

package f32

// useAsm is always false without the assembly; the tests that compare the
// two paths then compare the pure-Go path with itself.
var (
	useAsm       = false
	useAVX512    = false
	useZProducts = false
	useDPBF16    = false
)

const hostAVX2, hostAVX512, hostBF16, wide512 = false, false, false, false

func gemmNTKernel(m, n, k int, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int, _ bool) {
	gemmNTGo(m, n, k, a, lda, w, ldw, beta, c, ldc)
}

func gemvTKernel(k, n int, w []float32, ldw int, x []float32, beta float32, y []float32) {
	gemvTGo(k, n, w, ldw, x, beta, y)
}

func lstmKernel(n, stride int, y, bias, c, h []float32) { lstmGo(0, n, stride, y, bias, c, h) }

func lstmStepKernel(n, k int, h, w []float32, ldw int, xp, bias, c, hout []float32, reverse bool) bool {
	return false
}

func gruKernel(n, stride int, x, p, bih, bhh, hprev, hout []float32) {
	gruGo(0, n, stride, x, p, bih, bhh, hprev, hout)
}

func treeLeafKernel(n, stride int, y, bias, c, h []float32) { treeLeafGo(0, n, stride, y, bias, c, h) }

func treeInnerKernel(n, stride int, y, bias, cl, cr, c, h []float32) {
	treeInnerGo(0, n, stride, y, bias, cl, cr, c, h)
}

func sigmoidVec(dst, src []float32) int { return 0 }

func tanhVec(dst, src []float32) int { return 0 }

func gemmBF16Kernel(m, n, k int, a []float32, lda int, w []uint16, ldw int, beta float32, c []float32, ldc int) {
	gemmBF16Go(m, n, k, a, lda, w, ldw, beta, c, ldc)
}

func bf16Kernel(dst []float32, src []uint16) int { return 0 }

func sumKernel(x []float32) float32 { return sumGo(x) }

func finiteKernel(x []float32) bool { return finiteGo(x) }

func implName() string { return "go" }

func gemmPackedAsm(m, n, k int, a []float32, lda int, p []float32, beta float32, c []float32, ldc int, _ bool) {
	gemmPackedGo(m, n, k, a, lda, p, beta, c, ldc)
}
