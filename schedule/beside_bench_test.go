package schedule

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat"

	"rnnserve/internal/benchcpu"
	"rnnserve/internal/f32"
	"rnnserve/rnn"
)

// settledFrom is the first time step whose phase BenchmarkPBesideReads
// compares: a layer's first ten steps also refill the L3 lines its input
// projection took from W_hh (BenchmarkStepAfterPause), which the reads,
// run right after the steps, would find in place.
const settledFrom = 10

// whhRead is what one recurrent product of a step reads of its W_hh: the
// floats, and whether backwards, in pieces of chunk floats from the last.
type whhRead struct {
	w     []float32
	back  bool
	chunk int
}

// read sums r's floats in the order its product reads them.
func (r whhRead) read() float32 {
	if !r.back {
		return f32.Sum(r.w)
	}
	var s float32
	f32.BackChunks(len(r.w), r.chunk, func(lo, hi int) { s += f32.Sum(r.w[lo:hi]) })
	return s
}

// recurrentW is the W_hh s's recurrent product multiplies and whether
// it reads it backwards; ok false where s has none (an input projection,
// gates alone, anything else).
func recurrentW(s Step) (m Mat, back, ok bool) {
	switch o := s.op.(type) {
	case *lstmStepOp:
		return o.w, o.reverse, true
	case *gemmOp:
		if !o.once {
			return o.w, o.reverse, true
		}
	}
	return Mat{}, false, false
}

// settledReads lists the phases of p's settled steps (later steps of a
// layer from settledFrom on) and, for each and each worker, what its
// recurrent products read of W_hh: reads[i*workers+w] for the i-th phase.
func settledReads(p *Plan) (phases []int, reads [][]whhRead) {
	kind := phaseKinds(p)
	W := p.workers
	at := map[int]int{} // phase: its index in phases
	for _, s := range p.Steps {
		if kind[s.Phase] != phaseSteps || s.Layer < 0 || s.T < settledFrom {
			continue
		}
		m, back, ok := recurrentW(s)
		if !ok {
			continue
		}
		i, ok := at[s.Phase]
		if !ok {
			i = len(phases)
			at[s.Phase] = i
			phases = append(phases, s.Phase)
			reads = append(reads, make([][]whhRead, W)...)
		}
		w := m.Buf.F32[m.Off : m.Off+(m.Rows-1)*m.LD+m.Cols]
		reads[i*W+s.Worker] = append(reads[i*W+s.Worker], whhRead{w: w, back: back, chunk: reverseRows * m.Cols})
	}
	return phases, reads
}

// besideSink keeps the reads' sums alive.
var besideSink float32

// BenchmarkPBesideReads holds P's settled steps against reads of the very
// bytes they multiply, taken within the same few milliseconds, so that
// the host's rate of the moment is in both: on the project's VMs a core
// reads 15-30% slower for stretches of seconds, which a model measured
// minutes apart cannot tell from our own cost. Each iteration is a round:
//
//  1. one inference of P (GOMAXPROCS workers, float32, batch 1), every
//     worker's part of every phase timed; steps is the settled phases'
//     longest parts, a step;
//  2. the same phases again on the pool, each part only reading the W_hh
//     its products multiply, in their order (f32.Sum; backwards in the
//     pieces a reversed product takes): stepped, a step;
//  3. every worker reading the same bytes for all those phases on its
//     own, with no barrier between them: free, a step at the rate the
//     roofline model assumes (the workers' rates added up: their number
//     over the sum of one over each one's time).
//
// Over the rounds it reports the medians of the three (µs/step); the
// median, lowest and highest of steps/free (how far P is from reads of
// its W_hh at the moment's rate), steps/stepped (P's own cost above the
// reads and the barrier that hold it: arithmetic, gates, the hand-off of
// h; products/stepped holds the products with W_hh alone against the
// reads, each phase's slower part) and stepped/free (what reads alone lose to meeting at a barrier on
// this host); and the correlation over rounds of steps with free (near 1
// where P's slow rounds are the host's). Shapes at T = 100 only, where
// there are settled steps to compare; two workers or more, one -cpu
// value a process (benchcpu).
//
//	go test ./schedule/ -run '^$' -bench 'PBesideReads/cell=gru/hidden=1024/layers=1$' -cpu 2 -benchtime 60x
func BenchmarkPBesideReads(b *testing.B) {
	benchcpu.One(b)
	const T = 100
	for _, cell := range []rnn.CellKind{rnn.LSTM, rnn.GRU} {
		for _, hidden := range []int{256, 1024} {
			for _, layers := range []int{1, 4} {
				b.Run(fmt.Sprintf("cell=%v/hidden=%d/layers=%d", cell, hidden, layers), func(b *testing.B) {
					net := randomNet(b, rnn.Config{Cell: cell, Input: hidden, Hidden: hidden, Layers: layers}, 1)
					benchBeside(b, net, T)
				})
			}
		}
	}
}

func benchBeside(b *testing.B, net *rnn.Network, T int) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("P on one core runs no phases: see BenchmarkTableIPKernels")
	}
	pool, err := NewPool(PoolOptions{Workers: runtime.GOMAXPROCS(0)})
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	p := poolPlan(b, net, T, pool)
	W := p.workers
	phases := len(p.span) / W
	p.Run() // every worker's slices filled before the first round
	settled, reads := settledReads(p)
	if len(settled) == 0 {
		b.Fatal("no settled steps")
	}
	n := len(settled)
	recurrent := make([]bool, len(p.Steps)) // the steps that read W_hh
	for i, s := range p.Steps {
		switch o := s.op.(type) {
		case *lstmStepOp:
			recurrent[i] = true
		case *gemmOp:
			recurrent[i] = !o.once
		}
	}
	took := make([]time.Duration, phases*W)
	prodTook := make([]time.Duration, phases*W) // of it, the products with W_hh
	run := func(ph, w int) {
		t0 := time.Now()
		var prod time.Duration
		sp := p.span[ph*W+w]
		for i := sp[0]; i < sp[1]; i++ {
			if !recurrent[i] {
				p.Steps[i].op.run()
				continue
			}
			t1 := time.Now()
			p.Steps[i].op.run()
			prod += time.Since(t1)
		}
		took[ph*W+w] = time.Since(t0)
		prodTook[ph*W+w] = prod
	}
	readTook := make([]time.Duration, n*W)
	sink := make([]float32, W)
	stepped := func(i, w int) {
		t0 := time.Now()
		for _, r := range reads[i*W+w] {
			sink[w] += r.read()
		}
		readTook[i*W+w] = time.Since(t0)
	}
	freeTook := make([]time.Duration, W)
	free := func(_, w int) {
		t0 := time.Now()
		for i := range n {
			for _, r := range reads[i*W+w] {
				sink[w] += r.read()
			}
		}
		freeTook[w] = time.Since(t0)
	}
	longest := func(d []time.Duration, i int) time.Duration { return slices.Max(d[i*W : i*W+W]) }
	var steps, prods, step, fr []float64 // µs a step, each round
	for b.Loop() {
		pool.Phases(phases, run)
		pool.Phases(n, stepped)
		pool.Phases(1, free)
		var s, pr, r time.Duration
		for i, ph := range settled {
			s += longest(took, ph)
			pr += longest(prodTook, ph)
			r += longest(readTook, i)
		}
		prods = append(prods, pr.Seconds()*1e6/float64(n))
		var rate float64 // steps a second, the workers' added up
		for _, d := range freeTook {
			rate += float64(n) / d.Seconds()
		}
		steps = append(steps, s.Seconds()*1e6/float64(n))
		step = append(step, r.Seconds()*1e6/float64(n))
		fr = append(fr, float64(W)/rate*1e6)
	}
	for _, v := range sink {
		besideSink += v
	}
	ratio := func(a, c []float64) []float64 {
		out := make([]float64, len(a))
		for i := range a {
			out[i] = a[i] / c[i]
		}
		return out
	}
	b.ReportMetric(float64(W), "workers")
	b.ReportMetric(median(steps), "steps-µs/step")
	b.ReportMetric(median(prods), "products-µs/step")
	b.ReportMetric(median(step), "stepped-µs/step")
	b.ReportMetric(median(fr), "free-µs/step")
	for _, q := range []struct {
		name string
		v    []float64
	}{
		{"steps/free", ratio(steps, fr)},
		{"steps/stepped", ratio(steps, step)},
		{"products/stepped", ratio(prods, step)},
		{"stepped/free", ratio(step, fr)},
	} {
		b.ReportMetric(median(q.v), q.name)
		b.ReportMetric(slices.Min(q.v), q.name+"-lowest")
		b.ReportMetric(slices.Max(q.v), q.name+"-highest")
	}
	b.ReportMetric(slices.Max(fr)/slices.Min(fr), "free-highest/lowest")
	b.ReportMetric(stat.Correlation(steps, fr, nil), "steps-free-correlation")
}

// median is the middle value of v (the mean of the two middle ones for
// an even count), v unchanged.
func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// TestSettledReads checks what BenchmarkPBesideReads reads against the
// plan: one phase a settled step of every layer, and in each, the
// workers' reads together all of that layer's W_hh once.
func TestSettledReads(t *testing.T) {
	pool, err := NewPool(PoolOptions{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, cell := range []rnn.CellKind{rnn.LSTM, rnn.GRU} {
		const H, layers, T = 64, 2, 14
		p := poolPlan(t, randomNet(t, rnn.Config{Cell: cell, Input: H, Hidden: H, Layers: layers}, 1), T, pool)
		p.Run()
		phases, reads := settledReads(p)
		if want := layers * (T - settledFrom); len(phases) != want {
			t.Fatalf("%v: %d settled phases, want %d", cell, len(phases), want)
		}
		for i := range phases {
			floats := 0
			for w := range 2 {
				if len(reads[i*2+w]) != 1 {
					t.Fatalf("%v: phase %d worker %d has %d reads, want 1", cell, i, w, len(reads[i*2+w]))
				}
				floats += len(reads[i*2+w][0].w)
			}
			if want := cell.Gates() * H * H; floats != want {
				t.Errorf("%v: phase %d reads %d floats of W_hh, want %d", cell, i, floats, want)
			}
		}
	}
}
