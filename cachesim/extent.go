package cachesim

import (
	"cmp"
	"fmt"
	"slices"
)

// Extent is a run of consecutive lines that sit together in an LRU stack:
// lines First..Last, Last the most recently used of them and First the
// least, all dirty or all clean. Line numbers are addresses / LineSize.
type Extent struct {
	First, Last int64
	Dirty       bool
}

// ExtentLRU is an exact fully associative write-back, write-allocate LRU
// cache, like LRU with Ways == FullyAssociative (same Stats, same Snapshot
// and Fingerprint after the same requests), whose cost per request grows
// with the number of extents the request touches instead of the number of
// lines. It suits traces of long byte ranges, such as a matrix-vector
// product reading a whole weight matrix as one request. It is not safe for
// concurrent use.
//
// # How it works
//
// The LRU stack is kept as a list of extents in recency order: maximal runs
// of lines that are consecutive both in address and in the stack (the
// higher address more recent) and share a dirty bit. A request for lines
// first..last touches them in address order, as LRU does. Let one of them,
// x, lie in a cached extent E = [lo, hi], with off lines in the extents more
// recent than E. Before x is touched, the lines above it in the stack are
// the lines first..x-1 just touched, plus the off lines above E and the
// lines x+1..hi of E, minus those of first..x-1 that were among them: the
// above-E lines of the request's earlier part, A. So x's stack distance
// (1 = most recent) is
//
//	d = (x - first) + off + (hi - x) - A + 1 = off + hi - first + 1 - A,
//
// the same for every line of the request inside E. The lines of E hit if
// d <= capacity and otherwise miss, written back first if E was dirty (they
// were evicted during the request before it reached them). Lines in no
// extent miss. Then the request's lines go on top of the stack as new
// extents (split where their new dirty bits differ), the rest of each
// touched extent stays where it was (at most two pieces), the least
// recently used lines beyond capacity are evicted (written back if dirty),
// and neighbours that became mergeable are merged, so the list stays
// canonical: equal states have equal lists.
//
// Two treaps index the extents, one by recency and one by address, so that
// a request touching k extents among n costs O((k+1) log n) expected time.
// Recency keys are virtual times: a line touched by a request gets a time
// larger than all earlier ones, the lines of a request get consecutive
// times, and an extent's key is the time of its most recent line. The times
// of an extent's lines are then distinct and lie below its key and above
// the keys of older extents, which gives a split-off piece a key without
// renumbering anything.
type ExtentLRU struct {
	cfg   Config
	shift uint
	cap   uint64 // capacity in lines
	stats Stats

	// nodes[0] is the nil node: zero sum, children 0. free lists reusable
	// nodes.
	nodes []extNode
	free  []int32
	root  [extTrees]int32
	lines uint64 // lines cached
	clock uint64 // virtual time of the latest line touched
	rng   uint64

	// Scratch reused by every request.
	pieces []extPiece
	segs   []extSeg
	gone   []uint64
	fen    []uint64
	order  []int32
}

// The two trees over the extents: by recency key and by first line.
const (
	extByTime = iota
	extByAddr
	extTrees
)

type extNode struct {
	lo, hi uint64
	key    uint64 // virtual time of line hi; larger is more recent
	kid    [extTrees][2]int32
	sum    uint64 // lines in the node's subtree of the recency tree
	pri    uint32
	dirty  bool
}

func (n *extNode) size() uint64 { return n.hi - n.lo + 1 }

// extPiece is the part [a, b] of a request inside the cached extent node.
type extPiece struct {
	node  int32
	a, b  uint64
	off   uint64 // lines in extents more recent than node
	above uint64 // lines of the request before a in extents more recent than node
	rank  int32  // position of off among the request's pieces
	hit   bool
}

// extSeg is a run of a request's lines with the same dirty bit afterwards.
type extSeg struct {
	a, b  uint64
	dirty bool
}

// NewExtentLRU returns an empty fully associative cache. It applies cfg's
// defaults and validates it; the configuration must have one set (Ways ==
// FullyAssociative, or Ways equal to the number of lines).
func NewExtentLRU(cfg Config) (*ExtentLRU, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Sets() != 1 {
		return nil, fmt.Errorf("%w: ExtentLRU is fully associative, but Ways %d gives %d sets", ErrInvalidConfig, cfg.Ways, cfg.Sets())
	}
	c := &ExtentLRU{
		cfg:   cfg,
		shift: lineShift(cfg.LineSize),
		cap:   uint64(cfg.Lines()),
		nodes: make([]extNode, 1, 64),
		rng:   0x9e3779b97f4a7c15,
	}
	c.stats.LineSize = cfg.LineSize
	return c, nil
}

// Config returns the cache's configuration, defaults applied.
func (c *ExtentLRU) Config() Config { return c.cfg }

// Stats returns the counters.
func (c *ExtentLRU) Stats() Stats { return c.stats }

// ResetStats zeroes the counters and keeps the cache's contents.
func (c *ExtentLRU) ResetStats() { c.stats = Stats{LineSize: c.cfg.LineSize} }

// Read simulates reading n bytes at addr: one access per line touched, in
// address order. n may be zero; a negative addr or n panics.
func (c *ExtentLRU) Read(addr, n int64) { c.access(addr, n, false) }

// Write simulates writing n bytes at addr, as LRU.Write does.
func (c *ExtentLRU) Write(addr, n int64) { c.access(addr, n, true) }

// Len returns the number of extents in the stack.
func (c *ExtentLRU) Len() int { return len(c.nodes) - 1 - len(c.free) }

// Extents appends the stack's extents to dst, most recent first, and
// returns the result. The list is canonical: two ExtentLRUs with the same
// configuration are in the same state exactly when their lists are equal.
// It costs O(Len()).
func (c *ExtentLRU) Extents(dst []Extent) []Extent {
	c.eachNewestFirst(c.root[extByTime], func(n *extNode) {
		dst = append(dst, Extent{First: int64(n.lo), Last: int64(n.hi), Dirty: n.dirty})
	})
	return dst
}

// Snapshot returns the state in the same form as LRU.Snapshot: a snapshot
// equal to that of a fully associative LRU of the same Config exactly when
// the two caches are in the same state. It costs O(lines cached); Extents
// is the cheap canonical form.
func (c *ExtentLRU) Snapshot() Snapshot {
	entries := make([]uint64, 0, c.lines)
	c.eachEntry(func(e uint64) { entries = append(entries, e) })
	return Snapshot{cfg: c.cfg, entries: entries}
}

// Fingerprint returns c.Snapshot().Fingerprint() without building the
// snapshot, in O(lines cached) time.
func (c *ExtentLRU) Fingerprint() uint64 {
	h := fingerprintSeed
	c.eachEntry(func(e uint64) { h = fingerprintStep(h, e) })
	return h
}

// eachEntry calls fn with every cached line's snapshot entry, most recently
// used first.
func (c *ExtentLRU) eachEntry(fn func(e uint64)) {
	c.eachNewestFirst(c.root[extByTime], func(n *extNode) {
		var d uint64
		if n.dirty {
			d = 1
		}
		for line := n.hi; ; line-- {
			fn((line+1)<<1 | d)
			if line == n.lo {
				break
			}
		}
	})
}

func (c *ExtentLRU) eachNewestFirst(x int32, fn func(n *extNode)) {
	for x != 0 {
		n := &c.nodes[x]
		c.eachNewestFirst(n.kid[extByTime][1], fn)
		fn(n)
		x = n.kid[extByTime][0]
	}
}

// Flush writes back every dirty line, counting the write-backs, and leaves
// the lines in place, clean, in the same LRU order.
func (c *ExtentLRU) Flush() {
	var byAge []int32 // oldest first
	var walk func(x int32)
	walk = func(x int32) {
		if x == 0 {
			return
		}
		n := &c.nodes[x]
		walk(n.kid[extByTime][0])
		byAge = append(byAge, x)
		walk(n.kid[extByTime][1])
	}
	walk(c.root[extByTime])
	for _, x := range byAge {
		n := &c.nodes[x]
		if n.dirty {
			c.stats.WriteBacks += int64(n.size())
			n.dirty = false
		}
	}
	// Neighbours that differed only in their dirty bits now merge.
	for i := 1; i < len(byAge); i++ {
		c.mergePair(byAge[i-1], byAge[i])
	}
}

func (c *ExtentLRU) access(addr, n int64, write bool) {
	first, last, ok := lineRange(addr, n, c.shift)
	if !ok {
		return
	}
	count := last - first + 1
	c.stats.Accesses += int64(count)

	// The cached extents the request touches, in address order, and each
	// one's stack distance, all from the state before the request.
	ps := c.pieces[:0]
	ps = c.collect(ps, c.root[extByAddr], first, last)
	for i := range ps {
		p := &ps[i]
		nd := &c.nodes[p.node]
		p.a, p.b = max(nd.lo, first), min(nd.hi, last)
		p.off = c.newer(nd.key)
	}
	c.setAbove(ps)
	var hits, wbs uint64
	for i := range ps {
		p := &ps[i]
		nd := &c.nodes[p.node]
		d := p.off + (nd.hi - first) + 1 - p.above
		p.hit = d <= c.cap
		switch {
		case p.hit:
			hits += p.b - p.a + 1
		case nd.dirty:
			wbs += p.b - p.a + 1 // evicted, dirty, before the request reached it
		}
	}

	// The request's lines with their dirty bits afterwards, in address order.
	segs := c.segs[:0]
	seg := func(a, b uint64, dirty bool) {
		if k := len(segs) - 1; k >= 0 && segs[k].dirty == dirty && segs[k].b+1 == a {
			segs[k].b = b
			return
		}
		segs = append(segs, extSeg{a: a, b: b, dirty: dirty})
	}
	next := first
	for _, p := range ps {
		if p.a > next {
			seg(next, p.a-1, write)
		}
		seg(p.a, p.b, write || p.hit && c.nodes[p.node].dirty)
		next = p.b + 1
	}
	if next <= last {
		seg(next, last, write)
	}

	// Take the touched lines out of their extents. What is left of an
	// extent keeps its place: the part above the request (more recent)
	// keeps the key, the part below gets the time of its top line.
	gone := c.gone[:0]
	for _, p := range ps {
		x := p.node
		nd := c.nodes[x]
		below := nd.key - (nd.hi - p.a + 1) // key of the part below
		switch {
		case p.a == nd.lo && p.b == nd.hi:
			c.drop(x)
			gone = append(gone, nd.key) // its neighbours are now adjacent
		case p.a == nd.lo:
			c.resize(x, p.b+1, nd.hi, nd.key)
		case p.b == nd.hi:
			c.resize(x, nd.lo, p.a-1, below)
		default:
			c.resize(x, p.b+1, nd.hi, nd.key)
			c.add(extNode{lo: nd.lo, hi: p.a - 1, key: below, dirty: nd.dirty})
		}
	}

	// The request's lines go on top; those more than a cache's worth below
	// its last line were pushed out by the request itself.
	keep := first
	if count > c.cap {
		keep = last - c.cap + 1
	}
	var bottom int32
	for _, s := range segs {
		a := s.a
		if a < keep {
			n := min(s.b+1, keep) - a
			if s.dirty {
				wbs += n
			}
			if s.b < keep {
				continue
			}
			a = keep
		}
		x := c.add(extNode{lo: a, hi: s.b, key: c.clock + 1 + (s.b - keep), dirty: s.dirty})
		if bottom == 0 {
			bottom = x
		}
	}
	c.clock += last - keep + 1

	// Evict the least recently used lines beyond capacity.
	for c.lines > c.cap {
		x := c.oldest()
		nd := c.nodes[x]
		n := min(nd.size(), c.lines-c.cap)
		if nd.dirty {
			wbs += n
		}
		if n == nd.size() {
			c.drop(x)
		} else {
			c.resize(x, nd.lo+n, nd.hi, nd.key)
		}
	}

	// Restore the canonical form where extents became adjacent.
	for _, k := range gone {
		if older, newer := c.below(k), c.aboveKey(k); older != 0 && newer != 0 {
			c.mergePair(older, newer)
		}
	}
	if older := c.below(c.nodes[bottom].key); older != 0 {
		c.mergePair(older, bottom)
	}

	misses := int64(count - hits)
	c.stats.Hits += int64(hits)
	c.stats.Misses += misses
	if write {
		c.stats.WriteMisses += misses
	} else {
		c.stats.ReadMisses += misses
	}
	c.stats.WriteBacks += int64(wbs)
	c.pieces, c.segs, c.gone = ps, segs, gone
}

// setAbove sets each piece's above: the lines of the pieces before it (in
// address order) whose extents are more recent than its own.
func (c *ExtentLRU) setAbove(ps []extPiece) {
	if len(ps) <= 32 {
		for i := range ps {
			var s uint64
			for j := range i {
				if ps[j].off < ps[i].off {
					s += ps[j].b - ps[j].a + 1
				}
			}
			ps[i].above = s
		}
		return
	}
	// A Fenwick tree over the pieces ranked by recency.
	order := c.order[:0]
	for i := range ps {
		order = append(order, int32(i))
	}
	slices.SortFunc(order, func(i, j int32) int { return cmp.Compare(ps[i].off, ps[j].off) })
	for r, i := range order {
		ps[i].rank = int32(r) + 1
	}
	fen := c.fen[:0]
	for range len(ps) + 1 {
		fen = append(fen, 0)
	}
	for i := range ps {
		var s uint64
		for r := ps[i].rank - 1; r > 0; r &= r - 1 {
			s += fen[r]
		}
		ps[i].above = s
		for r := int(ps[i].rank); r < len(fen); r += r & -r {
			fen[r] += ps[i].b - ps[i].a + 1
		}
	}
	c.order, c.fen = order, fen
}

// mergePair merges older into newer if newer continues older's lines with
// the same dirty bit; the two must be adjacent in the stack.
func (c *ExtentLRU) mergePair(older, newer int32) {
	o, n := &c.nodes[older], &c.nodes[newer]
	if n.lo != o.hi+1 || n.dirty != o.dirty {
		return
	}
	lo, hi, key := o.lo, n.hi, n.key
	c.drop(older)
	c.resize(newer, lo, hi, key)
}

// collect appends the extents overlapping lines first..last in the
// address tree rooted at x, in address order.
func (c *ExtentLRU) collect(ps []extPiece, x int32, first, last uint64) []extPiece {
	for x != 0 {
		n := &c.nodes[x]
		switch {
		case n.lo > last:
			x = n.kid[extByAddr][0]
		case n.hi < first:
			x = n.kid[extByAddr][1]
		default:
			ps = c.collect(ps, n.kid[extByAddr][0], first, last)
			ps = append(ps, extPiece{node: x})
			x = n.kid[extByAddr][1]
		}
	}
	return ps
}

// newer returns the number of lines in extents with keys above k.
func (c *ExtentLRU) newer(k uint64) uint64 {
	var s uint64
	for x := c.root[extByTime]; x != 0; {
		n := &c.nodes[x]
		switch {
		case n.key > k:
			s += n.size() + c.nodes[n.kid[extByTime][1]].sum
			x = n.kid[extByTime][0]
		case n.key < k:
			x = n.kid[extByTime][1]
		default:
			return s + c.nodes[n.kid[extByTime][1]].sum
		}
	}
	return s
}

// below returns the extent with the largest key under k, or 0.
func (c *ExtentLRU) below(k uint64) int32 {
	var best int32
	for x := c.root[extByTime]; x != 0; {
		if c.nodes[x].key < k {
			best = x
			x = c.nodes[x].kid[extByTime][1]
		} else {
			x = c.nodes[x].kid[extByTime][0]
		}
	}
	return best
}

// aboveKey returns the extent with the smallest key over k, or 0.
func (c *ExtentLRU) aboveKey(k uint64) int32 {
	var best int32
	for x := c.root[extByTime]; x != 0; {
		if c.nodes[x].key > k {
			best = x
			x = c.nodes[x].kid[extByTime][0]
		} else {
			x = c.nodes[x].kid[extByTime][1]
		}
	}
	return best
}

// oldest returns the least recently used extent; the stack is not empty.
func (c *ExtentLRU) oldest() int32 {
	x := c.root[extByTime]
	for c.nodes[x].kid[extByTime][0] != 0 {
		x = c.nodes[x].kid[extByTime][0]
	}
	return x
}

// add inserts a new extent into both trees and returns its node.
func (c *ExtentLRU) add(n extNode) int32 {
	var x int32
	if k := len(c.free); k > 0 {
		x = c.free[k-1]
		c.free = c.free[:k-1]
	} else {
		c.nodes = append(c.nodes, extNode{})
		x = int32(len(c.nodes) - 1)
	}
	c.rng ^= c.rng << 13
	c.rng ^= c.rng >> 7
	c.rng ^= c.rng << 17
	n.pri = uint32(c.rng >> 32)
	c.nodes[x] = n
	c.lines += n.size()
	c.insert(extByTime, x)
	c.insert(extByAddr, x)
	return x
}

// drop removes extent x from both trees and frees its node.
func (c *ExtentLRU) drop(x int32) {
	c.remove(extByTime, x)
	c.remove(extByAddr, x)
	c.lines -= c.nodes[x].size()
	c.free = append(c.free, x)
}

// resize gives extent x the lines lo..hi and the key, in place. The change
// must keep x's position in both trees: lo and key may move only within
// the room between x and its neighbours.
func (c *ExtentLRU) resize(x int32, lo, hi, key uint64) {
	n := &c.nodes[x]
	delta := (hi - lo + 1) - n.size() // modulo 2^64: may be "negative"
	for y := c.root[extByTime]; ; {
		m := &c.nodes[y]
		m.sum += delta
		if y == x {
			break
		}
		if n.key < m.key {
			y = m.kid[extByTime][0]
		} else {
			y = m.kid[extByTime][1]
		}
	}
	n.lo, n.hi, n.key = lo, hi, key
	c.lines += delta
}

// The treaps. A node's priority is drawn (xorshift) when it is added and
// shared by both trees, each of which is balanced in expectation because
// priorities are independent of its keys.

func (c *ExtentLRU) treeKey(t int, x int32) uint64 {
	if t == extByTime {
		return c.nodes[x].key
	}
	return c.nodes[x].lo
}

func (c *ExtentLRU) pull(t int, x int32) {
	if t == extByTime {
		n := &c.nodes[x]
		n.sum = n.size() + c.nodes[n.kid[t][0]].sum + c.nodes[n.kid[t][1]].sum
	}
}

func (c *ExtentLRU) insert(t int, x int32) {
	c.nodes[x].kid[t] = [2]int32{}
	c.pull(t, x)
	c.root[t] = c.insertAt(t, c.root[t], x)
}

func (c *ExtentLRU) insertAt(t int, r, x int32) int32 {
	if r == 0 {
		return x
	}
	if c.nodes[x].pri > c.nodes[r].pri {
		a, b := c.split(t, r, c.treeKey(t, x))
		c.nodes[x].kid[t] = [2]int32{a, b}
		c.pull(t, x)
		return x
	}
	side := 0
	if c.treeKey(t, x) > c.treeKey(t, r) {
		side = 1
	}
	c.nodes[r].kid[t][side] = c.insertAt(t, c.nodes[r].kid[t][side], x)
	c.pull(t, r)
	return r
}

// split splits the tree rooted at r into keys below k and keys from k on.
func (c *ExtentLRU) split(t int, r int32, k uint64) (int32, int32) {
	if r == 0 {
		return 0, 0
	}
	if c.treeKey(t, r) < k {
		a, b := c.split(t, c.nodes[r].kid[t][1], k)
		c.nodes[r].kid[t][1] = a
		c.pull(t, r)
		return r, b
	}
	a, b := c.split(t, c.nodes[r].kid[t][0], k)
	c.nodes[r].kid[t][0] = b
	c.pull(t, r)
	return a, r
}

// join joins trees a and b, every key of a below every key of b.
func (c *ExtentLRU) join(t int, a, b int32) int32 {
	if a == 0 {
		return b
	}
	if b == 0 {
		return a
	}
	if c.nodes[a].pri > c.nodes[b].pri {
		c.nodes[a].kid[t][1] = c.join(t, c.nodes[a].kid[t][1], b)
		c.pull(t, a)
		return a
	}
	c.nodes[b].kid[t][0] = c.join(t, a, c.nodes[b].kid[t][0])
	c.pull(t, b)
	return b
}

// remove takes x, which must be in tree t under its current key, out of it.
func (c *ExtentLRU) remove(t int, x int32) {
	c.root[t] = c.removeAt(t, c.root[t], x, c.treeKey(t, x))
}

func (c *ExtentLRU) removeAt(t int, r, x int32, k uint64) int32 {
	if r == 0 {
		panic("cachesim: extent missing from its tree")
	}
	if r == x {
		return c.join(t, c.nodes[r].kid[t][0], c.nodes[r].kid[t][1])
	}
	side := 0
	if k > c.treeKey(t, r) {
		side = 1
	}
	c.nodes[r].kid[t][side] = c.removeAt(t, c.nodes[r].kid[t][side], x, k)
	c.pull(t, r)
	return r
}
