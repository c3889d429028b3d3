package main

import (
	"runtime"
	"time"
)

// coreClock estimates the clock of the core it runs on, in Hz, from the
// time of a chain of dependent integer adds (one cycle each): the best of
// reps runs of about d each, per second of the thread's own CPU time
// (cpu) or of wall time. A run interrupted by another tenant only comes
// out slower, so the best is the clock the core ran at. It is the base
// for bytes per cycle: what a cache level delivers per cycle is a
// property of the core, where GB/s also moves with its frequency. It
// returns 0 where there is no assembly to time (other architectures,
// -tags purego).
func coreClock(d time.Duration, reps int, cpu bool) float64 {
	if chainAdds == 0 {
		return 0
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Size a run: 1 M adds take about 0.3 ms at 3 GHz.
	n := 1 << 17
	for {
		clk := threadClock(cpu)
		t0 := clk()
		addChain(n)
		if t := clk() - t0; t >= d/4 || n >= 1<<34 {
			n = int(float64(n) * float64(d) / float64(max(t, time.Microsecond)))
			break
		}
		n *= 4
	}
	n = max(n, 1)
	best := 0.0
	for range reps {
		clk := threadClock(cpu)
		t0 := clk()
		sum := addChain(n)
		t := (clk() - t0).Seconds()
		if sum != chainAdds*n {
			panic("roofline: the add chain summed wrongly")
		}
		if t > 0 {
			best = max(best, float64(sum)/t)
		}
	}
	return best
}
