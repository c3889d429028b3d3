package dre

import (
	"math"

	"rnnserve/cachesim"
	"rnnserve/schedule"
)

// Per-core traffic. A plan is one serial trace, which is what a shared
// last-level cache sees; but a Partitioned plan runs on several cores at
// once, each with a private cache (L2) of its own, and each step says which
// worker runs it (schedule.Step.Worker). Replaying only one worker's steps
// through a cache the size of a private cache gives the bytes that core
// fetches from, and writes back to, the shared cache or DRAM. A plan that
// runs on one core (A, A+, a one-worker P) is all worker 0's.
//
// Caches are not kept coherent with each other: a line another worker
// writes stays valid in this worker's cache. Partitioned plans write each
// step's h to a fresh part of the layer's output sequence, so this misses
// only the re-reads of scratch every worker shares (hfull, with a
// projection).

// ReplayWorker is Replay restricted to the steps worker w runs: what one
// core's private cache sees. It fails as Replay does.
func ReplayWorker(p *schedule.Plan, l *Layout, w int, s cachesim.Sink) error {
	if err := check(p, l); err != nil {
		return err
	}
	replayWorker(p, l, w, s)
	return nil
}

// replayWorker is replay restricted to the steps of worker w: it sends
// their regions, in plan order, to s at the addresses of l.
func replayWorker(p *schedule.Plan, l *Layout, w int, s cachesim.Sink) {
	for i := range p.Steps {
		st := &p.Steps[i]
		if st.Worker != w {
			continue
		}
		st.Regions(func(r schedule.Region, write bool) { replayRegion(l, r, write, s) })
	}
}

// WarmRW is AvgRW once the cache is warm: the bytes read and written per
// inference averaged over every run after the first (cold) one, or the
// cold run's when Runs is 1.
func (r *Report) WarmRW() float64 {
	cold := r.Cold.Read + r.Cold.Write
	if r.Runs <= 1 {
		return float64(cold)
	}
	total := math.Round(r.AvgRW * float64(r.Runs)) // an integer byte count
	return max(total-float64(cold), 0) / float64(r.Runs-1)
}

// WarmBytes is the bytes read and written per run once the cache is warm:
// the average over every run after the first (cold) one, or the cold run's
// when there was only one. A server that has answered a request before
// pays this per request.
func (t Traffic) WarmBytes() float64 {
	cold := t.Cold.ReadBytes() + t.Cold.WriteBytes()
	if t.Runs <= 1 {
		return float64(cold)
	}
	total := t.Total.ReadBytes() + t.Total.WriteBytes()
	return float64(total-cold) / float64(t.Runs-1)
}
