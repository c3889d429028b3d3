package f32

// Packed W: the rows of a W [n][k] reordered so that a GEMV reads it as one
// sequential stream. GemmNT's 1×8 kernel reads eight rows at once, eight
// streams k floats apart; the hardware prefetchers follow each, but at
// hidden 1024 (rows of 4 KiB) the eight streams bring W from L3 or DRAM at
// 0.75-0.85 of a sequential read of the same bytes, and W_hh is read once
// per step. Packed, every 256 bytes the kernel reads are the next 256.
//
// The layout (PackNT), for W's rows in panels of eight and t = k%8:
//
//	panel q (rows 8q..8q+7), 8k floats from 8q·k:
//	  for each whole chunk c < k/8: the eight rows' columns 8c..8c+7,
//	    row by row (64 floats)
//	  then the eight rows' last t columns, row by row (8t floats)
//	rows from 8·(n/8) on (the last n%8): row-major, k floats each
//
// so the packed W has exactly n·k floats, and row j's elements are where
// GemmNT's kernels would read them in the same order: the products have
// GemmNT's bits.

// PackNT writes W [n][k] (leading dimension ldw) into dst in the packed
// order above; dst must hold n·k floats.
func PackNT(dst []float32, n, k int, w []float32, ldw int) {
	if n < 0 || k < 0 {
		panic(errNegative)
	}
	checkMat(w, n, k, ldw, errShortW)
	if len(dst) < n*k {
		panic(errShortDst)
	}
	full, t := n&^7, k&7
	for q := 0; q < full; q += 8 {
		p := dst[q*k : (q+8)*k]
		for c := 0; c+8 <= k; c += 8 {
			for r := 0; r < 8; r++ {
				copy(p[8*c+8*r:8*c+8*r+8], w[(q+r)*ldw+c:])
			}
		}
		tail := p[8*(k-t):]
		for r := 0; r < 8; r++ {
			copy(tail[r*t:(r+1)*t], w[(q+r)*ldw+k-t:])
		}
	}
	for j := full; j < n; j++ {
		copy(dst[j*k:(j+1)*k], w[j*ldw:j*ldw+k])
	}
}

// UnpackRow copies row j of a packed W [n][k] into dst (k floats).
func UnpackRow(dst []float32, n, k int, p []float32, j int) {
	if j < 0 || j >= n || len(dst) < k || len(p) < n*k {
		panic(errShortDst)
	}
	if j >= n&^7 {
		copy(dst[:k], p[j*k:])
		return
	}
	q, r, t := j&^7, j&7, k&7
	base := p[q*k : (q+8)*k]
	for c := 0; c+8 <= k; c += 8 {
		copy(dst[c:c+8], base[8*c+8*r:])
	}
	copy(dst[k-t:k], base[8*(k-t)+r*t:])
}

// GemmNTPacked is GemmNT with W [n][k] in PackNT's order: C = A·Wᵀ +
// beta·C for A [m][k] (lda) and C [m][n] (ldc), with GemmNT's results bit
// for bit. One row of A streams W once; more rows run each block of
// wBlock rows of W past every row of A while the block is in cache.
func GemmNTPacked(m, n, k int, a []float32, lda int, p []float32, beta float32, c []float32, ldc int) {
	gemmNTPacked(m, n, k, a, lda, p, beta, c, ldc, false)
}

// GemmNTPackedNear is GemmNTPacked for a W the caller knows to lie in a
// cache when the product starts (the whole model fits the last level
// cache), with the same results. Where the AVX-512 products run, every
// row then goes in groups: the first row does not pull each block in
// alone first, a pass that pays where W comes from DRAM (GemmNTPacked's
// 1.04-1.11x over groups straight from it at T = 10, hidden 512 and
// 1024) but not from L3 (1.01-1.05x without it at hidden 256 and 512;
// P on AMD's Zen 5, docs/performance.md, "Products whose W is read
// once"), as long as rows of A and W's panels are short enough to meet
// in L1 (blocking.nearK; longer ones ran 1.02-1.04x slower in groups,
// BenchmarkNearRows). Elsewhere it is GemmNTPacked.
func GemmNTPackedNear(m, n, k int, a []float32, lda int, p []float32, beta float32, c []float32, ldc int) {
	gemmNTPacked(m, n, k, a, lda, p, beta, c, ldc, true)
}

func gemmNTPacked(m, n, k int, a []float32, lda int, p []float32, beta float32, c []float32, ldc int, near bool) {
	if m < 0 || n < 0 || k < 0 {
		panic(errNegative)
	}
	checkMat(a, m, k, lda, errShortA)
	if len(p) < n*k {
		panic(errShortW)
	}
	checkMat(c, m, n, ldc, errShortC)
	if gemmTrivial(m, n, k, beta, c, ldc) {
		return
	}
	beta = plusZero(beta)
	full := n &^ 7
	if full > 0 {
		if useAsm {
			gemmPackedAsm(m, full, k, a, lda, p, beta, c, ldc, near)
		} else {
			gemmPackedGo(m, full, k, a, lda, p, beta, c, ldc)
		}
	}
	if full < n {
		gemmNTKernel(m, n-full, k, a, lda, p[full*k:], k, beta, c[full:], ldc, false)
	}
}

// gemmPackedGo is gemmNTGo over the whole panels of a packed W (n a
// multiple of eight), each row unpacked once.
func gemmPackedGo(m, n, k int, a []float32, lda int, p []float32, beta float32, c []float32, ldc int) {
	row := make([]float32, k)
	for j := 0; j < n; j++ {
		UnpackRow(row, n, k, p, j)
		gemmNTGo(m, 1, k, a, lda, row, k, beta, c[j:], ldc)
	}
}
