package dre

import (
	"slices"

	"rnnserve/cachesim"
)

// Cache is a simulated cache a plan is replayed through:
// *cachesim.LRU and *cachesim.ExtentLRU implement it.
//
// Stats counts the requests since the last ResetStats; ResetStats keeps the
// contents. Snapshot captures the whole state such that two equal snapshots
// behave identically on any future requests. A cache that also has a
// method Extents([]cachesim.Extent) []cachesim.Extent returning an equally
// exact canonical form (as ExtentLRU does) is compared through it instead,
// which is cheaper.
type Cache interface {
	cachesim.Sink
	Stats() cachesim.Stats
	ResetStats()
	Snapshot() cachesim.Snapshot
}

var (
	_ Cache = (*cachesim.LRU)(nil)
	_ Cache = (*cachesim.ExtentLRU)(nil)
)

// NewCache returns an empty simulator for cfg: an ExtentLRU when cfg is
// fully associative (one set), else an LRU. It applies cachesim's defaults,
// so a zero Ways means cachesim.DefaultWays here; Options.EnsureDefaults is
// what makes it fully associative.
func NewCache(cfg cachesim.Config) (Cache, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Sets() == 1 {
		return cachesim.NewExtentLRU(cfg)
	}
	return cachesim.NewLRU(cfg)
}

// Traffic is what Runs back-to-back replays of a plan cost, the first from
// an empty cache.
type Traffic struct {
	Runs      int
	Total     cachesim.Stats // summed over all runs
	Cold      cachesim.Stats // run 1
	Last      cachesim.Stats // the last run simulated: the steady state once Period is 1
	Simulated int            // runs replayed through the cache; the others repeat a cycle
	Period    int            // length of the cycle the cache's state entered, 0 if none was found
}

// simulate runs replay runs times through c; with shortcut it stops once
// the cache's state after a run equals its state after an earlier one.
func simulate(c Cache, runs int, replay func(cachesim.Sink), shortcut bool) Traffic {
	tr := Traffic{Runs: runs}
	per := make([]cachesim.Stats, 0, min(runs, 8)) // per[i]: run i+1
	states := []cacheState{capture(c)}             // states[r]: after run r
	seen := map[uint64][]int{states[0].fp: {0}}
	for r := 1; r <= runs; r++ {
		c.ResetStats()
		replay(c)
		per = append(per, c.Stats())
		tr.Total = addStats(tr.Total, per[r-1], 1)
		tr.Simulated = r
		if !shortcut || r == runs {
			continue
		}
		st := capture(c)
		for _, j := range seen[st.fp] {
			if !states[j].equal(st) {
				continue
			}
			// Runs j+1..r, per[j:r], repeat for ever.
			cycle := per[j:r]
			left := runs - r
			var sum cachesim.Stats
			for _, s := range cycle {
				sum = addStats(sum, s, 1)
			}
			tr.Total = addStats(tr.Total, sum, int64(left/len(cycle)))
			for _, s := range cycle[:left%len(cycle)] {
				tr.Total = addStats(tr.Total, s, 1)
			}
			tr.Period = len(cycle)
			tr.Cold, tr.Last = per[0], per[r-1]
			return tr
		}
		states = append(states, st)
		seen[st.fp] = append(seen[st.fp], r)
	}
	tr.Cold, tr.Last = per[0], per[len(per)-1]
	return tr
}

// addStats returns a + k·b, counter by counter.
func addStats(a, b cachesim.Stats, k int64) cachesim.Stats {
	a.LineSize = b.LineSize
	a.Accesses += k * b.Accesses
	a.Hits += k * b.Hits
	a.Misses += k * b.Misses
	a.ReadMisses += k * b.ReadMisses
	a.WriteMisses += k * b.WriteMisses
	a.WriteBacks += k * b.WriteBacks
	return a
}

// cacheState is an exact copy of a cache's state and its fingerprint.
type cacheState struct {
	fp      uint64
	compact bool
	ext     []cachesim.Extent
	snap    cachesim.Snapshot
}

type extentLister interface {
	Extents(dst []cachesim.Extent) []cachesim.Extent
}

func capture(c Cache) cacheState {
	if e, ok := c.(extentLister); ok {
		ext := e.Extents(nil)
		return cacheState{fp: hashExtents(ext), compact: true, ext: ext}
	}
	s := c.Snapshot()
	return cacheState{fp: s.Fingerprint(), snap: s}
}

func (s cacheState) equal(o cacheState) bool {
	if s.compact != o.compact {
		return false
	}
	if s.compact {
		return slices.Equal(s.ext, o.ext)
	}
	return s.snap.Equal(o.snap)
}

// hashExtents mixes the extents, in order, into 64 bits (splitmix64 steps).
func hashExtents(ext []cachesim.Extent) uint64 {
	h := uint64(len(ext))
	mix := func(v uint64) {
		h += v + 0x9e3779b97f4a7c15
		h ^= h >> 30
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 27
		h *= 0x94d049bb133111eb
		h ^= h >> 31
	}
	for _, e := range ext {
		d := uint64(0)
		if e.Dirty {
			d = 1
		}
		mix(uint64(e.First))
		mix(uint64(e.Last)<<1 | d)
	}
	return h
}
