package cachesim

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// refLRU is the reference the fast simulators are checked against: a slice
// per set, most recently used first, searched linearly. It is meant to be
// obviously correct, not fast.
type refLRU struct {
	lineSize int64
	ways     int
	sets     [][]refLine
	stats    Stats
}

type refLine struct {
	line  int64
	dirty bool
}

func newRefLRU(cfg Config) *refLRU {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	ways := cfg.Ways
	if ways == FullyAssociative {
		ways = int(cfg.Lines())
	}
	return &refLRU{
		lineSize: cfg.LineSize,
		ways:     ways,
		sets:     make([][]refLine, cfg.Lines()/int64(ways)),
		stats:    Stats{LineSize: cfg.LineSize},
	}
}

func (r *refLRU) Read(addr, n int64)  { r.access(addr, n, false) }
func (r *refLRU) Write(addr, n int64) { r.access(addr, n, true) }

func (r *refLRU) access(addr, n int64, write bool) {
	if n == 0 {
		return
	}
	for line := addr / r.lineSize; line <= (addr+n-1)/r.lineSize; line++ {
		r.stats.Accesses++
		set := r.sets[line%int64(len(r.sets))]
		found := -1
		for i, l := range set {
			if l.line == line {
				found = i
			}
		}
		entry := refLine{line: line, dirty: write}
		if found >= 0 {
			r.stats.Hits++
			entry.dirty = entry.dirty || set[found].dirty
			set = append(set[:found], set[found+1:]...)
		} else {
			r.stats.Misses++
			if write {
				r.stats.WriteMisses++
			} else {
				r.stats.ReadMisses++
			}
			if len(set) == r.ways {
				if set[len(set)-1].dirty {
					r.stats.WriteBacks++
				}
				set = set[:len(set)-1]
			}
		}
		r.sets[line%int64(len(r.sets))] = slices.Insert(set, 0, entry)
	}
}

func (r *refLRU) Flush() {
	for _, set := range r.sets {
		for i := range set {
			if set[i].dirty {
				r.stats.WriteBacks++
				set[i].dirty = false
			}
		}
	}
}

// entries encodes the state like LRU.Snapshot: per set, most recently used
// first, (line+1)<<1 | dirty; set-associative sets are padded with zeros.
func (r *refLRU) entries() []uint64 {
	var out []uint64
	for _, set := range r.sets {
		for _, l := range set {
			e := uint64(l.line+1) << 1
			if l.dirty {
				e |= 1
			}
			out = append(out, e)
		}
		if len(r.sets) > 1 {
			for range r.ways - len(set) {
				out = append(out, 0)
			}
		}
	}
	return out
}

// op is one request of a test trace.
type op struct {
	write   bool
	addr, n int64
}

func (o op) String() string {
	kind := "R"
	if o.write {
		kind = "W"
	}
	return fmt.Sprintf("%s(%d,%d)", kind, o.addr, o.n)
}

func apply(s Sink, ops []op) {
	for _, o := range ops {
		if o.write {
			s.Write(o.addr, o.n)
		} else {
			s.Read(o.addr, o.n)
		}
	}
}

// Trace generators. line is the line size, lines the cache's capacity in
// lines and sets its number of sets.

// randomOps touches random byte ranges, up to three lines long, of a
// region of span lines, writing with probability pw.
func randomOps(rng *rand.Rand, count int, line, span int64, pw float64) []op {
	ops := make([]op, count)
	for i := range ops {
		n := 1 + rng.Int64N(3*line)
		ops[i] = op{write: rng.Float64() < pw, addr: rng.Int64N(span * line), n: n}
	}
	return ops
}

// cyclicOps reads lines 0..k-1 in order, rounds times, writing every
// third one.
func cyclicOps(rounds int, k, line int64) []op {
	var ops []op
	for range rounds {
		for l := range k {
			ops = append(ops, op{write: l%3 == 0, addr: l * line, n: line})
		}
	}
	return ops
}

// oneSetOps touches k lines that all map to set 0, in a cycle.
func oneSetOps(rounds int, k, line, sets int64) []op {
	var ops []op
	for range rounds {
		for l := range k {
			ops = append(ops, op{write: l%2 == 1, addr: l * sets * line, n: 1})
		}
	}
	return ops
}

// rangeOps reads and writes long, unaligned ranges that cross lines and
// wrap around the sets.
func rangeOps(rng *rand.Rand, count int, line, lines int64) []op {
	ops := make([]op, count)
	for i := range ops {
		ops[i] = op{
			write: i%4 == 3,
			addr:  rng.Int64N(4 * lines * line),
			n:     rng.Int64N(lines*line/2 + 1),
		}
	}
	return ops
}
