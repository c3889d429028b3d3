package f32

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

// impls runs f once per kernel path this host has (pure Go, AVX2 and
// FMA, AVX-512), restoring the host's afterwards.
func impls(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	defer setDefault()
	for _, l := range levels() {
		setLevel(l)
		t.Run(implName(), f)
	}
}

const sentinel = 12345.5

// guarded is a matrix of rows×cols with leading dimension ld inside a
// larger slice: off elements before it, gap elements after each row's cols
// (ld-cols) and guard elements after it all hold pad, so a kernel that
// reads them (pad = NaN poisons any sum) or writes them (pad = sentinel is
// checked afterwards) is caught.
type guarded struct {
	all                 []float32
	off, rows, cols, ld int
	guard               int
	pad                 float32
}

func newGuarded(r *rand.Rand, rows, cols, ld, off int, pad float32) *guarded {
	const guard = 19
	n := off + guard
	if rows > 0 {
		n += (rows-1)*ld + cols
	}
	g := &guarded{all: make([]float32, n), off: off, rows: rows, cols: cols, ld: ld, guard: guard, pad: pad}
	for i := range g.all {
		g.all[i] = pad
	}
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			g.all[off+i*ld+j] = float32(2*r.Float64() - 1)
		}
	}
	return g
}

// s is the slice the kernel gets: from the matrix's first element to its
// last (the guard after it is outside the slice, as a caller's next data
// would be).
func (g *guarded) s() []float32 { return g.all[g.off : len(g.all)-g.guard] }

func (g *guarded) at(i, j int) float32 { return g.all[g.off+i*g.ld+j] }

// checkPads fails if any element outside the matrix changed.
func (g *guarded) checkPads(t *testing.T, what string) {
	t.Helper()
	inside := func(idx int) bool {
		if idx < g.off {
			return false
		}
		idx -= g.off
		i, j := idx/g.ld, idx%g.ld
		return i < g.rows && j < g.cols
	}
	for idx, v := range g.all {
		if !inside(idx) && v != g.pad && !(math.IsNaN(float64(v)) && math.IsNaN(float64(g.pad))) {
			t.Fatalf("%s: element %d outside the matrix changed from %v to %v", what, idx, g.pad, v)
		}
	}
}

var nan = float32(math.NaN())

// sizes are the odd and round dimensions the kernel tests sweep.
var sizes = []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 129}

func TestGemmNT(t *testing.T) {
	impls(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 1))
		ms := []int{0, 1, 2, 3, 4, 5, 7, 130}
		for _, m := range ms {
			for _, n := range sizes {
				for _, k := range sizes {
					if m == 130 && (n > 17 || k < 63) {
						continue // the blocking over m needs m > 128; keep it cheap
					}
					testGemmNT(t, r, m, n, k)
				}
			}
		}
		// More than four rows with W beyond one block of wBlock rows, a
		// short last block, and long rows.
		testGemmNT(t, r, 6, wBlock(33)+13, 33)
		testGemmNT(t, r, 9, 2*wBlock(1000)+1, 1000)
		testGemmNT(t, r, 1, 6, 2*kc+3)
		// Six rows at a time (gemmNT6x8Z where the AVX-512 products run):
		// whole and short last panels, six to nineteen rows, k up to z6K,
		// bytelm's batched step (k = 192, n = 768).
		for _, m := range []int{6, 8, 10, 12, 13, 19} {
			for _, nk := range [][2]int{{8, 8}, {24, 64}, {31, 256}, {17, 136}, {9, 512}, {16, 1024}} {
				testGemmNT(t, r, m, nk[0], nk[1])
			}
		}
		testGemmNT(t, r, 64, 768, 192)
		if wBlock(64) < 24 || wBlock(64)%24 != 0 || wBlock(1<<20) != 24 || wBlock(1000)%24 != 0 {
			t.Errorf("wBlock: %d %d %d", wBlock(64), wBlock(1<<20), wBlock(1000))
		}
	})
}

func testGemmNT(t *testing.T, r *rand.Rand, m, n, k int) {
	t.Helper()
	off := r.IntN(8)
	lda, ldw, ldc := k+r.IntN(3), k+r.IntN(3), n+r.IntN(3)
	lda, ldw, ldc = max(lda, 1), max(ldw, 1), max(ldc, 1)
	beta := []float32{0, 1, -0.5, float32(math.Copysign(0, -1))}[r.IntN(4)]
	a := newGuarded(r, m, k, lda, off, nan)
	w := newGuarded(r, n, k, ldw, r.IntN(8), nan)
	c := newGuarded(r, m, n, ldc, r.IntN(8), sentinel)
	if beta == 0 {
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				c.all[c.off+i*ldc+j] = nan // beta == 0 must not read C
			}
		}
	}
	c0 := append([]float32(nil), c.all...)
	GemmNT(m, n, k, a.s(), lda, w.s(), ldw, beta, c.s(), ldc)
	name := fmt.Sprintf("m=%d n=%d k=%d lda=%d ldw=%d ldc=%d beta=%v", m, n, k, lda, ldw, ldc, beta)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var want, mag float64
			for p := 0; p < k; p++ {
				v := float64(a.at(i, p)) * float64(w.at(j, p))
				want += v
				mag += math.Abs(v)
			}
			if beta != 0 {
				old := float64(c0[c.off+i*ldc+j])
				want += float64(beta) * old
				mag += math.Abs(float64(beta) * old)
			}
			got := float64(c.at(i, j))
			if math.IsNaN(got) || math.Abs(got-want) > 1e-6*(mag+1) {
				t.Fatalf("%s: C[%d][%d] = %v, want %v", name, i, j, got, want)
			}
		}
	}
	c.checkPads(t, name)
}

func TestGemvN(t *testing.T) {
	impls(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(2, 2))
		for _, n := range sizes {
			for _, k := range sizes {
				for _, beta := range []float32{0, 1} {
					ldw := max(k+r.IntN(5), 1)
					w := newGuarded(r, n, k, ldw, r.IntN(8), nan)
					x := newGuarded(r, 1, k, max(k, 1), r.IntN(8), nan)
					y := newGuarded(r, 1, n, max(n, 1), r.IntN(8), sentinel)
					y0 := append([]float32(nil), y.all...)
					GemvN(n, k, w.s(), ldw, x.s(), beta, y.s())
					for i := 0; i < n; i++ {
						want := float64(beta) * float64(y0[y.off+i])
						for p := 0; p < k; p++ {
							want += float64(w.at(i, p)) * float64(x.at(0, p))
						}
						if got := float64(y.at(0, i)); math.Abs(got-want) > 1e-5 {
							t.Fatalf("n=%d k=%d beta=%v: y[%d] = %v, want %v", n, k, beta, i, got, want)
						}
					}
					y.checkPads(t, fmt.Sprintf("n=%d k=%d", n, k))
				}
			}
		}
	})
}

func TestGemvTAndGemmNN(t *testing.T) {
	impls(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 3))
		for _, m := range []int{0, 1, 3} {
			for _, n := range append(sizes, 72, 200) {
				for _, k := range sizes {
					beta := []float32{0, 1, 2}[r.IntN(3)]
					lda, ldw, ldc := max(k+r.IntN(3), 1), max(n+r.IntN(3), 1), max(n+r.IntN(3), 1)
					a := newGuarded(r, m, k, lda, r.IntN(8), nan)
					w := newGuarded(r, k, n, ldw, r.IntN(8), nan)
					c := newGuarded(r, m, n, ldc, r.IntN(8), sentinel)
					if beta == 0 {
						for i := 0; i < m; i++ {
							for j := 0; j < n; j++ {
								c.all[c.off+i*ldc+j] = nan
							}
						}
					}
					c0 := append([]float32(nil), c.all...)
					if m == 1 && r.IntN(2) == 0 {
						GemvT(k, n, w.s(), ldw, a.s(), beta, c.s())
					} else {
						GemmNN(m, n, k, a.s(), lda, w.s(), ldw, beta, c.s(), ldc)
					}
					name := fmt.Sprintf("m=%d n=%d k=%d beta=%v", m, n, k, beta)
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							var want float64
							if beta != 0 {
								want = float64(beta) * float64(c0[c.off+i*ldc+j])
							}
							for p := 0; p < k; p++ {
								want += float64(a.at(i, p)) * float64(w.at(p, j))
							}
							if got := float64(c.at(i, j)); math.IsNaN(got) || math.Abs(got-want) > 1e-5 {
								t.Fatalf("%s: C[%d][%d] = %v, want %v", name, i, j, got, want)
							}
						}
					}
					c.checkPads(t, name)
				}
			}
		}
	})
}

func sigmoid64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// TestApproximations bounds the error of Sigmoid and Tanh against float64
// over a dense sweep and the edges, and checks the vector forms agree.
func TestApproximations(t *testing.T) {
	var xs []float32
	for x := -30.0; x <= 30; x += 0.000731 {
		xs = append(xs, float32(x))
	}
	xs = append(xs, 0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, 1e-8, 0.625, -0.625,
		math.Nextafter32(0.625, 0), 87, -87, 88, -88, 100, -100, 1e6, -1e6, math.MaxFloat32, -math.MaxFloat32)
	var worstS, worstT, worstTRel float64
	for _, x := range xs {
		s, ts := float64(Sigmoid(x)), float64(Tanh(x))
		ws, wt := sigmoid64(float64(x)), math.Tanh(float64(x))
		worstS = max(worstS, math.Abs(s-ws))
		worstT = max(worstT, math.Abs(ts-wt))
		if wt != 0 {
			worstTRel = max(worstTRel, math.Abs(ts-wt)/math.Abs(wt))
		}
		if math.Signbit(ts) != math.Signbit(float64(x)) && ts != 0 {
			t.Fatalf("Tanh(%v) = %v has the wrong sign", x, ts)
		}
	}
	t.Logf("max |error|: sigmoid %.3g, tanh %.3g; max relative tanh error %.3g", worstS, worstT, worstTRel)
	if worstS > 3e-7 || worstT > 3e-7 || worstTRel > 5e-7 {
		t.Fatalf("approximation error too large: sigmoid %.3g, tanh %.3g (relative %.3g)", worstS, worstT, worstTRel)
	}
	impls(t, func(t *testing.T) {
		for _, off := range []int{0, 1, 3} {
			src := xs[off:]
			ds := make([]float32, len(src)+1)
			dt := make([]float32, len(src)+1)
			ds[len(src)], dt[len(src)] = sentinel, sentinel
			SigmoidTo(ds, src)
			TanhTo(dt, src)
			for i, x := range src {
				if d := math.Abs(float64(ds[i]) - sigmoid64(float64(x))); d > 3e-7 {
					t.Fatalf("SigmoidTo(%v) = %v, off by %.3g", x, ds[i], d)
				}
				if d := math.Abs(float64(dt[i]) - math.Tanh(float64(x))); d > 3e-7 {
					t.Fatalf("TanhTo(%v) = %v, off by %.3g", x, dt[i], d)
				}
			}
			if ds[len(src)] != sentinel || dt[len(src)] != sentinel {
				t.Fatal("vector sigmoid/tanh wrote past its destination")
			}
		}
	})
}

// TestGates checks the fused LSTM and GRU kernels against float64 versions
// of PyTorch's equations for many widths and strides, with guard bands
// around every output.
func TestGates(t *testing.T) {
	impls(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(4, 4))
		for _, n := range append(sizes[1:], 200, 1024) {
			stride := n + r.IntN(4)
			rnd := func(k int, scale float64) []float32 {
				v := make([]float32, k)
				for i := range v {
					v[i] = float32(scale * (2*r.Float64() - 1))
				}
				return v
			}
			// LSTM, pre-activations spread wide enough to saturate.
			y, bias := rnd(4*stride, 6), rnd(4*stride, 1)
			c := append(rnd(n, 2), sentinel, sentinel)
			h := append(make([]float32, n), sentinel, sentinel)
			cOld := append([]float32(nil), c...)
			LSTMGates(n, stride, y, bias, c[:n], h[:n])
			for j := 0; j < n; j++ {
				g := func(q int) float64 { return float64(y[q*stride+j]) + float64(bias[q*stride+j]) }
				cn := sigmoid64(g(1))*float64(cOld[j]) + sigmoid64(g(0))*math.Tanh(g(2))
				hn := sigmoid64(g(3)) * math.Tanh(cn)
				if math.Abs(float64(c[j])-cn) > 1e-6*max(1, math.Abs(cn)) || math.Abs(float64(h[j])-hn) > 1e-6 {
					t.Fatalf("LSTM n=%d unit %d: c=%v h=%v, want %v %v", n, j, c[j], h[j], cn, hn)
				}
			}
			if c[n] != sentinel || c[n+1] != sentinel || h[n] != sentinel || h[n+1] != sentinel {
				t.Fatalf("LSTM n=%d wrote past c or h", n)
			}
			// GRU, once with hout separate and once in place.
			x, p, bih, bhh := rnd(3*stride, 4), rnd(3*stride, 4), rnd(3*stride, 1), rnd(3*stride, 1)
			hprev := rnd(n, 1)
			for _, inPlace := range []bool{false, true} {
				out := append(make([]float32, n), sentinel)
				src := hprev
				if inPlace {
					copy(out, hprev)
					src = out[:n]
				}
				GRUGates(n, stride, x, p, bih, bhh, src, out[:n])
				for j := 0; j < n; j++ {
					g := func(a []float32, q int) float64 { return float64(a[q*stride+j]) }
					rr := sigmoid64(g(x, 0) + g(bih, 0) + g(p, 0) + g(bhh, 0))
					z := sigmoid64(g(x, 1) + g(bih, 1) + g(p, 1) + g(bhh, 1))
					nn := math.Tanh(g(x, 2) + g(bih, 2) + rr*(g(p, 2)+g(bhh, 2)))
					want := (1-z)*nn + z*float64(hprev[j])
					if math.Abs(float64(out[j])-want) > 1e-6 {
						t.Fatalf("GRU n=%d in place %v unit %d: %v, want %v", n, inPlace, j, out[j], want)
					}
				}
				if out[n] != sentinel {
					t.Fatalf("GRU n=%d wrote past hout", n)
				}
			}
		}
	})
}

func TestBF16(t *testing.T) {
	// Rounding: to nearest, ties to even, NaN stays NaN.
	for _, c := range []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80}, {-2, 0xc000}, {math.Float32frombits(0x3f808000), 0x3f80}, {math.Float32frombits(0x3f818000), 0x3f82},
		{math.Float32frombits(0x3f808001), 0x3f81}, {float32(math.Inf(1)), 0x7f80},
	} {
		var got [1]uint16
		ToBF16(got[:], []float32{c.in})
		if got[0] != c.want {
			t.Errorf("ToBF16(%v) = %#x, want %#x", c.in, got[0], c.want)
		}
	}
	var q [1]uint16
	ToBF16(q[:], []float32{nan})
	if back := bf16(q[0]); !math.IsNaN(float64(back)) {
		t.Errorf("ToBF16(NaN) widened to %v", back)
	}
	impls(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(6, 6))
		for _, m := range []int{1, 2, 3, 4, 9} {
			for _, n := range []int{1, 3, 4, 5, 8, 13, 64, 200} {
				for _, k := range []int{1, 7, 8, 9, 16, 23, 32, 48, 100, kc + 9, 2*1024 + 45} {
					ldw := max(k, 1) + r.IntN(3)
					wf := newGuarded(r, n, k, ldw, 0, 0)
					w := make([]uint16, len(wf.all)+5)
					ToBF16(w, wf.all)
					for i := len(wf.all); i < len(w); i++ {
						w[i] = 0x7fc0 // NaN guard after W
					}
					wide := make([]float32, len(w))
					FromBF16(wide, w)
					a := newGuarded(r, m, k, k, r.IntN(4), nan)
					c := newGuarded(r, m, n, n+1, r.IntN(4), sentinel)
					c0 := append([]float32(nil), c.all...)
					beta := []float32{0, 1}[r.IntN(2)]
					GemmNTBF16(m, n, k, a.s(), k, w[:(n-1)*ldw+k], ldw, beta, c.s(), n+1)
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							want := float64(beta) * float64(c0[c.off+i*(n+1)+j])
							mag := math.Abs(want)
							for p := 0; p < k; p++ {
								v := bf16Operand(a.at(i, p)) * float64(wide[j*ldw+p])
								want += v
								mag += math.Abs(v)
							}
							if got := float64(c.at(i, j)); math.IsNaN(got) || math.Abs(got-want) > 1e-6*(mag+1) {
								t.Fatalf("m=%d n=%d k=%d: C[%d][%d] = %v, want %v", m, n, k, i, j, got, want)
							}
						}
					}
					c.checkPads(t, fmt.Sprintf("bf16 m=%d n=%d k=%d", m, n, k))
				}
			}
		}
	})
}

// bf16Operand is the value GemmNTBF16 multiplies for x: x itself, or on
// the AVX512_BF16 path its split hi + lo (splitBF16Go), within 2^-16 of x
// (TestSplitBF16).
func bf16Operand(x float32) float64 {
	if !useDPBF16 {
		return float64(x)
	}
	var s [64]uint16
	splitBF16Go(1, []float32{x}, s[:])
	return float64(bf16(s[0])) + float64(bf16(s[32]))
}

func TestSum(t *testing.T) {
	impls(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 7))
		for _, n := range []int{0, 1, 63, 64, 65, 1000, 4096} {
			x := newGuarded(r, 1, n, max(n, 1), r.IntN(8), nan).s()
			var want float64
			for _, v := range x {
				want += float64(v)
			}
			if got := Sum(x); math.Abs(float64(got)-want) > 1e-4 {
				t.Fatalf("Sum of %d = %v, want %v", n, got, want)
			}
		}
	})
}

func TestShapePanics(t *testing.T) {
	x := make([]float32, 10)
	for name, f := range map[string]func(){
		"short A":     func() { GemmNT(3, 2, 4, x[:11-3], 4, x, 4, 0, x, 2) },
		"short W":     func() { GemmNT(1, 3, 4, x, 4, x, 4, 0, x, 3) },
		"short C":     func() { GemmNT(2, 3, 1, x, 1, x, 1, 0, x[:5], 3) },
		"small ld":    func() { GemmNT(1, 1, 4, x, 3, x, 4, 0, x, 1) },
		"negative":    func() { GemmNT(-1, 1, 1, x, 1, x, 1, 0, x, 1) },
		"short y":     func() { GemvN(4, 2, x, 2, x, 0, x[:3]) },
		"short x T":   func() { GemvT(4, 2, x, 2, x[:3], 0, x) },
		"short gates": func() { LSTMGates(3, 3, x, x, x, x) },
		"short gru":   func() { GRUGates(4, 4, x, x, x, x, x, x) },
		"short bf16":  func() { GemmNTBF16(1, 3, 4, x, 4, make([]uint16, 11), 4, 0, x, 3) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestGemmNTRowsIndependent checks the property the tree executors rely
// on, on each path: a row of C has the same bits computed alone, in a
// group of two, three or four, or in a batch that crosses W blocks; and
// so does a range of W's rows (a core's share in the partitioned
// schedule) computed on its own.
func TestGemmNTRowsIndependent(t *testing.T) {
	impls(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(8, 8))
		type shape struct{ n, k int }
		shapes := []shape{{1, 1}, {3, 5}, {7, 8}, {9, 13}, {29, 64}, {17, 150}, {23, 301}, {wBlock(1000) + 5, 1000}}
		for _, s := range shapes {
			const m = 11
			lda, ldw, ldc := s.k+1, s.k+2, s.n+3
			a := newGuarded(r, m, s.k, lda, 0, nan).s()
			w := newGuarded(r, s.n, s.k, ldw, 0, nan).s()
			c0 := newGuarded(r, m, s.n, ldc, 0, 0).s()
			for _, beta := range []float32{0, 1, 0.75} {
				all := append([]float32(nil), c0...)
				GemmNT(m, s.n, s.k, a, lda, w, ldw, beta, all, ldc)
				// W split by rows, as the partitioned schedule splits W_hh
				// over cores: each range's columns of C are the batch's.
				for _, j0 := range []int{0, 1, 3, s.n / 2, s.n - 1} {
					for _, j1 := range []int{j0 + 1, (j0 + s.n + 1) / 2, s.n} {
						if j0 < 0 || j1 > s.n || j0 >= j1 {
							continue
						}
						part := append([]float32(nil), c0...)
						GemmNT(m, j1-j0, s.k, a, lda, w[j0*ldw:], ldw, beta, part[j0:], ldc)
						for i := 0; i < m; i++ {
							for j := j0; j < j1; j++ {
								if g, want := part[i*ldc+j], all[i*ldc+j]; math.Float32bits(g) != math.Float32bits(want) {
									t.Fatalf("n=%d k=%d beta=%v: W rows [%d,%d): C[%d][%d] = %v, %v in the whole product",
										s.n, s.k, beta, j0, j1, i, j, g, want)
								}
							}
						}
					}
				}
				for rows := 1; rows <= 5; rows++ {
					for i0 := 0; i0+rows <= m; i0++ {
						part := append([]float32(nil), c0...)
						GemmNT(rows, s.n, s.k, a[i0*lda:], lda, w, ldw, beta, part[i0*ldc:], ldc)
						for i := i0; i < i0+rows; i++ {
							for j := 0; j < s.n; j++ {
								if g, want := part[i*ldc+j], all[i*ldc+j]; math.Float32bits(g) != math.Float32bits(want) {
									t.Fatalf("n=%d k=%d beta=%v: row %d col %d: %v in a group of %d at %d, %v in the batch of %d",
										s.n, s.k, beta, i, j, g, rows, i0, want, m)
								}
							}
						}
					}
				}
			}
		}
	})
}

// fma32 is the float32 fused multiply-add a*b+c, rounded once (to nearest
// even), computed exactly with math/big.
func fma32(a, b, c float32) float32 {
	const prec = 512 // exact for any float32 product and sum
	x := new(big.Float).SetPrec(prec).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetPrec(prec).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetPrec(prec).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}

// TestGemmNTOrder checks the assembly bit for bit against the order the
// package documents (dotGo's, with every multiply-add and the beta term
// fused), emulated exactly: the kernels agree with one another because
// each computes this.
func TestGemmNTOrder(t *testing.T) {
	if !useAsm {
		t.Skip("no assembly on this CPU or build")
	}
	r := rand.New(rand.NewPCG(9, 9))
	for _, s := range []struct{ m, n, k int }{{1, 19, 37}, {2, 7, 8}, {3, 5, 3}, {4, 9, 70}, {7, 13, 17}, {5, 70, 9}, {4, 10, 136}, {3, 7, 200}, {7, 8, 193}, {23, 12, 192}, {13, 9, 520}} {
		a := newGuarded(r, s.m, s.k, s.k, 0, 0).s()
		w := newGuarded(r, s.n, s.k, s.k, 0, 0).s()
		c0 := newGuarded(r, s.m, s.n, s.n, 0, 0).s()
		for _, beta := range []float32{0, -1.5} {
			c := append([]float32(nil), c0...)
			GemmNT(s.m, s.n, s.k, a, s.k, w, s.k, beta, c, s.n)
			for i := 0; i < s.m; i++ {
				for j := 0; j < s.n; j++ {
					var l [8]float32
					for p := 0; p < s.k; p++ {
						l[p%8] = fma32(a[i*s.k+p], w[j*s.k+p], l[p%8])
					}
					want := ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
					if beta != 0 {
						want = fma32(beta, c0[i*s.n+j], want)
					}
					if got := c[i*s.n+j]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%+v beta=%v: C[%d][%d] = %v, want %v", s, beta, i, j, got, want)
					}
				}
			}
		}
	}
}

// TestGemmNTPull checks the products whose W is too large for the caches
// and whose first row pulls each block in (pulls, assembly only): every
// row of C equals the row computed alone, for each row count the rule
// covers and its neighbours.
func TestGemmNTPull(t *testing.T) {
	if !useAsm {
		t.Skip("no assembly on this CPU or build")
	}
	withBlocking(t, amdBlocking)
	r := rand.New(rand.NewPCG(10, 10))
	n, k := 2200, 1001 // 8.4 MiB of W, k%8 != 0
	if !pulls(3, n, k, false) || pulls(2, n, k, false) || pulls(pullRows+1, n, k, false) || pulls(3, n, 128, false) ||
		!pulls(3, n, 128, true) || pulls(2, n, 128, true) || pulls(pullRows+1, n, 128, true) || pulls(3, 64, 256, true) {
		t.Fatalf("pulls does not cover 3..%d rows of a %d×%d W only, or of any W read once", pullRows, n, k)
	}
	lda, ldw, ldc := k+3, k+1, n+5
	w := newGuarded(r, n, k, ldw, 0, nan).s()
	for _, m := range []int{2, 3, 4, 5, 10, pullRows, pullRows + 1} {
		a := newGuarded(r, m, k, lda, 0, nan).s()
		c0 := newGuarded(r, m, n, ldc, 0, 0).s()
		for _, beta := range []float32{0, 0.5} {
			all := append([]float32(nil), c0...)
			GemmNT(m, n, k, a, lda, w, ldw, beta, all, ldc)
			for i := 0; i < m; i++ {
				one := append([]float32(nil), c0[i*ldc:i*ldc+n]...)
				GemmNT(1, n, k, a[i*lda:], lda, w, ldw, beta, one, n)
				for j := range one {
					if g, want := all[i*ldc+j], one[j]; math.Float32bits(g) != math.Float32bits(want) {
						t.Fatalf("m=%d beta=%v: C[%d][%d] = %v, %v computed alone", m, beta, i, j, g, want)
					}
				}
			}
		}
	}
}

// TestGemmNTOnce checks that GemmNTOnce, which pulls W in through its
// first row whatever W's size, gives GemmNT's bits, row by row, for
// every row count around the pull's bounds, odd k and strides, both
// betas, on both paths; and that it checks its arguments as GemmNT does.
func TestGemmNTOnce(t *testing.T) {
	impls(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(11, 11))
		for _, nk := range [][2]int{{1024, 256}, {300, 251}, {77, 131}, {50, 9}} {
			n, k := nk[0], nk[1]
			lda, ldw, ldc := k+3, k+1, n+5
			w := newGuarded(r, n, k, ldw, 0, nan).s()
			for _, m := range []int{1, 2, 3, 4, 5, 10, pullRows, pullRows + 1, 40} {
				a := newGuarded(r, m, k, lda, 0, nan).s()
				c0 := newGuarded(r, m, n, ldc, 0, 0).s()
				for _, beta := range []float32{0, 0.5} {
					once := append([]float32(nil), c0...)
					GemmNTOnce(m, n, k, a, lda, w, ldw, beta, once, ldc)
					plain := append([]float32(nil), c0...)
					GemmNT(m, n, k, a, lda, w, ldw, beta, plain, ldc)
					for i := range once {
						if math.Float32bits(once[i]) != math.Float32bits(plain[i]) {
							t.Fatalf("n=%d k=%d m=%d beta=%v: element %d = %v, GemmNT gives %v", n, k, m, beta, i, once[i], plain[i])
						}
					}
				}
			}
		}
	})
	for _, bad := range []func(){
		func() { GemmNTOnce(-1, 1, 1, nil, 1, nil, 1, 0, nil, 1) },
		func() { GemmNTOnce(2, 2, 2, make([]float32, 3), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("GemmNTOnce accepted bad arguments")
				}
			}()
			bad()
		}()
	}
}

// TestFinite puts an infinity or a NaN (of every exponent-all-ones form
// and both signs) at each position of slices of lengths around the
// assembly's 32-value chunks, on both paths, next to values that are
// finite at every extreme (the largest float32, subnormals, -0).
func TestFinite(t *testing.T) {
	bad := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0x7fffffff), math.Float32frombits(0xff800001), math.Float32frombits(0x7fc00000)}
	good := []float32{math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, math.Float32frombits(0x80000000), 1, 0x1p127}
	impls(t, func(t *testing.T) {
		for _, n := range []int{0, 1, 7, 31, 32, 33, 64, 95, 200} {
			x := make([]float32, n)
			for i := range x {
				x[i] = good[i%len(good)]
			}
			if !Finite(x) {
				t.Fatalf("n=%d: finite values reported not finite", n)
			}
			for i := 0; i < n; i++ {
				for _, b := range bad {
					y := append([]float32(nil), x...)
					y[i] = b
					if Finite(y) {
						t.Fatalf("n=%d: %v (bits %#x) at %d not caught", n, b, math.Float32bits(b), i)
					}
				}
			}
		}
	})
}

// TestLSTMStep checks the fused step, on row-major and on packed W, with
// its units in order and chunk by chunk from the last (LSTMStepReverse,
// LSTMStepPackedReverse), and with W's rows in the chunked order
// (LSTMStepPackedChunked, both ways),
// against the two calls it replaces, GemmNT (beta 1) and LSTMGates, bit
// for bit: xp, c and hout, on both paths, with W's row gaps and everything past the read operands poisoned
// with NaN and everything past the written ones holding a sentinel.
func TestLSTMStep(t *testing.T) {
	impls(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(6, 6))
		for _, n := range []int{1, 5, 8, 13, 16, 24, 40, 64, 96, 104} {
			for _, k := range []int{0, 1, 7, 8, 16, 24, 64, 72} {
				ldw := max(k, 1) + r.IntN(3)
				w := newGuarded(r, 4*n, k, ldw, 0, nan)
				h := newGuarded(r, 1, k, k, 0, nan)
				bias := newGuarded(r, 1, 4*n, 4*n, 0, nan)
				xp := newGuarded(r, 1, 4*n, 4*n, 0, sentinel)
				c := newGuarded(r, 1, n, n, 0, sentinel)
				for i := range xp.s() {
					xp.s()[i] *= 4
				}
				wantXP := append([]float32(nil), xp.s()...)
				wantC := append([]float32(nil), c.s()...)
				wantH := make([]float32, n)
				GemmNT(1, 4*n, k, h.s(), max(k, 1), w.s(), ldw, 1, wantXP, 4*n)
				LSTMGates(n, n, wantXP, bias.s(), wantC, wantH)

				xp0, c0 := append([]float32(nil), xp.s()...), append([]float32(nil), c.s()...)
				for _, form := range []string{"in order", "reverse", "packed", "packed reverse", "chunked", "chunked reverse"} {
					if form == "packed reverse" && n%8 != 0 || strings.HasPrefix(form, "chunked") && n%StepChunk != 0 {
						continue
					}
					copy(xp.s(), xp0)
					copy(c.s(), c0)
					hout := newGuarded(r, 1, n, n, 0, sentinel)
					switch form {
					case "chunked", "chunked reverse":
						// W's rows, xp and bias in the chunked order; xp
						// back in gate-major order to compare.
						wc := make([]float32, 4*n*ldw)
						xc, bc := make([]float32, 4*n), make([]float32, 4*n)
						for i := range 4 * n {
							j := ChunkRow(n, i)
							copy(wc[j*ldw:j*ldw+k], w.s()[i*ldw:])
							xc[j], bc[j] = xp.s()[i], bias.s()[i]
						}
						p := newGuarded(r, 1, 4*n*k, 4*n*k, 0, nan)
						PackNT(p.s(), 4*n, k, wc, ldw)
						LSTMStepPackedChunked(n, k, h.s(), p.s(), xc, bc, c.s(), hout.s(), form == "chunked reverse")
						for i := range 4 * n {
							xp.s()[i] = xc[ChunkRow(n, i)]
						}
					case "packed", "packed reverse":
						p := newGuarded(r, 1, 4*n*k, 4*n*k, 0, nan)
						PackNT(p.s(), 4*n, k, w.s(), ldw)
						if form == "packed" {
							LSTMStepPacked(n, k, h.s(), p.s(), xp.s(), bias.s(), c.s(), hout.s())
						} else {
							LSTMStepPackedReverse(n, k, h.s(), p.s(), xp.s(), bias.s(), c.s(), hout.s())
						}
					case "reverse":
						LSTMStepReverse(n, k, h.s(), w.s(), ldw, xp.s(), bias.s(), c.s(), hout.s())
					default:
						LSTMStep(n, k, h.s(), w.s(), ldw, xp.s(), bias.s(), c.s(), hout.s())
					}
					what := fmt.Sprintf("n=%d k=%d ldw=%d %s", n, k, ldw, form)
					for _, o := range []struct {
						name      string
						got, want []float32
					}{{"xp", xp.s(), wantXP}, {"c", c.s(), wantC}, {"h", hout.s(), wantH}} {
						for i := range o.want {
							if math.Float32bits(o.got[i]) != math.Float32bits(o.want[i]) {
								t.Fatalf("%s: %s[%d] = %v, want %v", what, o.name, i, o.got[i], o.want[i])
							}
						}
					}
					xp.checkPads(t, what+" xp")
					c.checkPads(t, what+" c")
					hout.checkPads(t, what+" h")
				}
			}
		}
	})
}
