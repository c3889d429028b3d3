//go:build !purego

package f32

import "golang.org/x/sys/cpu"

// What this CPU offers the kernels, read once: AVX2 and FMA; AVX-512 (F,
// BW, DQ, VL, with BMI2 for the tail masks) unless the build has the tag
// noavx512; and AVX512_BF16's dot products.
var (
	hostAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasFMA
	hostAVX512 = hostAVX2 && !noAVX512 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW &&
		cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL && cpu.X86.HasBMI2
	hostBF16 = hostAVX512 && cpu.X86.HasAVX512BF16
)

// useAsm selects the AVX2+FMA assembly; useAVX512 the AVX-512 gates and
// LSTM step, useZProducts the AVX-512 packed products (avx512_amd64.go);
// useDPBF16 the AVX512_BF16 kernels of GemmNTBF16. They start at what the
// host runs best (setDefault); tests change them (setLevel) to run every
// path in one binary.
var (
	useAsm       = hostAVX2
	useAVX512    = hostAVX512
	useZProducts = hostAVX512 && wide512
	useDPBF16    = hostBF16
)

//go:noescape
func gemmNT1x8(n, k int, a, w *float32, ldw int, c *float32, beta float32)

//go:noescape
func gemmNT2x4(n, k int, a *float32, lda int, w *float32, ldw int, c *float32, ldc int, beta float32)

//go:noescape
func gemmNT4x3(n, k, rows int, a *float32, lda int, w *float32, ldw int, c *float32, ldc int, beta float32)

//go:noescape
func gemvTAVX2(k, n int, w *float32, ldw int, x *float32, y *float32, beta float32)

//go:noescape
func lstmAVX2(n int, stride int, y *float32, bias *float32, c *float32, h *float32)

//go:noescape
func lstmStepAVX2(n, k int, h, w *float32, ldw int, xp, bias, c, hout *float32, lo, hi int)

//go:noescape
func gruAVX2(n int, stride int, x *float32, p *float32, bih *float32, bhh *float32, hprev *float32, hout *float32)

//go:noescape
func sigmoidAVX2(n int, x *float32, y *float32)

//go:noescape
func tanhAVX2(n int, x *float32, y *float32)

//go:noescape
func gemvBF16x8(n, k16, rem2 int, a *float32, w *uint16, ldw int, c *float32, beta float32)

//go:noescape
func gemmBF16x2x4(n, k16, rem2 int, a *float32, lda int, w *uint16, ldw int, c *float32, ldc int, beta float32)

//go:noescape
func bf16ToF32AVX2(n int, src *uint16, dst *float32)

//go:noescape
func sumAVX2(x *float32, n int) float32

//go:noescape
func finiteAVX2(x *float32, n int) bool

// The kernels below take arguments already checked by the exported
// functions: sizes positive and slices long enough.

// gemmNTKernel runs groups of A rows past W: one row through the 1×8
// kernel, two through the 2×4, three or four through the 4×3. Rows of up
// to smallK columns go in pairs: there a 4×3 panel's fewer, longer
// dependency chains (twelve sums, each a chain of k/8 multiply-adds, then
// the horizontal sums) leave the out-of-order core too little to overlap;
// where the AVX-512 kernels run, rows of up to z38K columns go in threes
// through gemmNT3x8Y instead, whose twenty-four sums in the 32 registers
// AVX-512VL gives (256-bit operations, at full rate on Zen 4 too) take a
// whole panel of eight W rows and one REDUCE8 per row. Where the
// AVX-512 products are the default (wide512: 512-bit operations run
// whole), rows of up to z6K columns go through gemmNT6x8Z, two A rows
// to a 512-bit register, at twice the lanes a multiply-add: three pairs
// at a time, then the pairs left, and an odd last row alone through the
// 1×8 kernel.
// With more than four rows W goes in blocks of wBlock rows, each kept in
// cache while every group passes it. When W is large enough to come from
// DRAM, or the caller says it is read once (GemmNTOnce), and there are
// few rows (pulls), the first row goes through the 1×8
// kernel on its own, block by block: its eight row streams pull the block
// in at the GEMV's rate, where a 4×3 panel's three streams reach about
// two thirds of it, and the other rows then find the block in cache.
// All the kernels compute an element the same way, so the grouping does
// not change a bit.
func gemmNTKernel(m, n, k int, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int, once bool) {
	if !useAsm {
		gemmNTGo(m, n, k, a, lda, w, ldw, beta, c, ldc)
		return
	}
	nb, group, first := n, 4, 0
	if m > 4 {
		nb = wBlock(k)
	}
	if k <= smallK && m != 3 {
		group = 2
	}
	if pulls(m, n, k, once) {
		nb, first = wBlock(k), 1
	}
	z38 := useAVX512 && k > 0 && k <= z38K && k%8 == 0 && m-first >= 3
	if z38 {
		group = 3
	}
	z6 := useZProducts && k > 0 && k <= z6K && k%8 == 0
	for j0 := 0; j0 < n; j0 += nb {
		jb := min(nb, n-j0)
		wj := &w[j0*ldw]
		if first == 1 {
			gemmNT1x8(jb, k, &a[0], wj, ldw, &c[j0], beta)
		}
		for i0, rows := first, 0; i0 < m; i0 += rows {
			if left := m - i0; z6 && left >= 2 {
				rows = zRows(left)
				jz := jb &^ 7
				if jz > 0 {
					gemmNT6x8Z(jz/8, k/8, &a[i0*lda], lda, wj, ldw, &c[i0*ldc+j0], ldc, beta, rows/2)
				}
				if jz < jb {
					gemmNT4x3(jb-jz, k, min(rows, 3), &a[i0*lda], lda, &w[(j0+jz)*ldw], ldw, &c[i0*ldc+j0+jz], ldc, beta)
					if rows > 3 {
						gemmNT4x3(jb-jz, k, rows-3, &a[(i0+3)*lda], lda, &w[(j0+jz)*ldw], ldw, &c[(i0+3)*ldc+j0+jz], ldc, beta)
					}
				}
				continue
			}
			rows = min(group, m-i0)
			if z38 && rows == 3 && m-i0 == 4 && k > smallK {
				rows = 4 // one 4×3 pass, not three rows and one alone
			}
			ai, ci := &a[i0*lda], &c[i0*ldc+j0]
			switch rows {
			case 1:
				gemmNT1x8(jb, k, ai, wj, ldw, ci, beta)
			case 2:
				gemmNT2x4(jb, k, ai, lda, wj, ldw, ci, ldc, beta)
			case 3:
				if z38 {
					jz := jb &^ 7
					if jz > 0 {
						gemmNT3x8Y(jz/8, k/8, ai, lda, wj, ldw, ci, ldc, beta)
					}
					if jz < jb {
						gemmNT4x3(jb-jz, k, 3, ai, lda, &w[(j0+jz)*ldw], ldw, &c[i0*ldc+j0+jz], ldc, beta)
					}
					break
				}
				fallthrough
			default:
				gemmNT4x3(jb, k, rows, ai, lda, wj, ldw, ci, ldc, beta)
			}
		}
	}
}

// zRows is the rows of the next gemmNT6x8Z call when left rows (two or
// more) remain: six, or the pairs left, so that at most one row goes
// alone through the 1×8 kernel.
func zRows(left int) int { return min(6, left&^1) }

// z6K is the longest row GemmNT takes A rows in sixes through gemmNT6x8Z
// for (k a multiple of 8, where the AVX-512 products run). On AMD Zen 5
// (48 KiB L1d) it gained over the eight-lane kernels with 8 to 64 rows
// at every k up to 1024 (BenchmarkGemmAccumulate, 2026-11-27-ab-wide-2137
// in docs/data/figures.csv: 1.50-1.70x at 192 and 512, 1.10-1.47x at
// 1024, where six A rows and a panel of W, 56 KiB, no longer fit L1);
// longer rows are not measured.
const z6K = 1024

// smallK is the longest row GemmNT takes A rows in pairs for.
const smallK = 128

// z38K is the longest row GemmNT takes A rows in threes through
// gemmNT3x8Y for (k a multiple of 8). On AMD EPYC Zen 4 it gained
// 1.08-1.10x at k = 64 over the pairs, and at k = 192 (bytelm's batched
// steps) 1.00-1.18x over the 4×3 panels from 3 to 64 rows, where a last
// row alone (4, 7, ... rows) goes with the three before it through one
// 4×3 pass rather than through the 1×8 kernel, which reads W once more
// for it (0.81x at 4 rows); at 384-512 columns it gained with 23 or 64
// rows and lost with 8, and at k = 1024, where its eight W rows no longer
// stay in L1 beside the three A rows, 0.80x.
const z38K = 256

func gemvTKernel(k, n int, w []float32, ldw int, x []float32, beta float32, y []float32) {
	if !useAsm {
		gemvTGo(k, n, w, ldw, x, beta, y)
		return
	}
	gemvTAVX2(k, n, &w[0], ldw, &x[0], &y[0], beta)
}

// lstmKernel handles the first n&^15 units sixteen at a time (AVX-512),
// then the next eight (AVX2), the rest in Go: every unit the same way.
func lstmKernel(n, stride int, y, bias, c, h []float32) {
	from := 0
	if n16 := n &^ 15; useAVX512 && n16 > 0 {
		lstmAVX512(n16, stride, &y[0], &bias[0], &c[0], &h[0])
		from = n16
	}
	if n8 := n &^ 7; useAsm && n8 > from {
		lstmAVX2(n8-from, stride, &y[from], &bias[from], &c[from], &h[from])
		from = n8
	}
	lstmGo(from, n, stride, y, bias, c, h)
}

// lstmStepKernel runs LSTMStep in one assembly call when n and k are
// multiples of eight, and reports whether it did.
func lstmStepKernel(n, k int, h, w []float32, ldw int, xp, bias, c, hout []float32, reverse bool) bool {
	if !useAsm || n%8 != 0 || k%8 != 0 || k == 0 {
		return false
	}
	step := func(lo, hi int) {
		if useAVX512 {
			h16 := lo + (hi-lo)&^15
			if h16 > lo {
				lstmStepZ(n, k, &h[0], &w[0], ldw, &xp[0], &bias[0], &c[0], &hout[0], lo, h16)
			}
			lo = h16
		}
		if lo < hi {
			lstmStepAVX2(n, k, &h[0], &w[0], ldw, &xp[0], &bias[0], &c[0], &hout[0], lo, hi)
		}
	}
	if !reverse {
		step(0, n)
		return true
	}
	BackChunks(n, StepChunk, func(lo, hi int) {
		for g := range 4 {
			streamRows(w, g*n+lo, hi-lo, ldw, k)
		}
		step(lo, hi)
	})
	return true
}

func gruKernel(n, stride int, x, p, bih, bhh, hprev, hout []float32) {
	from := 0
	if n16 := n &^ 15; useAVX512 && n16 > 0 {
		gruAVX512(n16, stride, &x[0], &p[0], &bih[0], &bhh[0], &hprev[0], &hout[0])
		from = n16
	}
	if n8 := n &^ 7; useAsm && n8 > from {
		gruAVX2(n8-from, stride, &x[from], &p[from], &bih[from], &bhh[from], &hprev[from], &hout[from])
		from = n8
	}
	gruGo(from, n, stride, x, p, bih, bhh, hprev, hout)
}

// sigmoidVec and tanhVec do the first len(src)&^7 values and return how
// many they did.
func sigmoidVec(dst, src []float32) int {
	n8 := len(src) &^ 7
	if !useAsm || n8 == 0 {
		return 0
	}
	sigmoidAVX2(n8, &src[0], &dst[0])
	return n8
}

func tanhVec(dst, src []float32) int {
	n8 := len(src) &^ 7
	if !useAsm || n8 == 0 {
		return 0
	}
	tanhAVX2(n8, &src[0], &dst[0])
	return n8
}

// gemmBF16Kernel runs rows in pairs through the 2×4 assembly kernel and a
// last odd row through the 1×8, over the first k&^1 columns; a last odd
// column is added in Go.
func gemmBF16Kernel(m, n, k int, a []float32, lda int, w []uint16, ldw int, beta float32, c []float32, ldc int) {
	if useAsm && useDPBF16 {
		gemmBF16DP(m, n, k, a, lda, w, ldw, beta, c, ldc)
		return
	}
	k2 := k &^ 1
	if !useAsm || k2 == 0 {
		gemmBF16Go(m, n, k, a, lda, w, ldw, beta, c, ldc)
		return
	}
	k16 := k &^ 15
	for i0 := 0; i0 < m; i0 += 2 {
		if m-i0 == 1 {
			gemvBF16x8(n, k16, k2-k16, &a[i0*lda], &w[0], ldw, &c[i0*ldc], beta)
		} else {
			gemmBF16x2x4(n, k16, k2-k16, &a[i0*lda], lda, &w[0], ldw, &c[i0*ldc], ldc, beta)
		}
	}
	if k2 < k {
		gemmBF16Go(m, n, 1, a[k2:], lda, w[k2:], ldw, 1, c, ldc)
	}
}

func bf16Kernel(dst []float32, src []uint16) int {
	n8 := len(src) &^ 7
	if !useAsm || n8 == 0 {
		return 0
	}
	bf16ToF32AVX2(n8, &src[0], &dst[0])
	return n8
}

func sumKernel(x []float32) float32 {
	n64 := len(x) &^ 63
	if !useAsm || n64 == 0 {
		return sumGo(x)
	}
	return sumAVX2(&x[0], n64) + sumGo(x[n64:])
}

// finiteKernel checks the first len(x)&^31 values in assembly, the rest
// in Go.
func finiteKernel(x []float32) bool {
	n32 := len(x) &^ 31
	if !useAsm || n32 == 0 {
		return finiteGo(x)
	}
	return finiteAVX2(&x[0], n32) && finiteGo(x[n32:])
}

func implName() string {
	s := "avx2+fma"
	switch {
	case useZProducts:
		s = "avx512"
	case useAVX512:
		s += "+avx512gates"
	case !useAsm:
		return "go"
	}
	if useDPBF16 {
		s += "+avx512bf16"
	}
	return s
}

//go:noescape
func treeLeafAVX2(n int, stride int, y *float32, bias *float32, c *float32, h *float32)

//go:noescape
func treeInnerAVX2(n int, stride int, y *float32, bias *float32, cl *float32, cr *float32, c *float32, h *float32)

// treeLeafKernel and treeInnerKernel run the first n&^7 units through the
// assembly in place and the last n%8 through it too, copied into eight
// lanes of zeros on the stack: every unit of a row is computed the same
// way (a Binary TreeLSTM of hidden 150 has six such units per gate).
func treeLeafKernel(n, stride int, y, bias, c, h []float32) {
	if !useAsm {
		treeLeafGo(0, n, stride, y, bias, c, h)
		return
	}
	n8 := n &^ 7
	if n8 > 0 {
		treeLeafAVX2(n8, stride, &y[0], &bias[0], &c[0], &h[0])
	}
	if n8 == n {
		return
	}
	var ty, tb [3 * 8]float32
	var tc, th [8]float32
	for q := 0; q < 3; q++ {
		copy(ty[q*8:], y[q*stride+n8:q*stride+n])
		copy(tb[q*8:], bias[q*stride+n8:q*stride+n])
	}
	treeLeafAVX2(8, 8, &ty[0], &tb[0], &tc[0], &th[0])
	copy(c[n8:n], tc[:])
	copy(h[n8:n], th[:])
}

func treeInnerKernel(n, stride int, y, bias, cl, cr, c, h []float32) {
	if !useAsm {
		treeInnerGo(0, n, stride, y, bias, cl, cr, c, h)
		return
	}
	n8 := n &^ 7
	if n8 > 0 {
		treeInnerAVX2(n8, stride, &y[0], &bias[0], &cl[0], &cr[0], &c[0], &h[0])
	}
	if n8 == n {
		return
	}
	var ty, tb [5 * 8]float32
	var tl, tr, tc, th [8]float32
	for q := 0; q < 5; q++ {
		copy(ty[q*8:], y[q*stride+n8:q*stride+n])
		copy(tb[q*8:], bias[q*stride+n8:q*stride+n])
	}
	copy(tl[:], cl[n8:n])
	copy(tr[:], cr[n8:n])
	treeInnerAVX2(8, 8, &ty[0], &tb[0], &tl[0], &tr[0], &tc[0], &th[0])
	copy(c[n8:n], tc[:])
	copy(h[n8:n], th[:])
}

//go:noescape
func gemvPacked8(panels, k int, a, w, c *float32, beta float32)

//go:noescape
func gemmPacked3x4(panels, k8, rows int, a *float32, lda int, w, c *float32, ldc int, beta float32, pf *float32, pfStep int)

// gemmPackedAsm runs the whole panels of a packed W (n a multiple of
// eight) past A. One row streams W through gemvPacked (gemvPacked8 or,
// with AVX-512, gemvPackedZ); two go through gemmPacked3 together. With
// more rows W goes in blocks of blocking.packBlock bytes that every group
// of three (or two) rows passes while L2 holds it. The first row pulls
// the first block in as one stream (gemvPacked). With prefetchRows to
// pullRows rows and a W larger than blocking.once, which does not stay
// in L2 from one inference to the next and so comes from L3 or DRAM (an
// input projection at T = 10, hidden 256 and up), the groups working on
// a block prefetch the next one between them, so that it streams in
// while the arithmetic runs rather than before it (AVX2 products on
// AMD's Zen 4, from DRAM, hidden 1024: 1.06x; from L3 or DRAM at hidden
// 256: 1.16x). Otherwise the first row pulls every block: with more rows
// each block is reused often enough that how it arrives matters little
// (prefetching at 64 to 100 rows measured 0.98-1.03x), with fewer the
// few groups' prefetches cost more than they save; and with the AVX-512
// products (a host that runs them whole, AMD's Zen 5), where the pull
// was 1.06-1.15x faster than the groups' prefetch on W from L3 or DRAM
// (10 and 16 rows, hidden 256 and 1024) and P at T = 10 on one core
// 1.01-1.10x (docs/performance.md, "Products whose W is read once"),
// unless near says W lies in a cache: from L3 the pull is one more pass
// for nothing, and the groups take every row (GemmNTPackedNear), as long
// as a panel and a group's rows meet in L1 (blocking.nearK).
// gemmPacked3 takes no column tail, so with k%8 != 0 every row goes
// through gemvPacked on its own (the schedules pack no such W).
func gemmPackedAsm(m, n, k int, a []float32, lda int, p []float32, beta float32, c []float32, ldc int, near bool) {
	if m == 1 {
		gemvPacked(n/8, k, &a[0], &p[0], &c[0], beta)
		return
	}
	if k%8 != 0 {
		for i := 0; i < m; i++ {
			gemvPacked(n/8, k, &a[i*lda], &p[0], &c[i*ldc], beta)
		}
		return
	}
	if m == 2 {
		gemmPacked3(n/8, k/8, 2, &a[0], lda, &p[0], &c[0], ldc, beta, &p[0], 0)
		return
	}
	b := blocks()
	nb := max(8, b.packBlock/(4*k)&^7)
	prefetch := !useZProducts && m >= prefetchRows && m <= pullRows && 4*n*k > b.once
	panels := useZProducts && k >= b.panelK && k <= b.nearK // panel by panel, given panelRows rows
	for j0 := 0; j0 < n; j0 += nb {
		jb := min(nb, n-j0)
		w := &p[j0*k]
		first := 0
		if (j0 == 0 || !prefetch) && !(near && useZProducts && k <= b.nearK) {
			gemvPacked(jb/8, k, &a[0], w, &c[j0], beta)
			first = 1
		}
		switch {
		case panels && m-first >= panelRows:
			// Every group takes a panel before any takes the next.
			for q := 0; q < jb; q += 8 {
				passGroups(1, k, first, m, a, lda, &p[(j0+q)*k], c[j0+q:], ldc, beta)
			}
			continue
		case !prefetch:
			passGroups(jb/8, k, first, m, a, lda, w, c[j0:], ldc, beta)
			continue
		}
		// The next block, from float next on, a share of it for each group.
		next, left, share := 0, 0, 0
		if j0+jb < n {
			next, left = (j0+jb)*k, min(nb, n-j0-jb)*k
			share = (left + groups(m-first) - 1) / groups(m-first)
		}
		for i0 := first; i0 < m; {
			rows := groupRows(m - i0)
			if rows == 1 {
				gemvPacked(jb/8, k, &a[i0*lda], w, &c[i0*ldc+j0], beta)
			} else {
				pf, pfn := w, min(share, left)
				if pfn > 0 {
					pf = &p[next]
				}
				gemmPacked3(jb/8, k/8, rows, &a[i0*lda], lda, w, &c[i0*ldc+j0], ldc, beta, pf, 4*pfn)
				next, left = next+pfn, left-pfn
			}
			i0 += rows
		}
	}
}

// passGroups runs rows [first, m) of A past the given panels of a packed
// W (from w; C from c's first column) in groups of three, a last single
// row through gemvPacked, prefetching nothing. gemmPackedAsm passes a
// whole block to each group in turn or, where a panel fits L1 beside a
// group's rows and there are many rows, one panel to every group before
// the next: then the panel stays in L1 while the groups pass it, where
// the whole block is held in L2. With the AVX-512 products (AMD's Zen 5,
// one core, 48 KiB L1d) at rows of 1024 (a 32 KiB panel) panel by panel
// ran 1.09x faster with 64 rows of A, 1.13x with 100 and 1.03x with 16
// (BenchmarkGemmPacked, docs/data/host-tuning.md); in probes, the same
// (0.99x) at rows of 256 and 512, and slower where a panel no longer
// fits L1 beside a group's rows (rows of 1536: 0.90x) or is so short
// that a call a panel costs more than it saves (rows of 64: 0.94x). So
// it runs for rows from blocking.panelK to blocking.nearK with at least
// panelRows rows. Either way each element is summed by the same kernel
// in the same order: the results are the same bit for bit.
func passGroups(panels, k, first, m int, a []float32, lda int, w *float32, c []float32, ldc int, beta float32) {
	for i0 := first; i0 < m; {
		rows := min(3, m-i0)
		if rows == 1 {
			gemvPacked(panels, k, &a[i0*lda], w, &c[i0*ldc], beta)
		} else {
			gemmPacked3(panels, k/8, rows, &a[i0*lda], lda, w, &c[i0*ldc], ldc, beta, w, 0)
		}
		i0 += rows
	}
}

// panelRows is the fewest rows of A gemmPackedAsm takes panel by panel
// (passGroups).
const panelRows = 16

// prefetchRows is the fewest rows for which gemmPackedAsm's groups
// prefetch the next block rather than the first row pulling it.
const prefetchRows = 8

// groupRows is the rows of the next prefetching group when r rows are
// left: three, but two when one would be left over (the last two groups
// of 3k+1 rows are two and two), so that every group prefetches.
func groupRows(r int) int {
	if r == 4 || r == 2 {
		return 2
	}
	return min(r, 3)
}

// groups is the number of groups groupRows makes of r rows.
func groups(r int) int {
	g := 0
	for r > 0 {
		r -= groupRows(r)
		g++
	}
	return g
}
