package f32

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestTreeGates checks the Binary TreeLSTM kernels against float64
// versions of the equations for many widths and strides, on each path,
// with guard bands after every output.
func TestTreeGates(t *testing.T) {
	impls(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(16, 5))
		rnd := func(k int, scale float64) []float32 {
			v := make([]float32, k)
			for i := range v {
				v[i] = float32(scale * (2*r.Float64() - 1))
			}
			return v
		}
		guarded := func(n int) []float32 { return append(make([]float32, n), sentinel, sentinel) }
		for _, n := range append(sizes[1:], 150, 200, 1024) {
			stride := n + r.IntN(4)
			// Pre-activations spread wide enough to saturate.
			y, bias := rnd(5*stride, 6), rnd(5*stride, 1)
			g := func(q, j int) float64 { return float64(y[q*stride+j]) + float64(bias[q*stride+j]) }

			c, h := guarded(n), guarded(n)
			TreeLeafGates(n, stride, y, bias, c[:n], h[:n])
			for j := 0; j < n; j++ {
				cw := sigmoid64(g(0, j)) * math.Tanh(g(2, j))
				hw := sigmoid64(g(1, j)) * math.Tanh(cw)
				if math.Abs(float64(c[j])-cw) > 1e-6 || math.Abs(float64(h[j])-hw) > 1e-6 {
					t.Fatalf("leaf n=%d unit %d: c=%v h=%v, want %v %v", n, j, c[j], h[j], cw, hw)
				}
			}
			if c[n] != sentinel || c[n+1] != sentinel || h[n] != sentinel || h[n+1] != sentinel {
				t.Fatalf("leaf n=%d wrote past c or h", n)
			}

			cl, cr := rnd(n, 3), rnd(n, 3)
			c, h = guarded(n), guarded(n)
			TreeInnerGates(n, stride, y, bias, cl, cr, c[:n], h[:n])
			for j := 0; j < n; j++ {
				cw := sigmoid64(g(0, j))*math.Tanh(g(4, j)) + sigmoid64(g(1, j))*float64(cl[j]) + sigmoid64(g(2, j))*float64(cr[j])
				hw := sigmoid64(g(3, j)) * math.Tanh(cw)
				if math.Abs(float64(c[j])-cw) > 2e-6*max(1, math.Abs(cw)) || math.Abs(float64(h[j])-hw) > 1e-6 {
					t.Fatalf("inner n=%d unit %d: c=%v h=%v, want %v %v", n, j, c[j], h[j], cw, hw)
				}
			}
			if c[n] != sentinel || c[n+1] != sentinel || h[n] != sentinel || h[n+1] != sentinel {
				t.Fatalf("inner n=%d wrote past c or h", n)
			}
		}
	})
}

// TestTreeGatesAsmMatchesGo compares the two paths directly: they differ
// only by the assembly's fused multiply-adds (in the polynomials and in
// c's sum), a few units in the last place.
func TestTreeGatesAsmMatchesGo(t *testing.T) {
	if !useAsm {
		t.Skip("no assembly on this CPU or build")
	}
	defer setDefault()
	r := rand.New(rand.NewPCG(16, 6))
	const n, stride = 150, 153
	y, bias, cl, cr := make([]float32, 5*stride), make([]float32, 5*stride), make([]float32, n), make([]float32, n)
	for _, v := range [][]float32{y, bias, cl, cr} {
		for i := range v {
			v[i] = float32(8 * (2*r.Float64() - 1))
		}
	}
	var c, h [2][n]float32
	var ci, hi [2][n]float32
	for p, l := range []level{levelGo, levelAVX2} {
		setLevel(l)
		TreeLeafGates(n, stride, y, bias, c[p][:], h[p][:])
		TreeInnerGates(n, stride, y, bias, cl, cr, ci[p][:], hi[p][:])
	}
	for j := 0; j < n; j++ {
		for _, d := range []float64{
			math.Abs(float64(c[0][j] - c[1][j])), math.Abs(float64(h[0][j] - h[1][j])),
			math.Abs(float64(ci[0][j]-ci[1][j])) / max(1, math.Abs(float64(ci[0][j]))), math.Abs(float64(hi[0][j] - hi[1][j])),
		} {
			if d > 5e-7 {
				t.Fatalf("unit %d: Go and assembly differ by %.3g (leaf c %v/%v h %v/%v, inner c %v/%v h %v/%v)", j, d,
					c[0][j], c[1][j], h[0][j], h[1][j], ci[0][j], ci[1][j], hi[0][j], hi[1][j])
			}
		}
	}
}

// TestTreeGatesShort checks that short slices panic rather than read or
// write out of bounds.
func TestTreeGatesShort(t *testing.T) {
	x := make([]float32, 20)
	for name, f := range map[string]func(){
		"leaf stride": func() { TreeLeafGates(4, 3, x, x, x, x) },
		"leaf y":      func() { TreeLeafGates(8, 8, x, x, x, x) },
		"inner y":     func() { TreeInnerGates(4, 5, x, x, x, x, x, x) },
		"inner c":     func() { TreeInnerGates(2, 2, x, x, x[:1], x, x, x) },
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

// BenchmarkTreeGates times the Binary TreeLSTM kernels on one node of the
// tree benchmark's width (hidden 150), reporting ns per unit.
//
//	go test ./internal/f32/ -run '^$' -bench TreeGates
func BenchmarkTreeGates(b *testing.B) {
	const n = 150
	r := rand.New(rand.NewPCG(1, 1))
	y, bias := make([]float32, 5*n), make([]float32, 5*n)
	cl, cr, c, h := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for _, v := range [][]float32{y, bias, cl, cr} {
		for i := range v {
			v[i] = float32(4 * (2*r.Float64() - 1))
		}
	}
	b.Run("leaf", func(b *testing.B) {
		for b.Loop() {
			TreeLeafGates(n, n, y, bias, c, h)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/unit")
	})
	b.Run("inner", func(b *testing.B) {
		for b.Loop() {
			TreeInnerGates(n, n, y, bias, cl, cr, c, h)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/unit")
	})
}
