package f32

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"rnnserve/internal/cputime"
	"rnnserve/internal/hugepage"
)

// BenchmarkGemv times y = W·x for an LSTM's recurrent matrix (4H×H) with
// our kernels and with gonum's Sgemv (what rnn used before), reporting the
// weight bytes streamed per second. W is re-read every iteration, so the
// rate is that of the cache level W fits in (64 KiB at H=64 up to 16 MiB
// at H=1024).
//
//	go test ./internal/f32/ -run '^$' -bench 'BenchmarkGemv' -count 5
func BenchmarkGemv(b *testing.B) {
	for _, h := range []int{64, 128, 256, 512, 1024} {
		n, k := 4*h, h
		// Built by the first sub-benchmark that runs, so that a -bench
		// pattern naming one pays for its own operands only.
		var w, x, y []float32
		var wb []uint16
		run := func(name string, bytes int, f func()) {
			b.Run(fmt.Sprintf("H=%d/%s", h, name), func(b *testing.B) {
				if w == nil {
					r := rand.New(rand.NewPCG(1, 1))
					w = newGuarded(r, n, k, k, 0, 0).s()
					x = newGuarded(r, 1, k, k, 0, 0).s()
					y = make([]float32, n)
					wb = make([]uint16, len(w))
					ToBF16(wb, w)
				}
				b.ReportAllocs()
				b.SetBytes(int64(bytes))
				for b.Loop() {
					f()
				}
			})
		}
		run("gonum", 4*n*k, func() { blas32.Implementation().Sgemv(blas.NoTrans, n, k, 1, w, k, x, 1, 0, y, 1) })
		run("f32", 4*n*k, func() { GemvN(n, k, w, k, x, 0, y) })
		run("bf16", 2*n*k, func() { GemmNTBF16(1, n, k, x, k, wb, k, 0, y, n) })
		run("gonumT", 4*n*k, func() { blas32.Implementation().Sgemv(blas.Trans, k, n, 1, w, n, x, 1, 0, y, 1) })
		run("f32T", 4*n*k, func() { GemvT(k, n, w, n, x, 0, y) })
	}
}

// BenchmarkGemm times C = A·Wᵀ for m rows against a 4H×H matrix: the
// batched recurrent product and the input projections of m time steps,
// reporting multiply-adds per second as GFLOP/s (2 flops each).
//
//	go test ./internal/f32/ -run '^$' -bench 'BenchmarkGemm' -count 5
func BenchmarkGemm(b *testing.B) {
	for _, h := range []int{256, 512, 1024} {
		for _, m := range []int{4, 16, 32, 64, 100} {
			n, k := 4*h, h
			r := rand.New(rand.NewPCG(1, 1))
			w := newGuarded(r, n, k, k, 0, 0).s()
			a := newGuarded(r, m, k, k, 0, 0).s()
			c := make([]float32, m*n)
			flops := 2 * float64(m) * float64(n) * float64(k)
			b.Run(fmt.Sprintf("H=%d/m=%d/gonum", h, m), func(b *testing.B) {
				for b.Loop() {
					blas32.Implementation().Sgemm(blas.NoTrans, blas.Trans, m, n, k, 1, a, k, w, k, 0, c, n)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
			b.Run(fmt.Sprintf("H=%d/m=%d/f32", h, m), func(b *testing.B) {
				for b.Loop() {
					GemmNT(m, n, k, a, k, w, k, 0, c, n)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkGemmAccumulate times C += A·Wᵀ (beta 1) for the products of a
// batched step: each layer's recurrent product adds onto its input's
// (bytelm's H = 192 and two larger layers, m rows in the batch).
//
//	go test ./internal/f32/ -run '^$' -bench 'BenchmarkGemmAccumulate' -count 5
func BenchmarkGemmAccumulate(b *testing.B) {
	for _, h := range []int{192, 512, 1024} {
		for _, m := range []int{8, 20, 23, 64} {
			n, k := 4*h, h
			r := rand.New(rand.NewPCG(1, 1))
			w := newGuarded(r, n, k, k, 0, 0).s()
			a := newGuarded(r, m, k, k, 0, 0).s()
			c := newGuarded(r, m, n, n, 0, 0).s()
			flops := 2 * float64(m) * float64(n) * float64(k)
			b.Run(fmt.Sprintf("H=%d/m=%d", h, m), func(b *testing.B) {
				for b.Loop() {
					GemmNT(m, n, k, a, k, w, k, 1, c, n)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkLSTMGates times the fused gate kernel on one row of H units,
// with the kernels the build picks for this host, in wall time and in the
// process's CPU time (cpu-ns/op, steadier on a shared machine): time the
// AVX-512 gates against the AVX2 ones with a build of the tag noavx512
// beside the default one (scripts/ab_bench.py --metric cpu-ns/op).
//
//	go test ./internal/f32/ -run '^$' -bench 'BenchmarkLSTMGates|BenchmarkGRUGates'
func BenchmarkLSTMGates(b *testing.B) {
	for _, h := range []int{64, 192, 256, 1024} {
		r := rand.New(rand.NewPCG(1, 1))
		y := newGuarded(r, 1, 4*h, 4*h, 0, 0).s()
		bias := newGuarded(r, 1, 4*h, 4*h, 0, 0).s()
		c := newGuarded(r, 1, h, h, 0, 0).s()
		out := make([]float32, h)
		b.Run(fmt.Sprintf("H=%d", h), func(b *testing.B) {
			cpu := cpuMetric(b)
			for b.Loop() {
				LSTMGates(h, h, y, bias, c, out)
			}
			cpu()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(h), "ns/unit")
		})
	}
}

// BenchmarkGRUGates times the fused GRU gate kernel on one row of H units
// (hout apart from hprev), as BenchmarkLSTMGates does the LSTM's.
func BenchmarkGRUGates(b *testing.B) {
	for _, h := range []int{64, 192, 256, 1024} {
		r := rand.New(rand.NewPCG(1, 2))
		x := newGuarded(r, 1, 3*h, 3*h, 0, 0).s()
		p := newGuarded(r, 1, 3*h, 3*h, 0, 0).s()
		bih := newGuarded(r, 1, 3*h, 3*h, 0, 0).s()
		bhh := newGuarded(r, 1, 3*h, 3*h, 0, 0).s()
		hprev := newGuarded(r, 1, h, h, 0, 0).s()
		out := make([]float32, h)
		b.Run(fmt.Sprintf("H=%d", h), func(b *testing.B) {
			cpu := cpuMetric(b)
			for b.Loop() {
				GRUGates(h, h, x, p, bih, bhh, hprev, out)
			}
			cpu()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(h), "ns/unit")
		})
	}
}

// cpuMetric starts timing the process's CPU time; the function it returns
// reports it per iteration (cpu-ns/op), where the platform has it.
func cpuMetric(b *testing.B) func() {
	start, ok := cputime.Process()
	return func() {
		if end, _ := cputime.Process(); ok && b.N > 0 {
			b.ReportMetric(float64((end-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}

// BenchmarkGemmTree times GemmNT at the tree benchmark's shape, the Binary
// TreeLSTM's inner product (5H × 2H, H = 150), for one node (the recursive
// executor) and 32 (a height of the depth-batched one), beside gonum's
// Sgemm.
//
//	go test ./internal/f32/ -run '^$' -bench 'BenchmarkGemmTree' -benchtime 200ms
func BenchmarkGemmTree(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	n, k := 750, 300
	w := newGuarded(r, n, k, k, 0, 0).s()
	for _, m := range []int{1, 32} {
		a := newGuarded(r, m, k, k, 0, 0).s()
		c := make([]float32, m*n)
		flops := 2 * float64(m*n*k)
		for _, impl := range []struct {
			name string
			f    func()
		}{
			{"f32", func() { GemmNT(m, n, k, a, k, w, k, 0, c, n) }},
			{"gonum", func() { blas32.Implementation().Sgemm(blas.NoTrans, blas.Trans, m, n, k, 1, a, k, w, k, 0, c, n) }},
		} {
			b.Run(fmt.Sprintf("rows=%d/%s", m, impl.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					impl.f()
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkFinite times the finiteness check of a request's inputs
// (25600 values: Table I's hidden 256 at T = 100) on both paths.
//
//	go test ./internal/f32/ -run '^$' -bench 'BenchmarkFinite'
func BenchmarkFinite(b *testing.B) {
	x := make([]float32, 25600)
	for i := range x {
		x[i] = float32(i%97) * 0.37
	}
	defer setDefault()
	for _, l := range levels() {
		setLevel(l)
		b.Run(implName(), func(b *testing.B) {
			b.SetBytes(int64(4 * len(x)))
			for b.Loop() {
				if !Finite(x) {
					b.Fatal("not finite")
				}
			}
		})
	}
}

// BenchmarkGemvCold times the products over a W that comes from DRAM: each
// call takes the next of enough 4H×H matrices to fill 48 MiB, more than
// the L3, beside f32.Sum over the same matrices (a sequential read). At
// hidden 256 (rows of 1 KiB) the row-interleaved kernels read far below
// the sequential rate; GemmNTOnce's pull narrows the gap for a few rows.
//
//	go test ./internal/f32/ -run '^$' -bench BenchmarkGemvCold -count 3
func BenchmarkGemvCold(b *testing.B) {
	for _, h := range []int{256, 1024} {
		n, k := 4*h, h
		ws := make([][]float32, max(2, (48<<20)/(4*n*k)))
		r := rand.New(rand.NewPCG(1, 1))
		for i := range ws {
			ws[i] = newGuarded(r, n, k, k, 0, 0).s()
		}
		a := newGuarded(r, 10, k, k, 0, 0).s()
		c := make([]float32, 10*n)
		var sink float32
		run := func(name string, f func(w []float32)) {
			b.Run(fmt.Sprintf("H=%d/%s", h, name), func(b *testing.B) {
				b.SetBytes(int64(4 * n * k))
				i := 0
				for b.Loop() {
					f(ws[i%len(ws)])
					i++
				}
			})
		}
		run("sum", func(w []float32) { sink += Sum(w) })
		run("gemv", func(w []float32) { GemvN(n, k, w, k, a, 0, c) })
		run("m=10", func(w []float32) { GemmNT(10, n, k, a, k, w, k, 0, c, n) })
		run("m=10/once", func(w []float32) { GemmNTOnce(10, n, k, a, k, w, k, 0, c, n) })
		// Packed copies on huge pages, as the schedules store W_ih.
		ps := make([][]float32, len(ws))
		for i, w := range ws {
			ps[i] = hugepage.Floats(&ps, n*k)
			PackNT(ps[i], n, k, w, k)
		}
		pi := 0
		run("m=10/packed", func([]float32) { GemmNTPacked(10, n, k, a, k, ps[pi%len(ps)], 0, c, n); pi++ })
		_ = sink
	}
}

// BenchmarkStepAfterPause asks what a pause between runs costs the
// steps that follow it when W_hh is past L2: the alternating step P runs
// on one core at hidden 1024 (LSTMStepPackedChunked over a 16 MiB W, in
// L3), forty steps a round, each round after one of: nothing ("none"),
// a plain read of 16 MiB of other data ("read", as an input projection
// streams W_ih), or 4 ms of spinning that touches no memory ("pause").
// The kinds take turns round by round; each reports the mean of a
// round's first ten steps (first-µs) and of the other thirty (later-µs).
// Where the L3 is shared with other tenants' cores, a pause loses W
// lines to them as a read of other data does.
//
//	go test ./internal/f32/ -run '^$' -bench 'BenchmarkStepAfterPause' -cpu 1 -count 3
func BenchmarkStepAfterPause(b *testing.B) {
	const h = 1024
	r := rand.New(rand.NewPCG(1, 1))
	w := packChunked(b, newGuarded(r, 4*h, h, h, 0, 0).s(), h)
	other := hugepage.Floats(b, len(w))
	for i := range other {
		other[i] = 1
	}
	x := newGuarded(r, 1, h, h, 0, 0).s()
	xp0 := newGuarded(r, 1, 4*h, 4*h, 0, 0).s()
	bias := newGuarded(r, 1, 4*h, 4*h, 0, 0).s()
	c := newGuarded(r, 1, h, h, 0, 0).s()
	xp, hout := make([]float32, 4*h), make([]float32, h)
	kinds := []string{"none", "read", "pause"}
	var first, later [3]time.Duration
	var rounds [3]int
	var sum float32
	round := 0
	for b.Loop() {
		k := round % len(kinds)
		round++
		rounds[k]++
		switch kinds[k] {
		case "read":
			sum += Sum(other)
		case "pause":
			for t0 := time.Now(); time.Since(t0) < 4*time.Millisecond; {
			}
		}
		for s := range 40 {
			t0 := time.Now()
			copy(xp, xp0)
			LSTMStepPackedChunked(h, h, x, w, xp, bias, c, hout, s%2 == 1)
			if d := time.Since(t0); s < 10 {
				first[k] += d
			} else {
				later[k] += d
			}
		}
	}
	if sum != sum {
		b.Fatal("NaN in the other data")
	}
	for k, name := range kinds {
		n := float64(rounds[k])
		if n == 0 {
			continue
		}
		b.ReportMetric(float64(first[k].Nanoseconds())/1e3/(n*10), name+"-first-µs")
		b.ReportMetric(float64(later[k].Nanoseconds())/1e3/(n*30), name+"-later-µs")
	}
}

// packChunked stores an LSTM's gate-major W [4h][h] as P stores a W_hh
// slice that alternates: its rows in the chunked order (ChunkRow), packed
// (PackNT), on huge pages that owner keeps.
func packChunked[T any](owner *T, w []float32, h int) []float32 {
	src := make([]float32, len(w))
	for i := range 4 * h {
		copy(src[ChunkRow(h, i)*h:][:h], w[i*h:][:h])
	}
	p := hugepage.Floats(owner, len(w))
	PackNT(p, 4*h, h, src, h)
	return p
}

// BenchmarkLSTMStep times one LSTM step of one row (LSTMStep: W_hh·h and
// the gates in one call, W_hh [4H][H] row-major) and the same step with
// W_hh packed (LSTMStepPacked), reporting W's bytes per second. "turns"
// is the step P runs on one core where W_hh alternates
// (LSTMStepPackedChunked, packed and in the chunked order, forwards at
// even iterations and backwards at odd ones), and "read-turns" f32.Sum
// over the same W in the same order, chunk by chunk: the rate a plain
// read gets from a W read that way, for the step to be held against
// where W nearly fills a cache (1 MiB at H=256 beside a 1 MiB L2).
//
//	go test ./internal/f32/ -run '^$' -bench 'BenchmarkLSTMStep' -count 5
func BenchmarkLSTMStep(b *testing.B) {
	for _, h := range []int{64, 128, 256, 1024} {
		for _, form := range []string{"packed=false", "packed=true", "turns", "read-turns"} {
			b.Run(fmt.Sprintf("H=%d/%s", h, form), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 1))
				w := newGuarded(r, 4*h, h, h, 0, 0).s()
				switch form {
				case "packed=true":
					src := w
					w = hugepage.Floats(&w, len(w))
					PackNT(w, 4*h, h, src, h)
				case "turns", "read-turns":
					w = packChunked(&w, w, h)
				}
				x := newGuarded(r, 1, h, h, 0, 0).s()
				xp0 := newGuarded(r, 1, 4*h, 4*h, 0, 0).s()
				bias := newGuarded(r, 1, 4*h, 4*h, 0, 0).s()
				c := newGuarded(r, 1, h, h, 0, 0).s()
				xp, hout := make([]float32, 4*h), make([]float32, h)
				b.SetBytes(int64(16 * h * h))
				var sum float32
				odd := false
				for b.Loop() {
					copy(xp, xp0)
					switch form {
					case "packed=false":
						LSTMStep(h, h, x, w, h, xp, bias, c, hout)
					case "packed=true":
						LSTMStepPacked(h, h, x, w, xp, bias, c, hout)
					case "turns":
						LSTMStepPackedChunked(h, h, x, w, xp, bias, c, hout, odd)
					default:
						rows := 4 * StepChunk * h // one chunk's floats
						if odd {
							BackChunks(len(w), rows, func(lo, hi int) { sum += Sum(w[lo:hi]) })
						} else {
							for lo := 0; lo < len(w); lo += rows {
								sum += Sum(w[lo:min(lo+rows, len(w))])
							}
						}
					}
					odd = !odd
				}
				if sum != sum {
					b.Fatal("NaN in W")
				}
			})
		}
	}
}

// BenchmarkStepPaired holds P's one-core LSTM step over a W_hh that
// alternates (LSTMStepPackedChunked, "step"), its product alone without
// the gates ("product") and f32.Sum over the same W in the same order
// ("read") against each other in pairs, in one loop: A B B A, the
// direction turning at every call, so that both see the host's rate of
// the same moment and follow each other equally (on a shared VM, runs of
// a second apart moved by 10-20%, more than the gaps measured). It
// reports the first's time over the second's (a/b) and each one's GB/s.
//
//	go test ./internal/f32/ -run '^$' -bench 'BenchmarkStepPaired' -cpu 1 -count 3
func BenchmarkStepPaired(b *testing.B) {
	for _, h := range []int{256, 512, 1024} {
		owner := new(int)
		r := rand.New(rand.NewPCG(1, 1))
		w := packChunked(owner, newGuarded(r, 4*h, h, h, 0, 0).s(), h)
		x := newGuarded(r, 1, h, h, 0, 0).s()
		xp0 := newGuarded(r, 1, 4*h, 4*h, 0, 0).s()
		bias := newGuarded(r, 1, 4*h, 4*h, 0, 0).s()
		c := newGuarded(r, 1, h, h, 0, 0).s()
		xp, hout := make([]float32, 4*h), make([]float32, h)
		var sum float32
		forms := map[string]func(back bool){
			"step": func(back bool) {
				copy(xp, xp0)
				LSTMStepPackedChunked(h, h, x, w, xp, bias, c, hout, back)
			},
			"product": func(back bool) {
				copy(xp, xp0)
				if !back {
					GemmNTPacked(1, 4*h, h, x, h, w, 1, xp, 4*h)
					return
				}
				const m = 4 * StepChunk
				BackChunks(h, StepChunk, func(lo, _ int) {
					r := 4 * lo
					GemmNTPacked(1, m, h, x, h, w[r*h:], 1, xp[r:], m)
				})
			},
			"read": func(back bool) {
				if !back {
					sum += Sum(w)
					return
				}
				BackChunks(len(w), 4*StepChunk*h, func(lo, hi int) { sum += Sum(w[lo:hi]) })
			},
		}
		for _, pair := range [][2]string{{"step", "read"}, {"product", "read"}, {"step", "product"}} {
			b.Run(fmt.Sprintf("H=%d/%s-vs-%s", h, pair[0], pair[1]), func(b *testing.B) {
				var ta, tb time.Duration
				calls := 0
				timed := func(f func(bool)) time.Duration {
					t0 := time.Now()
					f(calls%2 == 1)
					calls++
					return time.Since(t0)
				}
				a, o := forms[pair[0]], forms[pair[1]]
				for b.Loop() {
					ta += timed(a)
					tb += timed(o)
					tb += timed(o)
					ta += timed(a)
				}
				bytes := float64(16*h*h) * float64(2*b.N)
				b.ReportMetric(ta.Seconds()/tb.Seconds(), "a/b")
				b.ReportMetric(bytes/ta.Seconds()/1e9, "a-GB/s")
				b.ReportMetric(bytes/tb.Seconds()/1e9, "b-GB/s")
			})
		}
		runtime.KeepAlive(owner)
		if sum != sum {
			b.Fatal("NaN in W")
		}
	}
}
