//go:build !purego

package f32

import (
	"math"
	"math/rand/v2"
	"testing"
)

// gateInputs fills v with pre-activations the gate kernels must agree on
// in every branch: most spread over [-scale, scale], and some at the
// edges of the approximations (exp's clamps at -87 and 88, tanh's switch
// from polynomial to exp at |x| = 0.625, zeros of both signs, tiny
// values, far beyond saturation).
func gateInputs(r *rand.Rand, v []float32, scale float64) {
	edges := []float32{0, float32(math.Copysign(0, -1)), 0.625, -0.625, math.Nextafter32(0.625, 0), math.Nextafter32(-0.625, 0),
		87, -87, 88, -88, 89, -89, 200, -200, 1e-30, -1e-30, 0.3125, -0.3125, 43.5, -44.5}
	for i := range v {
		if r.IntN(8) == 0 {
			v[i] = edges[r.IntN(len(edges))]
			continue
		}
		v[i] = float32(scale * (2*r.Float64() - 1))
	}
}

// zeroSome zeroes every third element of v, so that the biases leave an
// edge of gateInputs exactly where it was.
func zeroSome(v []float32) {
	for i := 0; i < len(v); i += 3 {
		v[i] = 0
	}
}

// TestGatesAVX512Bits runs LSTMGates and GRUGates with the AVX2 kernels
// and with the AVX-512 ones on the same operands, for every n up to 80
// and wider ones (n a multiple of 16, of 8 but not 16, and of neither:
// the tail goes through the AVX2 kernel and Go on both paths), at strides
// from n to n+5 and rows starting off a vector's alignment, and holds
// them to the same bits: c and h, the GRU's output in place and not, and
// the elements past each end untouched.
func TestGatesAVX512Bits(t *testing.T) {
	if !hostAVX512 {
		t.Skip("no AVX-512 on this CPU or build")
	}
	defer setDefault()
	r := rand.New(rand.NewPCG(30, 16))
	var ns []int
	for n := 1; n <= 80; n++ {
		ns = append(ns, n)
	}
	ns = append(ns, 96, 127, 136, 192, 200, 255, 256, 1000, 1024)
	const guard = 3
	run := func(l level, f func()) { setLevel(l); f() }
	for _, n := range ns {
		for _, pad := range []int{0, 1, 5} {
			stride, off := n+pad, r.IntN(4)
			for _, scale := range []float64{1, 6, 40} {
				// LSTM: y and bias [4][stride] from off, c and h with guards.
				y, bias := make([]float32, off+4*stride), make([]float32, off+4*stride)
				gateInputs(r, y, scale)
				gateInputs(r, bias, 1)
				zeroSome(bias)
				c0 := make([]float32, n+guard)
				gateInputs(r, c0, 3)
				var cs, hs [2][]float32
				for i, l := range []level{levelAVX2, levelAVX512} {
					cs[i] = append([]float32(nil), c0...)
					hs[i] = make([]float32, n+guard)
					for j := range hs[i] {
						hs[i][j] = sentinel
					}
					run(l, func() { LSTMGates(n, stride, y[off:], bias[off:], cs[i][:n], hs[i][:n]) })
				}
				for j := 0; j < n+guard; j++ {
					if math.Float32bits(cs[0][j]) != math.Float32bits(cs[1][j]) || math.Float32bits(hs[0][j]) != math.Float32bits(hs[1][j]) {
						t.Fatalf("LSTM n=%d stride=%d off=%d scale=%v unit %d: avx512 c=%v h=%v, avx2 c=%v h=%v",
							n, stride, off, scale, j, cs[1][j], hs[1][j], cs[0][j], hs[0][j])
					}
				}
				if hs[1][n] != sentinel || cs[1][n] != c0[n] {
					t.Fatalf("LSTM n=%d: wrote past c or h", n)
				}
				// GRU: x, p, bih, bhh [3][stride] from off; out separate and in place.
				x, p := make([]float32, off+3*stride), make([]float32, off+3*stride)
				bih, bhh := make([]float32, off+3*stride), make([]float32, off+3*stride)
				gateInputs(r, x, scale)
				gateInputs(r, p, scale)
				gateInputs(r, bih, 1)
				gateInputs(r, bhh, 1)
				zeroSome(p)
				zeroSome(bih)
				zeroSome(bhh)
				hprev := make([]float32, n+guard)
				gateInputs(r, hprev, 1)
				for _, inPlace := range []bool{false, true} {
					var outs [2][]float32
					for i, l := range []level{levelAVX2, levelAVX512} {
						outs[i] = make([]float32, n+guard)
						for j := range outs[i] {
							outs[i][j] = sentinel
						}
						src := hprev[:n]
						if inPlace {
							copy(outs[i], hprev[:n])
							src = outs[i][:n]
						}
						run(l, func() { GRUGates(n, stride, x[off:], p[off:], bih[off:], bhh[off:], src, outs[i][:n]) })
					}
					for j := 0; j < n+guard; j++ {
						if math.Float32bits(outs[0][j]) != math.Float32bits(outs[1][j]) {
							t.Fatalf("GRU n=%d stride=%d off=%d scale=%v in place %v unit %d: avx512 %v, avx2 %v",
								n, stride, off, scale, inPlace, j, outs[1][j], outs[0][j])
						}
					}
					if outs[1][n] != sentinel {
						t.Fatalf("GRU n=%d: wrote past hout", n)
					}
				}
			}
		}
	}
}
