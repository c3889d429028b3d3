package f32

import (
	"math"
	"rnnserve/internal/invariants"
	"unsafe"
)

// Panic messages for programmer errors: sizes that do not match the slices.
const (
	errNegative = "f32: negative dimension"
	errLd       = "f32: leading dimension smaller than the row"
	errShortA   = "f32: A too short"
	errShortW   = "f32: W too short"
	errShortC   = "f32: C too short"
	errShortX   = "f32: x too short"
	errShortY   = "f32: y too short"
	errShortDst = "f32: destination too short"
	errShortGat = "f32: gate slice too short"
	errPanels   = "f32: LSTMStepPackedReverse needs n a multiple of 8"
	errChunks   = "f32: the chunked order needs n a multiple of StepChunk"
)

// kc is the k-block length GemmNTBF16 widens bf16 W panels in (8 rows × kc
// float32 = 16 KiB, a stack array: half the smallest L1d the project's
// hosts have, 32 KiB), and mc the A rows it runs per panel call.
const (
	kc = 512
	mc = 128
)

// wBlock is the number of W rows in GemmNT's blocks for rows k long: as
// many as blocking.wBlock bytes hold, a multiple of 24, so the 4×3
// kernel's panels of three rows and the 1×8 kernel's of eight fill every
// block but the last.
func wBlock(k int) int {
	return max(24, blocks().wBlock/(4*k)/24*24)
}

// pullRows is the most A rows for which GemmNT pulls each W block in
// with its first row alone: with more, each block is reused often enough
// that how it arrives matters little (and with two, the 2×4 kernel's
// four streams pull it anyway).
const pullRows = 16

// pulls says whether GemmNT runs m rows past a W [n][k] by pulling each
// block in with the first row: 3 to pullRows rows, and W larger than
// blocking.pull (it comes from DRAM or a shared L3), or larger than
// blocking.once when the caller reads it once (GemmNTOnce).
func pulls(m, n, k int, once bool) bool {
	b := blocks()
	return m >= 3 && m <= pullRows && (4*n*k > b.pull || once && 4*n*k > b.once)
}

// Impl names the kernels in use: "go", "avx2+fma", "avx512" (every
// kernel with an AVX-512 form in it), or "avx2+fma+avx512gates" (AVX-512
// gates and AVX2 products, where 512-bit operations run as two halves),
// with "+avx512bf16" where GemmNTBF16 uses AVX512_BF16.
func Impl() string { return implName() }

// WidePacked reports whether the products of a packed W (GemmNTPacked)
// run the AVX-512 kernels, sixteen lanes an instruction, where most
// products of a row-major W take eight: on a host whose CPU runs a
// 512-bit operation at once (not AMD's Zen 4, which splits it). There
// packing pays at every size (schedule.PackBounds).
func WidePacked() bool { return useZProducts }

// checkMat panics unless s holds a rows×cols matrix with leading dimension ld.
func checkMat(s []float32, rows, cols, ld int, short string) {
	if ld < max(cols, 1) {
		panic(errLd)
	}
	if rows > 0 && cols > 0 && len(s) < (rows-1)*ld+cols {
		panic(short)
	}
}

// GemmNT computes C = A·Wᵀ + beta·C for A [m][k] (leading dimension lda),
// W [n][k] (ldw) and C [m][n] (ldc). With beta == 0, C is only written.
//
// Every element of C is computed in one order, whatever m, n and its
// position (gemmNTGo spells it out), so a row of C has the same bits
// computed alone or as part of a batch (the tree executors rely on it to
// agree bit for bit), and a range of W's rows multiplied on its own
// (w[j0*ldw:], n = j1-j0, c[j0:]) gives the same columns as the whole
// product: W_hh split over cores computes what one core would.
func GemmNT(m, n, k int, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	gemmNT(m, n, k, a, lda, w, ldw, beta, c, ldc, false)
}

// GemmNTOnce is GemmNT for a W read once and then not again for a while,
// such as an input projection's W_ih, which one inference reads once per
// layer, so that in a model larger than the cache it comes from DRAM.
// With 3 to pullRows rows, the first row pulls each block of W in through
// the 1×8 kernel's eight row streams once W is larger than a quarter of
// L2 (blocking.once; GemmNT does so only above blocking.pull, because for
// a W that stays in cache the extra pass costs): from DRAM a 4×3 panel's
// three row streams read W far below a sequential read of the same bytes
// (BenchmarkGemvCold). The results are GemmNT's, bit for bit.
func GemmNTOnce(m, n, k int, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	gemmNT(m, n, k, a, lda, w, ldw, beta, c, ldc, true)
}

func gemmNT(m, n, k int, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int, once bool) {
	if m < 0 || n < 0 || k < 0 {
		panic(errNegative)
	}
	checkMat(a, m, k, lda, errShortA)
	checkMat(w, n, k, ldw, errShortW)
	checkMat(c, m, n, ldc, errShortC)
	if gemmTrivial(m, n, k, beta, c, ldc) {
		return
	}
	gemmNTKernel(m, n, k, a, lda, w, ldw, plusZero(beta), c, ldc, once)
}

// gemmTrivial does a product with no rows, no columns or no terms (C =
// beta·C) and says whether it did.
func gemmTrivial(m, n, k int, beta float32, c []float32, ldc int) bool {
	if m == 0 || n == 0 {
		return true
	}
	if k > 0 {
		return false
	}
	for i := 0; i < m; i++ {
		scaleGo(plusZero(beta), c[i*ldc:i*ldc+n])
	}
	return true
}

// plusZero turns -0 into 0: a beta of either means C is not read.
func plusZero(beta float32) float32 {
	if beta == 0 {
		return 0
	}
	return beta
}

// GemvN computes y = W·x + beta·y for W [n][k] (leading dimension ldw):
// y[i] = beta*y[i] + Σ_j W[i][j]*x[j]. It is GemmNT with one row.
func GemvN(n, k int, w []float32, ldw int, x []float32, beta float32, y []float32) {
	if n < 0 || k < 0 {
		panic(errNegative)
	}
	if len(x) < k {
		panic(errShortX)
	}
	if len(y) < n {
		panic(errShortY)
	}
	GemmNT(1, n, k, x, max(k, 1), w, ldw, beta, y, max(n, 1))
}

// GemmNN computes C = A·W + beta·C for A [m][k] (lda), W [k][n] (ldw) and
// C [m][n] (ldc): one GemvT per row of A.
func GemmNN(m, n, k int, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(errNegative)
	}
	checkMat(a, m, k, lda, errShortA)
	checkMat(w, k, n, ldw, errShortW)
	checkMat(c, m, n, ldc, errShortC)
	for i := 0; i < m; i++ {
		GemvT(k, n, w, ldw, a[i*lda:], beta, c[i*ldc:])
	}
}

// GemvT computes y = xᵀ·W + beta·y for W [k][n] (leading dimension ldw):
// y[j] = beta*y[j] + Σ_i x[i]*W[i][j].
func GemvT(k, n int, w []float32, ldw int, x []float32, beta float32, y []float32) {
	if n < 0 || k < 0 {
		panic(errNegative)
	}
	checkMat(w, k, n, ldw, errShortW)
	if len(x) < k {
		panic(errShortX)
	}
	if len(y) < n {
		panic(errShortY)
	}
	if n == 0 {
		return
	}
	if beta == 0 {
		beta = 0
	}
	if k == 0 {
		scaleGo(beta, y[:n])
		return
	}
	gemvTKernel(k, n, w, ldw, x, beta, y)
}

// LSTMGates finishes one LSTM row of n units. y and bias hold the gate
// pre-activations and biases in four blocks i, f, g, o, the block of gate
// q starting at q*stride (stride >= n); c [n] is updated in place and h
// [n] receives the output:
//
//	c = σ(y_f+b_f)⊙c + σ(y_i+b_i)⊙tanh(y_g+b_g),  h = σ(y_o+b_o)⊙tanh(c)
func LSTMGates(n, stride int, y, bias, c, h []float32) {
	if n <= 0 {
		return
	}
	if stride < n || len(y) < 3*stride+n || len(bias) < 3*stride+n || len(c) < n || len(h) < n {
		panic(errShortGat)
	}
	lstmKernel(n, stride, y, bias, c, h)
}

// LSTMStep runs one LSTM time step of one batch row of n units: xp [4n]
// becomes xp + W·h, W [4n][k] (row stride ldw) gate-major (row q*n+j
// feeds gate q of unit j), and then LSTMGates(n, n, xp, bias, c, hout).
// The results are GemmNT's and LSTMGates' bit for bit. With n and k
// multiples of eight one assembly loop does both, eight units at a time,
// so that one group's gates are computed while the next group's rows of
// W are read; at hidden 64 the step is about as much gate arithmetic as
// reading W from L2. hout must not overlap h.
func LSTMStep(n, k int, h, w []float32, ldw int, xp, bias, c, hout []float32) {
	lstmStep(n, k, h, w, ldw, xp, bias, c, hout, false)
}

// LSTMStepReverse is LSTMStep with the same results, bit for bit, but
// the units taken from the last chunk of StepChunk to the first. W is
// then read backwards, chunk by chunk, so a step that follows a forward
// one starts on the rows the forward step read last, which are still in
// the cache when W is a little larger than it: alternating the two, a
// 1 MiB W (hidden 256) is read at 100-103 GB/s against 94-97 from one
// core's 1 MiB L2, and 1.6 MiB at 96-97 against 87-88 (GemmNT by chunks
// of 128 rows, 2026-11-26).
func LSTMStepReverse(n, k int, h, w []float32, ldw int, xp, bias, c, hout []float32) {
	lstmStep(n, k, h, w, ldw, xp, bias, c, hout, true)
}

// StepChunk is the units LSTMStepReverse takes at a time, in order: 32
// units are 128 rows of W, 128 KiB at k = 256.
const StepChunk = 32

// BackChunks calls f for [0, n) in chunks of size from the last: [n-size,
// n), then the one before, down to [0, ...): the order the reversed
// kernels (LSTMStepReverse, LSTMStepPackedReverse) take their units in,
// StepChunk at a time, and so the order a step that calls them declares
// it reads W in.
func BackChunks(n, size int, f func(lo, hi int)) {
	for hi := n; hi > 0; hi -= size {
		f(max(hi-size, 0), hi)
	}
}

// reverseStep is the reversed LSTM step of n units chunk by chunk:
// product(r, m) adds m rows of W·h, from row r, to xp[r:], for each
// gate's rows of the chunk; then the chunk's gates.
func reverseStep(n int, xp, bias, c, hout []float32, product func(r, m int)) {
	BackChunks(n, StepChunk, func(lo, hi int) {
		for g := range 4 {
			product(g*n+lo, hi-lo)
		}
		lstmKernel(hi-lo, n, xp[lo:], bias[lo:], c[lo:], hout[lo:])
	})
}

func lstmStep(n, k int, h, w []float32, ldw int, xp, bias, c, hout []float32, reverse bool) {
	if n <= 0 {
		return
	}
	checkMat(w, 4*n, k, ldw, errShortW)
	if len(h) < k || len(xp) < 4*n || len(bias) < 4*n || len(c) < n || len(hout) < n {
		panic(errShortGat)
	}
	if !reverse {
		streamRows(w, 0, 4*n, ldw, k)
	}
	if lstmStepKernel(n, k, h, w, ldw, xp, bias, c, hout, reverse) {
		return
	}
	if !reverse {
		GemmNT(1, 4*n, k, h, max(k, 1), w, ldw, 1, xp, 4*n)
		lstmKernel(n, n, xp, bias, c, hout)
		return
	}
	reverseStep(n, xp, bias, c, hout, func(r, m int) {
		streamRows(w, r, m, ldw, k)
		GemmNT(1, m, k, h, max(k, 1), w[r*ldw:], ldw, 1, xp[r:], m)
	})
}

// streamRows reports rows [r, r+m) of W (rows ld apart, k long) to
// invariants.Stream: the kernels that read W in chunks report each chunk
// as they take it, and the forward steps W whole, so that the region
// checker can hold the order their steps declare to the order they read.
// It compiles away without the invariants build tag.
func streamRows(w []float32, r, m, ld, k int) {
	if invariants.Enabled && m > 0 && k > 0 {
		invariants.Stream(unsafe.Pointer(&w[r*ld]), 4*((m-1)*ld+k))
	}
}

// LSTMStepPacked is LSTMStep for a W packed by PackNT(p, 4n, k, ...),
// with the same results. It runs GemmNTPacked and then the gates: fused
// into one loop, the four gate blocks of a packed W are four streams
// where GemmNTPacked reads one, which measured 0.88-0.98 of the two
// calls at hidden 1024 (P, one core, 2026-11-26).
func LSTMStepPacked(n, k int, h, p []float32, xp, bias, c, hout []float32) {
	lstmStepPacked(n, k, h, p, xp, bias, c, hout, false)
}

// LSTMStepPackedReverse is LSTMStepPacked with the units taken in chunks
// of StepChunk from the last, as LSTMStepReverse takes them: the same
// results. A chunk's rows of each gate are whole panels of the packed W
// only when n is a multiple of 8, so it panics otherwise.
func LSTMStepPackedReverse(n, k int, h, p []float32, xp, bias, c, hout []float32) {
	if n%8 != 0 {
		panic(errPanels)
	}
	lstmStepPacked(n, k, h, p, xp, bias, c, hout, true)
}

func lstmStepPacked(n, k int, h, p []float32, xp, bias, c, hout []float32, reverse bool) {
	if n <= 0 {
		return
	}
	if len(h) < k || len(xp) < 4*n || len(bias) < 4*n || len(c) < n || len(hout) < n {
		panic(errShortGat)
	}
	if !reverse {
		streamRows(p, 0, 4*n, k, k)
		GemmNTPacked(1, 4*n, k, h, max(k, 1), p, 1, xp, 4*n)
		lstmKernel(n, n, xp, bias, c, hout)
		return
	}
	if len(p) < 4*n*k {
		panic(errShortW)
	}
	reverseStep(n, xp, bias, c, hout, func(r, m int) {
		streamRows(p, r, m, k, k)
		GemmNTPacked(1, m, k, h, max(k, 1), p[r*k:], 1, xp[r:], m)
	})
}

// GRUGates finishes one GRU row of n units. x (W_ih x), p (W_hh h), bih
// and bhh hold three blocks r, z, n, the block of gate q starting at
// q*stride; hprev [n] is h_{t-1} and hout [n] receives h_t (they may be
// the same slice):
//
//	r = σ(x_r+b_ir+p_r+b_hr), z = σ(x_z+b_iz+p_z+b_hz)
//	n = tanh(x_n+b_in + r⊙(p_n+b_hn)),  hout = (1-z)⊙n + z⊙hprev
func GRUGates(n, stride int, x, p, bih, bhh, hprev, hout []float32) {
	if n <= 0 {
		return
	}
	if stride < n || len(x) < 2*stride+n || len(p) < 2*stride+n || len(bih) < 2*stride+n ||
		len(bhh) < 2*stride+n || len(hprev) < n || len(hout) < n {
		panic(errShortGat)
	}
	gruKernel(n, stride, x, p, bih, bhh, hprev, hout)
}

// Sum returns Σ x[i]. The assembly keeps eight partial sums and does
// nothing but load and add, so timing it over a buffer measures the read
// bandwidth of the level the buffer lives in (cmd/roofline).
func Sum(x []float32) float32 { return sumKernel(x) }

// Finite reports whether every value of x is finite (no infinity, no
// NaN). It reads x once, in AVX2 where the CPU has it: the inputs a
// request brings are checked with it before a plan runs.
func Finite(x []float32) bool { return finiteKernel(x) }

// ToBF16 stores src as bf16 in dst, rounding to nearest even; NaNs stay
// NaNs.
func ToBF16(dst []uint16, src []float32) {
	if len(dst) < len(src) {
		panic(errShortDst)
	}
	for i, v := range src {
		dst[i] = bf16Round(v)
	}
}

func bf16Round(v float32) uint16 {
	b := math.Float32bits(v)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40 // quiet NaN
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// bf16 widens one bf16 value to float32, exactly.
func bf16(v uint16) float32 { return math.Float32frombits(uint32(v) << 16) }

// FromBF16 widens src to float32 in dst, exactly.
func FromBF16(dst []float32, src []uint16) {
	if len(dst) < len(src) {
		panic(errShortDst)
	}
	n8 := bf16Kernel(dst, src)
	for i, v := range src[n8:] {
		dst[n8+i] = bf16(v)
	}
}

// bfPanel is the number of bf16 W rows GemmNTBF16 widens at a time when A
// has more than bfDirect rows.
const (
	bfPanel  = 8
	bfDirect = 4
)

// GemmNTBF16 is GemmNT with W stored as bf16 (leading dimension ldw, in
// elements), computed in float32. Up to bfDirect rows of A it streams W
// once per pair of rows, widening in registers; with more it widens
// panels of 8 rows × kc columns into a float32 scratch in L1 and runs the
// float32 kernels on them. Where the CPU has AVX512_BF16, its dot
// products take every row count (bf16dp_amd64.go).
func GemmNTBF16(m, n, k int, a []float32, lda int, w []uint16, ldw int, beta float32, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(errNegative)
	}
	checkMat(a, m, k, lda, errShortA)
	if ldw < max(k, 1) {
		panic(errLd)
	}
	if n > 0 && k > 0 && len(w) < (n-1)*ldw+k {
		panic(errShortW)
	}
	checkMat(c, m, n, ldc, errShortC)
	if m == 0 || n == 0 {
		return
	}
	if beta == 0 {
		beta = 0
	}
	if k == 0 {
		for i := 0; i < m; i++ {
			scaleGo(beta, c[i*ldc:i*ldc+n])
		}
		return
	}
	if m <= bfDirect || useDPBF16 {
		gemmBF16Kernel(m, n, k, a, lda, w, ldw, beta, c, ldc)
		return
	}
	var panel [bfPanel * kc]float32
	for p0 := 0; p0 < k; p0 += kc {
		kb := min(kc, k-p0)
		b := beta
		if p0 > 0 {
			b = 1
		}
		for j0 := 0; j0 < n; j0 += bfPanel {
			nb := min(bfPanel, n-j0)
			for r := 0; r < nb; r++ {
				FromBF16(panel[r*kb:(r+1)*kb], w[(j0+r)*ldw+p0:(j0+r)*ldw+p0+kb])
			}
			for i0 := 0; i0 < m; i0 += mc {
				mb := min(mc, m-i0)
				gemmNTKernel(mb, nb, kb, a[i0*lda+p0:], lda, panel[:], kb, b, c[i0*ldc+j0:], ldc, false)
			}
		}
	}
}
