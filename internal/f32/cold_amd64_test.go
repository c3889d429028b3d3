//go:build !purego

package f32

import (
	"math/rand/v2"
	"testing"
	"time"

	"rnnserve/internal/hugepage"
)

// BenchmarkColdRows asks whether the rows of a product can multiply a
// packed W as it streams in from DRAM, as the input projection of a
// cold start would like (T = 10 at hidden 1024: ten rows against a W_ih
// that comes from DRAM every inference). Within each iteration it times
// one pass each over a 16 MiB packed W (4096×1024) taken from the next of
// eight copies (128 MiB, past any L3 of the project's hosts): one row
// (pull, gemvPacked: how gemmPackedAsm's first row brings each block
// in), then two and three rows in one group that streams W itself
// (gemmPacked3, cold2 and cold3); and the same two groups over a 256 KiB
// piece of W that stays in L2, called 64 times for the same arithmetic
// (l2rows2, l2rows3). It reports each in µs per pass, and overlapN, the
// share of the group's arithmetic hidden under the stream: (pull +
// l2rowsN - coldN) / l2rowsN, 1 where the rows cost nothing beside the
// pull, 0 where cold took the pull and the arithmetic one after the
// other (what gemmPackedAsm does: the pull, then the groups from L2),
// below 0 where streaming with the arithmetic is slower than that.
//
//	go test ./internal/f32/ -run '^$' -bench 'BenchmarkColdRows' -cpu 1 -count 3
func BenchmarkColdRows(b *testing.B) {
	if !useAsm {
		b.Skip("the packed kernels need AVX2 and FMA")
	}
	const n, k, copies = 4096, 1024, 8
	const piece = 64 * k // 64 rows of W: 256 KiB
	r := rand.New(rand.NewPCG(1, 1))
	w := newGuarded(r, n, k, k, 0, 0).s()
	var ws [][]float32
	for range copies {
		p := hugepage.Floats(&ws, n*k)
		PackNT(p, n, k, w, k)
		ws = append(ws, p)
	}
	a := newGuarded(r, 3, k, k, 0, 0).s()
	c := make([]float32, 3*n)
	next := 0
	cold := func() []float32 { next++; return ws[next%copies] }
	var pull, cold2, cold3, l2rows2, l2rows3 time.Duration
	timed := func(d *time.Duration, f func()) {
		t0 := time.Now()
		f()
		*d += time.Since(t0)
	}
	for b.Loop() {
		p := cold()
		timed(&pull, func() { gemvPacked(n/8, k, &a[0], &p[0], &c[0], 0) })
		p = cold()
		timed(&cold2, func() { gemmPacked3(n/8, k/8, 2, &a[0], k, &p[0], &c[0], n, 0, &p[0], 0) })
		p = cold()
		timed(&cold3, func() { gemmPacked3(n/8, k/8, 3, &a[0], k, &p[0], &c[0], n, 0, &p[0], 0) })
		hot := ws[0][:piece]
		gemmPacked3(8, k/8, 3, &a[0], k, &hot[0], &c[0], n, 0, &hot[0], 0) // into L2
		for _, g := range []struct {
			rows int
			d    *time.Duration
		}{{2, &l2rows2}, {3, &l2rows3}} {
			timed(g.d, func() {
				for range n * k / piece {
					gemmPacked3(8, k/8, g.rows, &a[0], k, &hot[0], &c[0], n, 0, &hot[0], 0)
				}
			})
		}
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(b.N) }
	b.ReportMetric(us(pull), "pull-µs")
	b.ReportMetric(us(cold2), "cold2-µs")
	b.ReportMetric(us(cold3), "cold3-µs")
	b.ReportMetric(us(l2rows2), "l2rows2-µs")
	b.ReportMetric(us(l2rows3), "l2rows3-µs")
	b.ReportMetric((us(pull)+us(l2rows2)-us(cold2))/us(l2rows2), "overlap2")
	b.ReportMetric((us(pull)+us(l2rows3)-us(cold3))/us(l2rows3), "overlap3")
}
