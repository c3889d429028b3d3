package f32

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"rnnserve/internal/hugepage"
)

// TestPackNT checks that PackNT fills exactly n·k floats and that every
// row comes back from UnpackRow, for row counts around the panels of
// eight and columns around the chunks of eight.
func TestPackNT(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 20))
	for _, n := range []int{1, 7, 8, 9, 16, 23, 40} {
		for _, k := range []int{1, 3, 8, 9, 16, 21, 64} {
			ldw := k + 2
			w := newGuarded(r, n, k, ldw, 0, nan)
			dst := newGuarded(r, 1, n*k, n*k, 0, -7)
			for i := range dst.s() {
				dst.s()[i] = -7
			}
			PackNT(dst.s(), n, k, w.s(), ldw)
			dst.checkPads(t, fmt.Sprintf("n=%d k=%d packed", n, k))
			seen := 0
			for _, v := range dst.s() {
				if v != -7 {
					seen++
				}
			}
			if seen != n*k {
				t.Fatalf("n=%d k=%d: PackNT wrote %d of the %d floats", n, k, seen, n*k)
			}
			row := make([]float32, k)
			for j := 0; j < n; j++ {
				UnpackRow(row, n, k, dst.s(), j)
				for p, v := range row {
					if v != w.at(j, p) {
						t.Fatalf("n=%d k=%d: row %d column %d unpacks as %v, W has %v", n, k, j, p, v, w.at(j, p))
					}
				}
			}
		}
	}
}

// TestGemmNTPacked checks GemmNTPacked against GemmNT on the same W, bit
// for bit, on both paths: rows around the panels of eight and the
// blocks of wBlock rows, columns around the chunks of eight, one row and
// several, both betas, NaN around A, W and C (a kernel that read past
// them would turn the results or the pads into NaN); with the host's
// bounds, where the largest W (4 MiB) takes the prefetching path of a W
// that does not stay in L2, again with the once bound at 8 KiB, so that
// every W of 8 to 16 rows takes it, and with it at 1 GiB, so that none
// does and the first row pulls every block. Each product runs through
// GemmNTPackedNear too, whose groups take every row with the AVX-512
// products (no pull), and again with nearK at 0, where its rows are all
// too long for that and the first row pulls every block; and with
// panelK at 1 and nearK past every row, where the AVX-512 products take
// 16 rows or more panel by panel (passGroups) whatever the host's L1d.
func TestGemmNTPacked(t *testing.T) {
	small, large, long, panels := blocks(), blocks(), blocks(), blocks()
	small.once, large.once, long.nearK = 8<<10, 1<<30, 0
	panels.panelK, panels.nearK = 1, 1<<20
	for _, b := range []blocking{blocks(), small, large, long, panels} {
		t.Run(fmt.Sprintf("once=%d/nearK=%d/panelK=%d", b.once, b.nearK, b.panelK), func(t *testing.T) {
			withBlocking(t, b)
			testGemmNTPacked(t)
		})
	}
	for _, bad := range []func(){
		func() { GemmNTPacked(-1, 1, 1, nil, 1, nil, 0, nil, 1) },
		func() { GemmNTPacked(1, 2, 2, make([]float32, 2), 2, make([]float32, 3), 0, make([]float32, 2), 2) },
		func() { GemmNTPacked(2, 2, 2, make([]float32, 3), 2, make([]float32, 4), 0, make([]float32, 4), 2) },
		func() { PackNT(make([]float32, 3), 2, 2, make([]float32, 4), 2) },
		func() { UnpackRow(make([]float32, 2), 2, 2, make([]float32, 4), 2) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("bad arguments accepted")
				}
			}()
			bad()
		}()
	}
}

func testGemmNTPacked(t *testing.T) {
	impls(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(21, 21))
		for _, nk := range [][2]int{{8, 8}, {7, 5}, {9, 13}, {24, 1}, {64, 64}, {100, 131}, {2*wBlock(300) + 13, 300}, {200, 128}, {1030, 1024}} {
			n, k := nk[0], nk[1]
			ldw := k + 1
			w := newGuarded(r, n, k, ldw, 0, nan).s()
			p := newGuarded(r, 1, n*k, n*k, 0, nan)
			PackNT(p.s(), n, k, w, ldw)
			for _, m := range []int{1, 2, 3, 4, 5, 7, 8, 10, 16, 17, 40} {
				lda, ldc := k+3, n+5
				a := newGuarded(r, m, k, lda, 0, nan).s()
				c0 := newGuarded(r, m, n, ldc, 0, nan)
				for _, beta := range []float32{0, 0.5} {
					want := append([]float32(nil), c0.s()...)
					GemmNT(m, n, k, a, lda, w, ldw, beta, want, ldc)
					for _, near := range []bool{false, true} {
						got := &guarded{all: append([]float32(nil), c0.all...), off: c0.off, rows: m, cols: n, ld: ldc, guard: c0.guard, pad: nan}
						if near {
							GemmNTPackedNear(m, n, k, a, lda, p.s(), beta, got.s(), ldc)
						} else {
							GemmNTPacked(m, n, k, a, lda, p.s(), beta, got.s(), ldc)
						}
						got.checkPads(t, fmt.Sprintf("n=%d k=%d m=%d near=%v C", n, k, m, near))
						for i := 0; i < m; i++ {
							for j := 0; j < n; j++ {
								g, w := got.s()[i*ldc+j], want[i*ldc+j]
								if math.Float32bits(g) != math.Float32bits(w) {
									t.Fatalf("n=%d k=%d m=%d beta=%v near=%v: C[%d][%d] = %v, GemmNT gives %v", n, k, m, beta, near, i, j, g, w)
								}
							}
						}
					}
				}
			}
			p.checkPads(t, fmt.Sprintf("n=%d k=%d packed W", n, k))
		}
	})
}

// BenchmarkGemmPacked times C = A·Wᵀ with W row-major (GemmNT) and packed
// (GemmNTPacked, on huge pages as the schedules store it) for an LSTM's
// recurrent matrix (4H×H), one and several rows, reporting W's bytes per
// second; "read" is f32.Sum over the packed W, the rate a plain read of
// the same bytes gets, for the one-row product to be held against
// (64 KiB and 256 KiB stay in L2, 1 MiB fills it, 16 MiB comes from L3).
//
//	go test ./internal/f32/ -run '^$' -bench 'BenchmarkGemmPacked' -count 5
func BenchmarkGemmPacked(b *testing.B) {
	for _, h := range []int{64, 128, 256, 1024} {
		n, k := 4*h, h
		var w, p []float32 // built by the first sub-benchmark that runs
		build := func() {
			if w == nil {
				r := rand.New(rand.NewPCG(1, 1))
				w = newGuarded(r, n, k, k, 0, 0).s()
				p = hugepage.Floats(&p, n*k)
				PackNT(p, n, k, w, k)
			}
		}
		b.Run(fmt.Sprintf("H=%d/read", h), func(b *testing.B) {
			build()
			var sum float32
			b.SetBytes(int64(4 * n * k))
			for b.Loop() {
				sum += Sum(p)
			}
			if sum != sum {
				b.Fatal("NaN in W")
			}
		})
		for _, m := range []int{1, 2, 4, 16, 64, 100} {
			for _, packed := range []bool{false, true} {
				b.Run(fmt.Sprintf("H=%d/m=%d/packed=%v", h, m, packed), func(b *testing.B) {
					r := rand.New(rand.NewPCG(1, 1))
					build()
					a := newGuarded(r, m, k, k, 0, 0).s()
					c := make([]float32, m*n)
					b.SetBytes(int64(4 * n * k))
					for b.Loop() {
						if packed {
							GemmNTPacked(m, n, k, a, k, p, 0, c, n)
						} else {
							GemmNT(m, n, k, a, k, w, k, 0, c, n)
						}
					}
				})
			}
		}
	}
}

// BenchmarkNearRows times ten rows of A against a packed W of 1024 rows
// (hidden 256's W_ih: an LSTM's gates) that lies in L3 (2 to 8 MiB,
// past L2), input k long, both ways in turn within each iteration:
// "pull", the first row pulling each block in alone (GemmNTPacked), and
// "groups", every row in groups straight from L3 (GemmNTPackedNear with
// no bound on k). groups/pull above 1: the pull is faster. It is the
// measurement behind blocking.nearK, the longest rows for which
// GemmNTPackedNear takes the groups.
//
//	go test ./internal/f32/ -run '^$' -bench 'BenchmarkNearRows' -cpu 1 -count 3
func BenchmarkNearRows(b *testing.B) {
	const m, n = 10, 1024
	for _, k := range []int{512, 1024, 1152, 1280, 1536, 2048} {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			if !useZProducts {
				b.Skip("the groups take every row only with the AVX-512 products")
			}
			unbound := blocks()
			unbound.nearK = k
			withBlocking(b, unbound)
			r := rand.New(rand.NewPCG(1, 1))
			var p []float32
			p = hugepage.Floats(&p, n*k)
			PackNT(p, n, k, newGuarded(r, n, k, k, 0, 0).s(), k)
			a := newGuarded(r, m, k, k, 0, 0).s()
			c := make([]float32, m*n)
			var tP, tG time.Duration
			for b.Loop() {
				t0 := time.Now()
				GemmNTPacked(m, n, k, a, k, p, 0, c, n)
				t1 := time.Now()
				GemmNTPackedNear(m, n, k, a, k, p, 0, c, n)
				tP, tG = tP+t1.Sub(t0), tG+time.Since(t1)
			}
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(b.N) }
			b.ReportMetric(per(tP), "pull-µs")
			b.ReportMetric(per(tG), "groups-µs")
			b.ReportMetric(per(tG)/per(tP), "groups/pull")
		})
	}
}

// BenchmarkStreamBeside asks whether a product that streams its W from
// beyond L2 can hide other arithmetic: it times, in turn within each
// iteration, a one-row product over a 16 MiB packed W (hidden 1024's
// W_hh, 4096×1024) piece by piece ("stream", 64 KiB a call), seven rows
// against an 8×512 block that stays in L1 once per piece ("arith", the
// projection's kernels on a block in cache), and the two calls
// alternating ("both"). It reports each in µs per pass over W and
// overlap, the share of arith's time that both hides: (stream + arith -
// both) / arith, 1 where the arithmetic ran entirely in the stream's
// shadow, 0 where the two took their sum. from=L3 reads the one W every
// pass (it stays in a 32 MiB L3); from=DRAM takes the next of four.
//
//	go test ./internal/f32/ -run '^$' -bench 'BenchmarkStreamBeside' -count 3
func BenchmarkStreamBeside(b *testing.B) {
	const n, k, piece = 4096, 1024, 16 // piece: W rows a call
	const bm, bn, bk = 7, 8, 512       // the block in L1
	r := rand.New(rand.NewPCG(1, 1))
	w := newGuarded(r, n, k, k, 0, 0).s()
	var ws [][]float32
	for range 4 {
		p := hugepage.Floats(&ws, n*k)
		PackNT(p, n, k, w, k)
		ws = append(ws, p)
	}
	h := newGuarded(r, 1, k, k, 0, 0).s()
	out := make([]float32, n)
	blk := make([]float32, bn*bk)
	PackNT(blk, bn, bk, newGuarded(r, bn, bk, bk, 0, 0).s(), bk)
	a := newGuarded(r, bm, bk, bk, 0, 0).s()
	c := make([]float32, bm*bn)
	stream := func(p []float32, j int) {
		GemmNTPacked(1, piece, k, h, k, p[j*k:(j+piece)*k], 0, out[j:j+piece], piece)
	}
	arith := func() { GemmNTPacked(bm, bn, bk, a, bk, blk, 0, c, bn) }
	for _, from := range []string{"L3", "DRAM"} {
		b.Run("from="+from, func(b *testing.B) {
			var tS, tA, tB time.Duration
			next := 0
			pick := func() []float32 {
				if from == "L3" {
					return ws[0]
				}
				next++
				return ws[next%len(ws)]
			}
			for b.Loop() {
				p := pick()
				t0 := time.Now()
				for j := 0; j < n; j += piece {
					stream(p, j)
				}
				t1 := time.Now()
				for j := 0; j < n; j += piece {
					arith()
				}
				p = pick()
				t2 := time.Now()
				for j := 0; j < n; j += piece {
					stream(p, j)
					arith()
				}
				t3 := time.Now()
				tS, tA, tB = tS+t1.Sub(t0), tA+t2.Sub(t1), tB+t3.Sub(t2)
			}
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(b.N) }
			b.ReportMetric(per(tS), "stream-µs")
			b.ReportMetric(per(tA), "arith-µs")
			b.ReportMetric(per(tB), "both-µs")
			b.ReportMetric((per(tS)+per(tA)-per(tB))/per(tA), "overlap")
		})
	}
}
