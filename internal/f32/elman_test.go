package f32

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestElmanGates checks the Elman nonlinearity, tanh and relu, against
// float64 for many widths (the assembly's eight-unit groups and their
// tails), in place and into another slice, with a guard after the
// output: tanh within Tanh's 3e-7, relu exactly (one float32 sum).
func TestElmanGates(t *testing.T) {
	impls(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 7))
		for _, n := range append(sizes[1:], 200, 1024) {
			for _, relu := range []bool{false, true} {
				for _, inPlace := range []bool{false, true} {
					y, bias := make([]float32, n), make([]float32, n)
					for i := range y {
						y[i], bias[i] = float32(4*r.NormFloat64()), float32(r.NormFloat64())
					}
					sum := make([]float32, n)
					for j := range sum {
						sum[j] = y[j] + bias[j]
					}
					h := make([]float32, n+1)
					h[n] = sentinel
					if inPlace {
						copy(h, y)
						ElmanGates(n, relu, h, bias, h)
					} else {
						ElmanGates(n, relu, y, bias, h)
					}
					for j := range n {
						if relu {
							if want := max(sum[j], 0); h[j] != want {
								t.Fatalf("n=%d relu unit %d: %v, want %v", n, j, h[j], want)
							}
						} else if d := math.Abs(float64(h[j]) - math.Tanh(float64(sum[j]))); d > 3e-7 {
							t.Fatalf("n=%d tanh unit %d: %v, want %v (off by %.3g)", n, j, h[j], math.Tanh(float64(sum[j])), d)
						}
					}
					if h[n] != sentinel {
						t.Fatalf("n=%d relu=%v: wrote past h", n, relu)
					}
				}
			}
		}
	})
}

// TestElmanGatesShort: slices shorter than n are a programmer's error.
func TestElmanGatesShort(t *testing.T) {
	defer func() {
		if recover() != errShortGat {
			t.Error("no panic for a short bias")
		}
	}()
	ElmanGates(4, false, make([]float32, 4), make([]float32, 3), make([]float32, 4))
}
