package main

import (
	"runtime"
	"slices"

	"rnnserve/internal/f32"
	"rnnserve/schedule"
)

// steppedChunk is the piece a backward pass sums at a time, last piece
// first: small next to an L2, large enough that each call to f32.Sum
// streams.
const steppedChunk = 16 << 10 // floats: 64 KiB

// pass sums buf once, forwards or, with back, piece by piece from the
// end: the order P reads a W_hh slice larger than its L2 in on
// alternate steps, so that a step starts on what the step before read
// last.
func pass(buf []float32, back bool) float32 {
	if !back {
		return f32.Sum(buf)
	}
	var s float32
	for hi := len(buf); hi > 0; hi -= steppedChunk {
		s += f32.Sum(buf[max(hi-steppedChunk, 0):hi])
	}
	return s
}

// measureStepped has every worker of p read a buffer of its own of the
// given size, forwards and backwards in turn, first each on its own for
// about -time (forEach, as the model's rates are measured: no barrier,
// each worker's passes on its own clock), then one pass a phase of
// p.Phases for about as long, as P's steps run: a phase ends when its
// slowest part does. It returns, over -reps repetitions, the best
// (smallest) and median of the stepped time a pass (the caller's clock,
// as measureShape times a plan) over the free time a pass the model's
// rates imply (each worker's rate added up: the harmonic mean of the
// workers' times). Above 1 is what the host's workers lose to waiting
// for each other at every step: one core slower than the other, the
// spread of each pass, and the barrier.
func measureStepped(p *schedule.Pool, bytes int64, o *options) rate {
	n := p.Workers()
	owner := new(int) // the buffers live until the measurement is done
	defer runtime.KeepAlive(owner)
	bufs := ownBuffers(p, owner, bytes)
	sink := make([]float32, n)
	passes := make([]int, n) // each worker's passes so far: even forwards, odd backwards
	var factors []float64
	for r := 0; r < o.reps; r++ {
		perSec, _ := forEach(p, o.time, o.cpu, func(int) float64 { return 1 }, func(w int) {
			sink[w] += pass(bufs[w], passes[w]%2 == 1)
			passes[w]++
		})
		free := float64(n) / perSec
		steps := max(int(o.time.Seconds()/free), 2)
		stepped := timeSteps(p, steps, o.cpu, func(ph, w int) { sink[w] += pass(bufs[w], ph%2 == 1) })
		factors = append(factors, stepped/free)
	}
	slices.Sort(factors)
	return rate{best: factors[0], median: factors[len(factors)/2]}
}

// timeSteps runs steps phases of f on p from a thread locked to its
// CPU clock and returns the seconds a phase on that clock.
func timeSteps(p *schedule.Pool, steps int, cpu bool, f func(ph, w int)) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	clk := threadClock(cpu)
	t0 := clk()
	p.Phases(steps, f)
	return (clk() - t0).Seconds() / float64(steps)
}
