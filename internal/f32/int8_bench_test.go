package f32

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkGemvI8 times y = W·x for an LSTM's recurrent matrix (4H×H)
// with int8 W on every path this CPU has, the quantization of x included,
// beside float32 (packed, as schedule P stores a large W_hh) and bf16
// (SetBytes: the weight bytes each reads).
//
//	go test ./internal/f32/ -run '^$' -bench 'BenchmarkGemvI8' -count 5
func BenchmarkGemvI8(b *testing.B) {
	for _, h := range []int{256, 512, 1024} {
		n, k := 4*h, h
		r := rand.New(rand.NewPCG(1, 1))
		w := newGuarded(r, n, k, k, 0, 0).s()
		x := newGuarded(r, 1, k, k, 0, 0).s()
		y := make([]float32, n)
		wp := make([]float32, n*k)
		PackNT(wp, n, k, w, k)
		wb := make([]uint16, len(w))
		ToBF16(wb, w)
		p := NewPackedI8(n, k)
		PackI8(p, n, k, w, k)
		q := make([]uint8, I8Stride(k))
		s := make([]float32, 1)
		run := func(name string, bytes int, f func()) {
			b.Run(fmt.Sprintf("H=%d/%s", h, name), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(bytes))
				for b.Loop() {
					f()
				}
			})
		}
		run("f32", 4*n*k, func() { GemmNTPacked(1, n, k, x, k, wp, 0, y, n) })
		run("bf16", 2*n*k, func() { GemmNTBF16(1, n, k, x, k, wb, k, 0, y, n) })
		saved := i8Path
		for _, path := range i8Paths() {
			i8Path = path
			run("int8-"+path.String(), len(p), func() {
				QuantizeI8(1, k, x, k, q, len(q), s)
				GemmNTI8(1, n, k, q, len(q), s, p, 0, y, n)
			})
		}
		i8Path = saved
	}
}

// BenchmarkGemmI8 times C = A·Wᵀ for m rows against a 4H×H matrix (the
// input projections of m time steps) with int8 W, A's quantization
// included, beside float32 (GemmNTOnce, as the schedules run it),
// reporting multiply-adds per second as GOP/s (2 operations each).
//
//	go test ./internal/f32/ -run '^$' -bench 'BenchmarkGemmI8' -count 5
func BenchmarkGemmI8(b *testing.B) {
	for _, h := range []int{256, 512, 1024} {
		for _, m := range []int{2, 3, 4, 16, 100} {
			n, k := 4*h, h
			r := rand.New(rand.NewPCG(1, 1))
			w := newGuarded(r, n, k, k, 0, 0).s()
			a := newGuarded(r, m, k, k, 0, 0).s()
			c := make([]float32, m*n)
			p := NewPackedI8(n, k)
			PackI8(p, n, k, w, k)
			q := make([]uint8, m*I8Stride(k))
			s := make([]float32, m)
			ops := 2 * float64(m) * float64(n) * float64(k)
			run := func(name string, f func()) {
				b.Run(fmt.Sprintf("H=%d/m=%d/%s", h, m, name), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						f()
					}
					b.ReportMetric(ops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GOP/s")
				})
			}
			run("f32", func() { GemmNTOnce(m, n, k, a, k, w, k, 0, c, n) })
			saved := i8Path
			for _, path := range i8Paths() {
				if path == i8Go {
					continue
				}
				i8Path = path
				run("int8-"+path.String(), func() {
					QuantizeI8(m, k, a, k, q, I8Stride(k), s)
					GemmNTI8(m, n, k, q, I8Stride(k), s, p, 0, c, n)
				})
			}
			i8Path = saved
		}
	}
}
