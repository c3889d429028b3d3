//go:build !purego

package f32

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSplitBF16 checks the assembly's split of x into bf16 pairs bit for
// bit against splitBF16Go, the bound |hi+lo-x| <= 2^-16·|x|, the zero
// padding of the last chunk and the guard after it.
func TestSplitBF16(t *testing.T) {
	if !hostBF16 {
		t.Skip("no AVX512_BF16 on this CPU or build")
	}
	r := rand.New(rand.NewPCG(8, 8))
	for _, k := range []int{1, 5, 16, 17, 31, 32, 33, 64, 100, 1024} {
		x := make([]float32, k+3)
		for i := range x {
			x[i] = float32((2*r.Float64() - 1) * math.Exp(20*r.Float64()-10))
		}
		x[k], x[k+1], x[k+2] = nan, nan, nan // not read
		n := 64 * ((k + 31) / 32)
		got, want := make([]uint16, n+7), make([]uint16, n+7)
		for i := range got {
			got[i], want[i] = 0x5555, 0x5555
		}
		splitBF16DP(k, &x[0], &got[0])
		splitBF16Go(k, x, want)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("k=%d: value %d: asm %#04x, go %#04x", k, i, got[i], want[i])
			}
		}
		for i, v := range x[:k] {
			c, l := i/32, i%32
			s := float64(bf16(got[64*c+l])) + float64(bf16(got[64*c+32+l]))
			if d := math.Abs(s - float64(v)); d > math.Ldexp(math.Abs(float64(v)), -16) {
				t.Fatalf("k=%d: x[%d] = %v split into %v (off by %g)", k, i, v, s, d)
			}
		}
	}
}
