package schedule

import (
	"math"
	"sync/atomic"
	"time"
)

// When a plan pays for the pool
//
// A tree plan or a generation wave split over the pool's workers ends
// sooner than on its caller alone only if its parts are long enough to
// pay for waking the helpers that run them: a parked helper starts its
// part a wake-up after the job begins (Pool.WakeUp, measured by the
// pool), and the caller then waits for it at the barrier. A small plan
// (a lone tree of a few dozen nodes, about 60 µs of work on two parts of
// 30) is slower on two workers than on one. So a plan whose parts are not
// given (TreeOptions.Workers and GenerateOptions.Workers 0) is built for
// the pool's workers only when parallelPays predicts it ends sooner,
// from two measured figures: the pool's wake-up time, and the program's
// time per flop of its products (workRate, from the parts it has run).
// Otherwise it is built for one worker and runs on the caller, without a
// job on the pool, and its steps say so (every Step.Worker 0).

// workRate is a program's measured time per flop: the time its plans'
// parts took over the flops of their products (everything else a part
// does, gathers and gates, is counted in that time), averaged as an
// exponentially weighted mean, a quarter of the weight on each new part.
// It is zero (unknown) until a part has been timed.
type workRate struct{ bits atomic.Uint64 }

// nsPerFlop is the current rate, 0 when unknown.
func (r *workRate) nsPerFlop() float64 {
	if r == nil {
		return 0
	}
	return math.Float64frombits(r.bits.Load())
}

// observe adds a part that did flops in d.
func (r *workRate) observe(d time.Duration, flops int64) {
	if r == nil || flops <= 0 || d <= 0 {
		return
	}
	v := float64(d) / float64(flops)
	if old := r.nsPerFlop(); old > 0 {
		v = old + (v-old)/4
	}
	r.bits.Store(math.Float64bits(v))
}

// stepFlops is the flops of a step's product (2·m·n·k), 0 for a step
// that is not one.
func stepFlops(s *Step) int64 {
	o, ok := s.op.(*gemmOp)
	if !ok {
		return 0
	}
	return 2 * int64(o.c.Rows) * int64(o.c.Cols) * int64(o.a.Cols)
}

// stepsFlops is the flops of the products of steps.
func stepsFlops(steps []Step) int64 {
	var n int64
	for i := range steps {
		n += stepFlops(&steps[i])
	}
	return n
}

// parallelPays reports whether a job whose part w of phase ph does
// work[ph*workers+w] flops is expected to end sooner on workers workers
// than all on the caller, at nsPerFlop and with helpers that start a
// part wakeNs after the job (or the barrier before it) begins:
//
//	serial:   the sum of all parts' times;
//	parallel: the sum of the phases' times. Phase 0 ends when the
//	          caller's part does, or a wake-up after the start when a
//	          helper's longest part does; each later phase adds its
//	          longest part, and a wake-up before a helper's part (the
//	          helper may have parked at the barrier). Parts in chunks of
//	          at most grain[ph] flops (chunkedPhases; grain nil: parts
//	          are whole) may end sooner: the caller works from the start
//	          and the helpers from a wake-up after it, on the phase's
//	          chunks whoever's part they are, so the phase ends when they
//	          have shared its work, plus half its largest chunk (the wait
//	          for another's chunk in progress), never before that chunk
//	          ends, and never after the caller would have run it alone.
//
// An unknown rate (no part timed yet) predicts no gain: the plan runs on
// the caller, where it is timed.
func parallelPays(work, grain []int64, workers int, nsPerFlop, wakeNs float64) bool {
	if workers < 2 || nsPerFlop <= 0 || len(work) < workers {
		return false
	}
	var serial, par float64
	for ph := 0; ph+workers <= len(work); ph += workers {
		row := work[ph : ph+workers]
		own := float64(row[0]) * nsPerFlop
		helper := 0.0 // the longest helper part, with its wait for a wake-up
		sum := own
		for _, f := range row[1:] {
			if f > 0 {
				helper = max(helper, wakeNs+float64(f)*nsPerFlop)
			}
			sum += float64(f) * nsPerFlop
		}
		serial += sum
		whole := max(own, helper)
		if grain == nil {
			par += whole
			continue
		}
		c := float64(grain[ph/workers]) * nsPerFlop
		shared := (sum+float64(workers-1)*wakeNs)/float64(workers) + c/2
		par += min(whole, sum, max(c, shared))
	}
	return par < serial
}

// pays reports whether a job of work (see parallelPays) on p ends sooner
// than on its caller, at rate. A nil pool or one of one worker never pays.
//
// The pool's wake-up time moves only with the jobs it runs, so a time
// measured high (a busy machine at NewPool, a burst) would keep every
// plan that does not pay at it off the pool for good. So one in
// probeEvery of the plans that would pay with no wake-up at all runs on
// the pool anyway, and its job measures the wake-up again. Such a job
// loses little when the helpers are as slow as measured: its caller runs
// its own part, then takes over the parts nobody has started, and waits
// only for a part (or, in chunks, a chunk) a helper started before it
// was done; what it pays for sure is waking them, a few microseconds.
// (Probing only the plans that would pay at half the time would keep a
// time measured far above every plan's length there for good.)
func (p *Pool) pays(work, grain []int64, workers int, rate *workRate) bool {
	if p == nil || p.n < 2 {
		return false
	}
	wake, r := float64(p.wakeNs.Load()), rate.nsPerFlop()
	if parallelPays(work, grain, workers, r, wake) {
		return true
	}
	return parallelPays(work, grain, workers, r, 0) && p.probes.Add(1)%probeEvery == 0
}

// probeEvery: see Pool.pays.
const probeEvery = 32
