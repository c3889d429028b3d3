package main

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"rnnserve/internal/f32"
	"rnnserve/internal/hugepage"
	"rnnserve/schedule"
)

// The overlap probe's shapes: W in pieces of 64 rows of 1024 (256 KiB,
// about the block a packed product pulls before its other rows multiply
// it; a hidden-1024 LSTM's W_ih is 64 of them); the arithmetic beside
// each piece is nine rows against a piece in L2, what a ten-step
// projection multiplies after its first row has pulled the piece in.
const (
	overlapK     = 1024
	overlapPiece = 64
	overlapRows  = 9
)

// overlapWorker is one worker's buffers for the probe: w (every piece
// read once a pass, far past any cache), hot (one piece, held in L2) and
// the rows that multiply them.
type overlapWorker struct {
	w, hot, a, h, out []float32
	next              int // the next piece of w to stream
}

// overlapBytes is the W a worker passes for a budget of bytes: whole
// pieces, at least one.
func overlapBytes(bytes int64) int64 {
	const pb = 4 * overlapPiece * overlapK
	return max(bytes/pb, 1) * pb
}

func newOverlapWorker(bytes int64, seed uint64) *overlapWorker {
	const pf = overlapPiece * overlapK
	pieces := int(overlapBytes(bytes) / (4 * pf))
	r := rand.New(rand.NewPCG(seed, 2))
	src := make([]float32, pf)
	for i := range src {
		src[i] = float32(r.Float64() - 0.5)
	}
	k := &overlapWorker{h: src[:overlapK], out: make([]float32, overlapRows*overlapPiece)}
	k.w = hugepage.Floats(k, pieces*pf)
	for j := 0; j < pieces; j++ {
		f32.PackNT(k.w[j*pf:(j+1)*pf], overlapPiece, overlapK, src, overlapK)
	}
	k.hot = make([]float32, pf)
	f32.PackNT(k.hot, overlapPiece, overlapK, src, overlapK)
	k.a = make([]float32, overlapRows*overlapK)
	for i := range k.a {
		k.a[i] = float32(r.Float64() - 0.5)
	}
	return k
}

// stream is one row times the next piece of w, as the projections' first
// row brings W in (f32.GemmNTPacked with one row).
func (k *overlapWorker) stream() {
	const pf = overlapPiece * overlapK
	if (k.next+1)*pf > len(k.w) {
		k.next = 0
	}
	p := k.w[k.next*pf : (k.next+1)*pf]
	k.next++
	f32.GemmNTPacked(1, overlapPiece, overlapK, k.h, overlapK, p, 0, k.out[:overlapPiece], overlapPiece)
}

// arith is the other rows times the piece in L2.
func (k *overlapWorker) arith() {
	f32.GemmNTPacked(overlapRows, overlapPiece, overlapK, k.a, overlapK, k.hot, 0, k.out, overlapPiece)
}

// overlapResult is the probe's measurement on one core count: µs per
// 16 MiB of W (hidden 1024's W_ih), each worker on its own clock, of
// stream alone, arith alone (as many calls) and the two alternating
// piece by piece, from the repetition with the best share; share, the
// best and median over the repetitions of (stream + arith - both) /
// min(stream, arith).
type overlapResult struct {
	stream, arith, both float64
	share               rate
}

// measureOverlap runs the probe on every worker of p at once, -reps
// times, each pass of each kind over the worker's whole w (o.dram
// bytes, past the L3: from DRAM); the three kinds alternate pass by pass
// within a repetition of about -time.
func measureOverlap(p *schedule.Pool, o *options) overlapResult {
	nw := p.Workers()
	ws := make([]*overlapWorker, nw)
	p.Each(func(w int) { ws[w] = newOverlapWorker(o.dram, uint64(w)+1) }) // first touched by its reader
	var res overlapResult
	var shares []float64
	for r := 0; r < o.reps; r++ {
		d := make([][3]time.Duration, nw) // stream, arith, both: per worker
		passes := make([]int, nw)
		start := time.Now()
		p.Each(func(w int) {
			runtime.LockOSThread() // the thread CPU clock needs one thread
			defer runtime.UnlockOSThread()
			k := ws[w]
			pieces := len(k.w) / (overlapPiece * overlapK)
			clk := threadClock(o.cpu)
			for ; passes[w] == 0 || time.Since(start) < o.time; passes[w]++ {
				t0 := clk()
				for range pieces {
					k.stream()
				}
				t1 := clk()
				for range pieces {
					k.arith()
				}
				t2 := clk()
				for range pieces {
					k.stream()
					k.arith()
				}
				t3 := clk()
				d[w][0], d[w][1], d[w][2] = d[w][0]+t1-t0, d[w][1]+t2-t1, d[w][2]+t3-t2
			}
		})
		var secs [3]float64 // stream, arith, both: all workers
		var mib float64     // MiB of W each kind passed, all workers
		for w, k := range ws {
			for i := range secs {
				secs[i] += d[w][i].Seconds()
			}
			mib += float64(passes[w]*4*len(k.w)) / (1 << 20)
		}
		s := (secs[0] + secs[1] - secs[2]) / min(secs[0], secs[1])
		if r == 0 || s > slices.Max(shares) {
			per := 16 / mib * 1e6
			res.stream, res.arith, res.both = secs[0]*per, secs[1]*per, secs[2]*per
		}
		shares = append(shares, s)
	}
	res.share = summarize(shares)
	return res
}

// hostModel is the model held to two things the probes measured this
// host to do. The projections' two terms overlap only by share (the
// overlap probe's, clamped to 0..1): to the longer of the other weights'
// bytes (at otherBW) and the projections' arithmetic (proj seconds) it
// adds the shorter of the bytes and the arithmetic of every row but the
// first (which multiplies as it pulls W in) times one less the share; at
// share 1 that is the model, at 0 the pull and the other rows in turn,
// as the projections run where nothing overlaps. And the W_hh bytes take
// step times the model's time for them (step clamped to at least 1): the
// stepped probe's time a pass with a barrier after every pass over the
// model's free one (stepped.go), what the workers lose waiting for the
// slowest at every step.
func (s shapeResult) hostModel(hhBW, hitBW, otherBW, proj, share, step float64) float64 {
	hidden := min(max(share, 0), 1)
	rest := proj * float64(s.steps-1) / float64(s.steps)
	return s.model(hhBW, hitBW, otherBW, proj) + (1-hidden)*min(float64(s.otherBytes)/otherBW, rest) +
		(max(step, 1)-1)*s.hhTime(hhBW, hitBW, otherBW)
}
