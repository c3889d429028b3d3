package f32

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAVX512MatchesAVX2 runs the float32 kernels that have an AVX-512
// form on both levels over the same inputs and compares every bit of
// what they write (the AVX-512 kernels promise the AVX2 kernels' order),
// at sizes that take the sixteen-lane loops, the eight-lane step after
// them and the pure-Go tail; everything past the operands is poisoned or
// guarded as in the other tests.
func TestAVX512MatchesAVX2(t *testing.T) {
	if !hostAVX512 {
		t.Skip("no AVX-512 on this CPU or build")
	}
	defer setDefault()
	r := rand.New(rand.NewPCG(30, 30))
	rnd := func(k int, scale float64) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(scale * (2*r.Float64() - 1))
		}
		return v
	}
	type run struct {
		name string
		f    func() [][]float32 // the outputs, on the current level
	}
	var runs []run
	for _, n := range []int{8, 16, 24, 35, 64, 200, 1024} {
		stride := n + r.IntN(4)
		y, bias, c := rnd(4*stride, 6), rnd(4*stride, 1), rnd(n, 2)
		x, p, bih, bhh, hprev := rnd(3*stride, 4), rnd(3*stride, 4), rnd(3*stride, 1), rnd(3*stride, 1), rnd(n, 1)
		runs = append(runs,
			run{fmt.Sprintf("LSTMGates n=%d", n), func() [][]float32 {
				cc, h := append([]float32(nil), c...), make([]float32, n)
				LSTMGates(n, stride, y, bias, cc, h)
				return [][]float32{cc, h}
			}},
			run{fmt.Sprintf("GRUGates n=%d", n), func() [][]float32 {
				h := make([]float32, n)
				GRUGates(n, stride, x, p, bih, bhh, hprev, h)
				return [][]float32{h}
			}})
	}
	for _, nk := range [][2]int{{8, 8}, {16, 13}, {24, 64}, {40, 100}, {64, 256}, {136, 72}} {
		n, k := nk[0], nk[1]
		w := rnd(4*n*k, 1)
		pw := make([]float32, 4*n*k)
		PackNT(pw, 4*n, k, w, k)
		h, bias, c0, xp0 := rnd(k, 1), rnd(4*n, 1), rnd(n, 2), rnd(4*n, 4)
		a := rnd(5*k, 1)
		for _, beta := range []float32{0, 1} {
			for _, m := range []int{1, 2, 3, 5} {
				runs = append(runs,
					run{fmt.Sprintf("GemmNT m=%d n=%d k=%d beta=%v", m, 4*n, k, beta), func() [][]float32 {
						out := append([]float32(nil), rnd(m*4*n, 0)...)
						copy(out, xp0)
						GemmNT(m, 4*n, k, a, k, w, k, beta, out, 4*n)
						return [][]float32{out}
					}},
					run{fmt.Sprintf("GemmNTPacked m=%d n=%d k=%d beta=%v", m, 4*n, k, beta), func() [][]float32 {
						out := make([]float32, m*4*n)
						copy(out, xp0)
						GemmNTPacked(m, 4*n, k, a, k, pw, beta, out, 4*n)
						return [][]float32{out}
					}})
			}
		}
		for _, form := range []string{"in order", "reverse", "packed", "packed reverse"} {
			runs = append(runs, run{fmt.Sprintf("LSTMStep %s n=%d k=%d", form, n, k), func() [][]float32 {
				xp, c, hout := append([]float32(nil), xp0...), append([]float32(nil), c0...), make([]float32, n)
				switch form {
				case "in order":
					LSTMStep(n, k, h, w, k, xp, bias, c, hout)
				case "reverse":
					LSTMStepReverse(n, k, h, w, k, xp, bias, c, hout)
				case "packed":
					LSTMStepPacked(n, k, h, pw, xp, bias, c, hout)
				default:
					LSTMStepPackedReverse(n, k, h, pw, xp, bias, c, hout)
				}
				return [][]float32{xp, c, hout}
			}})
		}
	}
	for _, c := range runs {
		var out [2][][]float32
		for i, l := range []level{levelAVX2, levelAVX512} {
			setLevel(l)
			out[i] = c.f()
		}
		for j := range out[0] {
			for i := range out[0][j] {
				if a, b := out[0][j][i], out[1][j][i]; math.Float32bits(a) != math.Float32bits(b) {
					t.Fatalf("%s: output %d[%d]: avx2 %v, avx512 %v", c.name, j, i, a, b)
				}
			}
		}
	}
}
