package f32

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

func uintptrOf(p []uint8) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(p))) }

// i8Impls runs f once per int8 kernel path this CPU has (AVX-512 VNNI,
// AVX2, pure Go), restoring the selection afterwards.
func i8Impls(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := i8Path
	defer func() { i8Path = saved }()
	for _, p := range i8Paths() {
		i8Path = p
		t.Run(p.String(), f)
	}
}

// i8Shapes are products with every tail: rows of A 1..9 (tiles of four
// and the one-row kernels), W rows around panels and groups of panels,
// k around quads.
var i8Shapes = [][3]int{
	{1, 16, 4}, {1, 64, 64}, {1, 128, 128}, {1, 17, 5}, {1, 100, 33}, {1, 48, 1}, {1, 256, 512}, {1, 80, 7},
	{2, 64, 64}, {3, 33, 19}, {4, 64, 128}, {5, 70, 31}, {7, 16, 1}, {8, 96, 40}, {9, 130, 67},
	{1, 1, 1}, {2, 1, 3}, {4, 15, 3}, {13, 200, 260},
	// Rows longer than the AVX2 tiles' frame holds (i8TileQuads), and
	// rows at its edge.
	{3, 40, 4100}, {5, 33, 4096}, {2, 17, 4093},
}

// randQuantized returns A [m][k] (lda) quantized, with scales, and W
// [n][k] packed.
func randI8(r *rand.Rand, m, n, k int) (a []float32, q []uint8, ldq int, s []float32, w []float32, p []uint8) {
	lda := k + 3
	a = make([]float32, m*lda)
	for i := range a {
		a[i] = float32(2*r.Float64() - 1)
	}
	if m > 1 {
		for c := 0; c < k; c++ {
			a[lda+c] = 0 // a row of zeros
		}
	}
	ldq = I8Stride(k) + 8
	q = make([]uint8, m*ldq)
	s = make([]float32, m)
	QuantizeI8(m, k, a, lda, q, ldq, s)
	w = make([]float32, n*k)
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.1)
	}
	p = NewPackedI8(n, k)
	PackI8(p, n, k, w, k)
	return
}

// TestGemmNTI8Paths holds every int8 kernel path to the pure-Go loop,
// bit for bit, with beta 0 (C full of NaN, never read), 1 and 0.5, and
// checks nothing outside C is written.
func TestGemmNTI8Paths(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 1))
	for _, sh := range i8Shapes {
		m, n, k := sh[0], sh[1], sh[2]
		_, q, ldq, s, _, p := randI8(r, m, n, k)
		for _, beta := range []float32{0, 1, 0.5} {
			ldc := n + 2
			c0 := newGuarded(r, m, n, ldc, 3, sentinel)
			want := append([]float32(nil), c0.all...)
			wc := want[c0.off : len(want)-c0.guard]
			gemmI8Go(m, n, I8Stride(k), q, ldq, s, p, beta, wc, ldc)
			i8Impls(t, func(t *testing.T) {
				c := newGuarded(rand.New(rand.NewPCG(1, 1)), m, n, ldc, 3, sentinel)
				copy(c.all, c0.all)
				if beta == 0 {
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							c.all[c.off+i*ldc+j] = float32(math.NaN())
						}
					}
				}
				GemmNTI8(m, n, k, q, ldq, s, p, beta, c.s(), ldc)
				c.checkPads(t, fmt.Sprintf("m=%d n=%d k=%d beta=%v", m, n, k, beta))
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						got, w := c.at(i, j), wc[i*ldc+j]
						if math.Float32bits(got) != math.Float32bits(w) {
							t.Fatalf("m=%d n=%d k=%d beta=%v: C[%d][%d] = %v, the Go loop gives %v", m, n, k, beta, i, j, got, w)
						}
					}
				}
			})
		}
	}
}

// TestGemmNTI8Exact checks the integer sums on values that quantize
// exactly: A7 of ±63, W8 of ±127 and everything between, so that pairs
// reach the largest magnitude VPMADDUBSW meets (A7 + 64 = 127 times ±127,
// twice), and C is known exactly (both scales are 1).
func TestGemmNTI8Exact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, sh := range [][3]int{{1, 64, 256}, {4, 64, 256}, {5, 33, 1027}, {1, 16, 4096}} {
		m, n, k := sh[0], sh[1], sh[2]
		a8 := make([]int, m*k)
		w8 := make([]int, n*k)
		a := make([]float32, m*k)
		w := make([]float32, n*k)
		for i := range a8 {
			a8[i] = []int{63, -63, 63, r.IntN(127) - 63}[r.IntN(4)]
			if i%k == 0 {
				a8[i] = 63 // every row's largest magnitude is 63
			}
			a[i] = float32(a8[i])
		}
		for i := range w8 {
			w8[i] = []int{127, -127, r.IntN(255) - 127}[r.IntN(3)]
			if i%k == 0 {
				w8[i] = -127
			}
			w[i] = float32(w8[i])
		}
		q := make([]uint8, m*I8Stride(k))
		s := make([]float32, m)
		QuantizeI8(m, k, a, k, q, I8Stride(k), s)
		p := NewPackedI8(n, k)
		PackI8(p, n, k, w, k)
		i8Impls(t, func(t *testing.T) {
			c := make([]float32, m*n)
			GemmNTI8(m, n, k, q, I8Stride(k), s, p, 0, c, n)
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					acc := 0
					for x := 0; x < k; x++ {
						acc += a8[i*k+x] * w8[j*k+x]
					}
					// s = 63/63 and sw = 127/127: 1 on both sides.
					if c[i*n+j] != float32(acc) {
						t.Fatalf("m=%d n=%d k=%d: C[%d][%d] = %v, want %d", m, n, k, i, j, c[i*n+j], acc)
					}
				}
			}
		})
	}
}

// TestGemmNTI8Error bounds each element of C against the float64
// product of the unquantized A and W by what rounding both can cost:
// |Σ a·w - Σ â·ŵ| <= Σ (|a|·|w-ŵ| + |ŵ|·|a-â|) with |w-ŵ| <= sw/2 and
// |a-â| <= s/2, plus float32 rounding.
func TestGemmNTI8Error(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 9))
	for _, sh := range i8Shapes {
		m, n, k := sh[0], sh[1], sh[2]
		a, q, ldq, s, w, p := randI8(r, m, n, k)
		lda := k + 3
		c := make([]float32, m*n)
		GemmNTI8(m, n, k, q, ldq, s, p, 0, c, n)
		w8 := make([]int8, k)
		for j := 0; j < n; j++ {
			sw := float64(UnpackI8Row(w8, n, k, p, j))
			for i := 0; i < m; i++ {
				var exact, bound float64
				for x := 0; x < k; x++ {
					av, wv := float64(a[i*lda+x]), float64(w[j*k+x])
					exact += av * wv
					bound += math.Abs(av)*sw/2 + (math.Abs(wv)+sw/2)*float64(s[i])/2
				}
				bound += 1e-6 * (math.Abs(exact) + 1)
				if d := math.Abs(float64(c[i*n+j]) - exact); d > bound {
					t.Fatalf("m=%d n=%d k=%d: C[%d][%d] = %v, exact %v: error %v above the bound %v", m, n, k, i, j, c[i*n+j], exact, d, bound)
				}
			}
		}
	}
}

// TestQuantizeI8 checks the quantized rows against their definition and
// every path against the pure-Go one, bit for bit.
func TestQuantizeI8(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 7))
	for _, k := range []int{1, 3, 4, 31, 32, 33, 64, 100, 1024, 1031} {
		m := 3
		a := make([]float32, m*k)
		for i := range a {
			a[i] = float32(r.NormFloat64())
		}
		a[k/2] = 0.5 // a tie that rounds to even once scaled
		for c := 0; c < k; c++ {
			a[2*k+c] = 0
		}
		ldq := I8Stride(k)
		want := make([]uint8, m*ldq)
		ws := make([]float32, m)
		saved := i8Path
		i8Path = i8Go
		QuantizeI8(m, k, a, k, want, ldq, ws)
		i8Path = saved
		for i := 0; i < m; i++ {
			var amax float64
			for _, v := range a[i*k : (i+1)*k] {
				amax = math.Max(amax, math.Abs(float64(v)))
			}
			if float64(ws[i]) != float64(float32(amax)/63) {
				t.Fatalf("k=%d row %d: scale %v, want max|a|/63 = %v", k, i, ws[i], float32(amax)/63)
			}
			for c := 0; c < ldq; c++ {
				v := int(want[i*ldq+c]) - 64
				if c >= k || amax == 0 {
					if v != 0 {
						t.Fatalf("k=%d row %d: byte %d = %d, want 0 (padding or a zero row)", k, i, c, v)
					}
					continue
				}
				inv := float32(63) / float32(amax)
				if exp := math.RoundToEven(float64(a[i*k+c] * inv)); float64(v) != exp || v < -63 || v > 63 {
					t.Fatalf("k=%d row %d: byte %d = %d, want %v", k, i, c, v, exp)
				}
			}
		}
		i8Impls(t, func(t *testing.T) {
			q := make([]uint8, m*ldq)
			for i := range q {
				q[i] = 0x5a
			}
			s := make([]float32, m)
			QuantizeI8(m, k, a, k, q, ldq, s)
			for i := range q {
				if q[i] != want[i] {
					t.Fatalf("k=%d: byte %d = %d, the Go loop gives %d", k, i, q[i], want[i])
				}
			}
			for i := range s {
				if s[i] != ws[i] {
					t.Fatalf("k=%d: scale %d = %v, want %v", k, i, s[i], ws[i])
				}
			}
		})
	}
}

// TestPackI8 checks the packed rows: each within half a step of W, the
// panel sums the kernels subtract, and bytes past the matrix zero.
func TestPackI8(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for _, sh := range [][2]int{{1, 1}, {16, 4}, {17, 5}, {33, 64}, {100, 257}} {
		n, k := sh[0], sh[1]
		w := make([]float32, n*(k+1))
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		for c := 0; c < k; c++ {
			w[c] = 0 // a row of zeros
		}
		p := NewPackedI8(n, k)
		if len(p) != PackedI8Bytes(n, k) || uintptrOf(p)%64 != 0 {
			t.Fatalf("n=%d k=%d: NewPackedI8 gave %d bytes at %#x", n, k, len(p), uintptrOf(p))
		}
		for i := range p {
			p[i] = 0xee
		}
		PackI8(p, n, k, w, k+1)
		q := make([]int8, k)
		kq := I8Stride(k)
		for j := 0; j < n; j++ {
			sw := UnpackI8Row(q, n, k, p, j)
			var amax float64
			sum := 0
			for c := 0; c < k; c++ {
				amax = math.Max(amax, math.Abs(float64(w[j*(k+1)+c])))
				sum += int(q[c])
				if d := math.Abs(float64(q[c])*float64(sw) - float64(w[j*(k+1)+c])); d > float64(sw)/2*(1+1e-6) {
					t.Fatalf("n=%d k=%d: W[%d][%d] = %v packs as %d·%v", n, k, j, c, w[j*(k+1)+c], q[c], sw)
				}
			}
			if sw != float32(amax/127) {
				t.Fatalf("n=%d k=%d row %d: scale %v, want %v", n, k, j, sw, float32(amax/127))
			}
			panel := p[j/I8Panel*I8PanelBytes(k):]
			r := j % I8Panel
			got := int32(uint32(panel[16*kq+4*r]) | uint32(panel[16*kq+4*r+1])<<8 | uint32(panel[16*kq+4*r+2])<<16 | uint32(panel[16*kq+4*r+3])<<24)
			if got != int32(64*sum) {
				t.Fatalf("n=%d k=%d row %d: stored sum %d, want 64·%d", n, k, j, got, sum)
			}
			for c := k; c < kq; c++ {
				if panel[c/4*64+4*r+c%4] != 0 {
					t.Fatalf("n=%d k=%d row %d: padding column %d is not zero", n, k, j, c)
				}
			}
		}
		// Rows past n in the last panel are zero, with scale and sum 0.
		if rest := n % I8Panel; rest != 0 {
			last := p[(n/I8Panel)*I8PanelBytes(k):]
			for c := 0; c < kq; c++ {
				for r := rest; r < I8Panel; r++ {
					if last[c/4*64+4*r+c%4] != 0 {
						t.Fatalf("n=%d k=%d: padding row %d is not zero", n, k, r)
					}
				}
			}
		}
	}
}

func TestGemmNTI8Panics(t *testing.T) {
	q := make([]uint8, 8)
	s := make([]float32, 1)
	p := NewPackedI8(16, 8)
	c := make([]float32, 16)
	for name, f := range map[string]func(){
		"ldq":   func() { GemmNTI8(1, 16, 8, q, 4, s, p, 0, c, 16) },
		"short": func() { GemmNTI8(1, 17, 8, q, 8, s, p, 0, make([]float32, 17), 17) },
		"k": func() {
			QuantizeI8(1, MaxI8K+1, make([]float32, MaxI8K+1), MaxI8K+1, make([]uint8, MaxI8K+4), MaxI8K+4, s)
		},
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
