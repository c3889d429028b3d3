package cachesim

// Profile is a one-pass stack-distance profile (Mattson et al. 1970): from
// one pass over a trace it gives the Stats of a fully associative
// write-back, write-allocate LRU cache of every size at once, equal to
// what an LRU with that Config would count on the same trace.
// It is not safe for concurrent use.
//
// The stack distance of an access is the line's position in the LRU stack
// (1 = most recently used), that is, one more than the number of distinct
// lines touched since the line's previous access. The access hits in every
// cache of at least that many lines and misses in all smaller ones; a first
// access misses everywhere. Distances come from a Fenwick tree over access
// times in which each line marks its latest access: O(log n) per access,
// with n the number of distinct lines.
//
// Write-backs follow Thompson and Smith (1989). For each line the profile
// keeps the smallest cache size, in lines, from which on the line is dirty:
// every cache at least that large holds a dirty copy, or evicted one in a
// write-back not yet counted. A write makes the line dirty in every cache.
// An access at distance d shows that every cache smaller than d lines
// evicted the line since its previous access, so each of them that had it
// dirty made one write-back; afterwards only the caches of at least d
// lines that had it dirty still do, or all caches if the access writes.
// Evictions are so counted when a line comes back; Stats, Flush and
// ResetStats first count the pending ones from each dirty line's current
// depth in the stack, so that the counts equal an LRU's at any point.
type Profile struct {
	lineSize int64
	shift    uint

	index   lineTable  // line -> position in lines
	lines   []profLine // every line seen
	tree    []int32    // Fenwick tree over times 1..len(tree)-1: 1 where a line last was
	now     int        // time of the latest access
	hist    [2][]int64 // [write][d]: accesses at stack distance d (index 0 unused)
	cold    [2]int64   // [write]: first accesses
	wb      []int64    // write-backs by cache size in lines, as differences: wb(C) = sum(wb[1..C])
	settled bool       // no access since the last settle
}

type profLine struct {
	last      int // time of the latest access
	dirtyFrom int // smallest cache size, in lines, with the line dirty; 0 if none
}

// NewProfile returns an empty profile for lines of lineSize bytes; zero
// means DefaultLineSize.
func NewProfile(lineSize int64) (*Profile, error) {
	if lineSize == 0 {
		lineSize = DefaultLineSize
	}
	if err := validateLineSize(lineSize); err != nil {
		return nil, err
	}
	return &Profile{
		lineSize: lineSize,
		shift:    lineShift(lineSize),
		index:    newLineTable(0),
		tree:     make([]int32, 1024),
	}, nil
}

// LineSize returns the profile's line size in bytes.
func (p *Profile) LineSize() int64 { return p.lineSize }

// Read records a read of n bytes at addr, one access per line.
func (p *Profile) Read(addr, n int64) { p.record(addr, n, 0) }

// Write records a write of n bytes at addr, one access per line.
func (p *Profile) Write(addr, n int64) { p.record(addr, n, 1) }

func (p *Profile) record(addr, n int64, w int) {
	first, last, ok := lineRange(addr, n, p.shift)
	if !ok {
		return
	}
	p.settled = false
	for line := first; ; line++ {
		p.access(line, w)
		if line == last {
			return
		}
	}
}

func (p *Profile) access(line uint64, w int) {
	p.now++
	if p.now == len(p.tree) {
		p.compact()
	}
	i, ok := p.index.get(line)
	if !ok {
		p.cold[w]++
		p.index.put(line, int32(len(p.lines)))
		p.lines = append(p.lines, profLine{last: p.now, dirtyFrom: w})
		p.add(p.now, 1)
		return
	}
	l := &p.lines[i]
	d := p.depth(l.last)
	h := p.hist[w]
	for len(h) <= d {
		h = append(h, 0)
	}
	h[d]++
	p.hist[w] = h
	p.evicted(l, d)
	if w != 0 {
		l.dirtyFrom = 1
	}
	p.add(l.last, -1)
	p.add(p.now, 1)
	l.last = p.now
}

// depth returns the stack position of the line last accessed at time t.
func (p *Profile) depth(t int) int {
	return len(p.lines) - p.prefix(t) + 1
}

// evicted counts the write-backs of l, now at depth d, in caches of
// l.dirtyFrom..d-1 lines, and marks it clean in them.
func (p *Profile) evicted(l *profLine, d int) {
	if l.dirtyFrom == 0 || d <= l.dirtyFrom {
		return
	}
	for len(p.wb) <= d {
		p.wb = append(p.wb, 0)
	}
	p.wb[l.dirtyFrom]++
	p.wb[d]--
	l.dirtyFrom = d
}

// settle counts the write-backs of dirty lines evicted since their last
// access.
func (p *Profile) settle() {
	if p.settled {
		return
	}
	for i := range p.lines {
		l := &p.lines[i]
		if l.dirtyFrom != 0 {
			p.evicted(l, p.depth(l.last))
		}
	}
	p.settled = true
}

// Stats returns what a fully associative LRU cache of sizeBytes (rounded
// down to whole lines) would have counted since the profile was made or
// last reset, Flush included. A size below one line is a programmer error
// and panics. It costs O(d + k log n) for d the largest stack distance seen
// and k the dirty lines.
func (p *Profile) Stats(sizeBytes int64) Stats {
	if sizeBytes < p.lineSize {
		panic("cachesim: cache size smaller than one line")
	}
	p.settle()
	c := sizeBytes / p.lineSize
	s := Stats{LineSize: p.lineSize, ReadMisses: p.cold[0], WriteMisses: p.cold[1]}
	for w, h := range p.hist {
		for d, v := range h {
			s.Accesses += v
			if int64(d) > c {
				if w == 0 {
					s.ReadMisses += v
				} else {
					s.WriteMisses += v
				}
			}
		}
	}
	s.Misses = s.ReadMisses + s.WriteMisses
	s.Accesses += p.cold[0] + p.cold[1]
	s.Hits = s.Accesses - s.Misses
	for d, v := range p.wb {
		if int64(d) > c {
			break
		}
		s.WriteBacks += v
	}
	return s
}

// Histogram returns the stack-distance histogram: dist[i] accesses had
// stack distance i+1 (they hit in caches of more than i lines), and cold
// accesses touched their line for the first time (they miss in every
// cache).
func (p *Profile) Histogram() (dist []int64, cold int64) {
	n := max(len(p.hist[0]), len(p.hist[1]))
	dist = make([]int64, max(n-1, 0))
	for _, h := range p.hist {
		for d := 1; d < len(h); d++ {
			dist[d-1] += h[d]
		}
	}
	return dist, p.cold[0] + p.cold[1]
}

// Flush does for every cache size what LRU.Flush does: each line dirty in
// a cache, resident or evicted unnoticed, is written back, and all lines
// become clean.
func (p *Profile) Flush() {
	p.settle()
	for i := range p.lines {
		l := &p.lines[i]
		if l.dirtyFrom != 0 {
			for len(p.wb) <= l.dirtyFrom {
				p.wb = append(p.wb, 0)
			}
			p.wb[l.dirtyFrom]++
			l.dirtyFrom = 0
		}
	}
}

// ResetStats zeroes the counters of every cache size and keeps the LRU
// stack and dirty lines, like LRU.ResetStats.
func (p *Profile) ResetStats() {
	p.settle()
	for w := range p.hist {
		clear(p.hist[w])
	}
	p.cold = [2]int64{}
	clear(p.wb)
}

// prefix returns the number of lines whose latest access was at time <= t.
func (p *Profile) prefix(t int) int {
	s := int32(0)
	for ; t > 0; t &= t - 1 {
		s += p.tree[t]
	}
	return int(s)
}

func (p *Profile) add(t int, v int32) {
	for ; t < len(p.tree); t += t & -t {
		p.tree[t] += v
	}
}

// compact renumbers the lines' latest access times 1..k in their order,
// when the clock reaches the end of the tree, and makes the tree twice as
// long as k so that compactions cost O(1) per access amortized.
func (p *Profile) compact() {
	k := len(p.lines)
	byTime := make([]int32, len(p.tree)) // index into lines + 1, by time
	for i, l := range p.lines {
		byTime[l.last] = int32(i) + 1
	}
	t := 0
	for _, i := range byTime {
		if i != 0 {
			t++
			p.lines[i-1].last = t
		}
	}
	n := max(2*k, 1024)
	if cap(p.tree) >= n+1 {
		p.tree = p.tree[:n+1]
	} else {
		p.tree = make([]int32, n+1)
	}
	// Ones at 1..k: node t covers times (t - lowbit(t), t].
	for t := 1; t <= n; t++ {
		low := t & -t
		p.tree[t] = int32(max(0, min(t, k)-(t-low)))
	}
	p.now = k + 1
}
