package tree

import (
	"math"
	"testing"
)

// TestFastMath compares sigmoid and tanh with float64 math over [-30, 30]
// in steps of 1e-4 and at the extremes.
func TestFastMath(t *testing.T) {
	worstS, worstT := 0.0, 0.0
	for i := -300000; i <= 300000; i++ {
		x := float32(i) * 1e-4
		s := 1 / (1 + math.Exp(-float64(x)))
		worstS = max(worstS, math.Abs(float64(sigmoid(x))-s))
		worstT = max(worstT, math.Abs(float64(tanh(x))-math.Tanh(float64(x))))
	}
	if worstS > 2e-7 || worstT > 3e-7 {
		t.Errorf("max |error|: sigmoid %.3g, tanh %.3g", worstS, worstT)
	}
	for _, x := range []float32{-1e30, -100, 100, 1e30, float32(math.Inf(1)), float32(math.Inf(-1))} {
		if s, th := sigmoid(x), tanh(x); math.IsNaN(float64(s)) || math.IsNaN(float64(th)) || s < 0 || s > 1 || th < -1 || th > 1 {
			t.Errorf("x = %v: sigmoid %v, tanh %v", x, s, th)
		}
	}
}
