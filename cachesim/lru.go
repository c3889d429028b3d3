package cachesim

import "slices"

// Stats counts the line accesses of a cache since it was made or since
// its last ResetStats.
type Stats struct {
	LineSize    int64 // bytes per line, to turn counts into bytes
	Accesses    int64 // line accesses: a byte range counts once per line it touches
	Hits        int64
	Misses      int64 // line fills from DRAM: ReadMisses + WriteMisses
	ReadMisses  int64
	WriteMisses int64 // write-allocate: the line is filled, then written
	WriteBacks  int64 // dirty lines written to DRAM, on eviction or Flush
}

// ReadBytes is the number of bytes read from DRAM: every miss fills a line.
func (s Stats) ReadBytes() int64 { return s.Misses * s.LineSize }

// WriteBytes is the number of bytes written to DRAM by write-backs.
func (s Stats) WriteBytes() int64 { return s.WriteBacks * s.LineSize }

// LRU is an exact simulator of a set-associative (or fully associative)
// write-back, write-allocate cache with least-recently-used replacement.
// It is not safe for concurrent use.
//
// Each set keeps its lines in an array ordered from most to least recently
// used; an access scans the array and moves the line to the front. A fully
// associative cache uses a hash table and a doubly linked list instead.
// No access allocates, except the one that first touches a line too far
// out for the 32-bit tags (see narrow).
type LRU struct {
	cfg   Config
	shift uint
	stats Stats

	// Set-associative: set s occupies tags[s*ways : (s+1)*ways], most
	// recently used first, empty slots (0) last. An entry is
	// (line+1)<<1 | dirty, which cannot overflow because a byte range
	// ends below 2^63.
	//
	// While every line seen is below narrowEnd, narrow holds the entries
	// instead and tags is nil: line L of set s = L mod sets is stored as
	// (L/sets+1)<<1 | dirty in 32 bits, half the bytes (a 12 MiB 16-way
	// cache's tags are 768 KiB instead of 1.5 MiB, and a 16-way set is one
	// 64-byte cache line). The first access that reaches narrowEnd moves
	// the entries to tags for good (widen).
	narrow    []uint32
	tags      []uint64
	narrowEnd uint64 // sets * (2^31-1): every line below it has L/sets+1 < 2^31
	ways      int
	sets      uint64

	fa *fullyAssoc // non-nil when the cache has one set
}

// NewLRU returns an empty cache. It applies cfg's defaults, then validates it.
func NewLRU(cfg Config) (*LRU, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &LRU{cfg: cfg, shift: lineShift(cfg.LineSize)}
	c.stats.LineSize = cfg.LineSize
	if cfg.Sets() == 1 {
		c.fa = newFullyAssoc(int(cfg.Lines()))
		return c, nil
	}
	c.ways = cfg.Ways
	c.sets = uint64(cfg.Sets())
	c.narrow = make([]uint32, cfg.Lines())
	c.narrowEnd = c.sets * (1<<31 - 1) // sets <= 2^31, so no overflow
	return c, nil
}

// Config returns the cache's configuration, defaults applied.
func (c *LRU) Config() Config { return c.cfg }

// Stats returns the counters.
func (c *LRU) Stats() Stats { return c.stats }

// ResetStats zeroes the counters and keeps the cache's contents, so that
// the next trace runs warm.
func (c *LRU) ResetStats() { c.stats = Stats{LineSize: c.cfg.LineSize} }

// Read simulates reading n bytes at addr: one access per line touched.
// n may be zero; a negative addr or n is a programmer error and panics.
func (c *LRU) Read(addr, n int64) { c.access(addr, n, 0) }

// Write simulates writing n bytes at addr. A miss fills the line from
// DRAM (write-allocate, counted in ReadBytes) and every written line
// becomes dirty, to be written back when it is evicted or flushed.
func (c *LRU) Write(addr, n int64) { c.access(addr, n, 1) }

// Flush writes back every dirty line, counting the write-backs, and leaves
// the lines in place, clean, in the same LRU order. Call it at the end of
// a run to charge the run with the dirty data it leaves in the cache.
func (c *LRU) Flush() {
	if c.fa != nil {
		c.stats.WriteBacks += c.fa.flush()
		return
	}
	for i, e := range c.narrow {
		c.stats.WriteBacks += int64(e & 1)
		c.narrow[i] = e &^ 1
	}
	for i, e := range c.tags {
		c.stats.WriteBacks += int64(e & 1)
		c.tags[i] = e &^ 1
	}
}

// wideEntry converts entry e of set s from the 32-bit form to the 64-bit.
func (c *LRU) wideEntry(e uint32, s uint64) uint64 {
	if e == 0 {
		return 0
	}
	line := (uint64(e>>1)-1)*c.sets + s
	return (line+1)<<1 | uint64(e&1)
}

// widen moves the entries from narrow to tags, for a line at or beyond
// narrowEnd. Order and dirty bits are kept, so nothing observable changes.
func (c *LRU) widen() {
	c.tags = make([]uint64, len(c.narrow))
	for i, e := range c.narrow {
		c.tags[i] = c.wideEntry(e, uint64(i/c.ways))
	}
	c.narrow = nil
}

// eachEntry calls fn with every set-associative entry in the 64-bit form,
// set by set, most recently used first.
func (c *LRU) eachEntry(fn func(e uint64)) {
	for i, e := range c.narrow {
		fn(c.wideEntry(e, uint64(i/c.ways)))
	}
	for _, e := range c.tags {
		fn(e)
	}
}

func (c *LRU) access(addr, n int64, w uint64) {
	first, last, ok := lineRange(addr, n, c.shift)
	if !ok {
		return
	}
	lines := int64(last-first) + 1
	c.stats.Accesses += lines
	if c.fa != nil {
		misses, wbs := c.fa.access(first, last, w != 0)
		c.countMisses(misses, w)
		c.stats.Hits += lines - misses
		c.stats.WriteBacks += wbs
		return
	}

	if c.narrow != nil && last >= c.narrowEnd {
		c.widen()
	}
	var misses, wbs uint64
	if c.narrow != nil {
		misses, wbs = c.accessNarrow(first, last, uint32(w))
	} else {
		misses, wbs = c.accessWide(first, last, w)
	}
	c.countMisses(int64(misses), w)
	c.stats.Hits += lines - int64(misses)
	c.stats.WriteBacks += int64(wbs)
}

// accessNarrow touches lines first..last (all below narrowEnd) in the
// 32-bit tags, through the assembly when it is there (narrowRange), and
// returns the misses and write-backs.
func (c *LRU) accessNarrow(first, last uint64, w uint32) (misses, wbs uint64) {
	set, q := first%c.sets, first/c.sets
	key := uint32(q+1)<<1 | 1 // matches the line's entry whatever its dirty bit
	if misses, wbs, ok := narrowRange(c.narrow, set, c.sets, c.ways, key, w, last-first+1); ok {
		return misses, wbs
	}
	return accessNarrowGo(c.narrow, set, c.sets, c.ways, key, w, last-first+1)
}

// accessNarrowGo is accessNarrow in Go: n lines from set on, whose first
// line's key is key.
func accessNarrowGo(tags []uint32, set, sets uint64, ways int, key, w uint32, n uint64) (misses, wbs uint64) {
	for ; n > 0; n-- {
		base := int(set) * ways
		if evicted, miss := touchSet32(tags[base:base+ways], key, w); miss {
			misses++
			wbs += uint64(evicted & 1) // an empty slot (0) is never dirty
		}
		if set++; set == sets {
			set = 0
			key += 2 // the next line is in the next round of sets
		}
	}
	return misses, wbs
}

// accessWide touches lines first..last in the 64-bit tags.
func (c *LRU) accessWide(first, last, w uint64) (misses, wbs uint64) {
	tags, ways, sets := c.tags, c.ways, c.sets
	set := first % sets
	for line := first; ; line++ {
		base := int(set) * ways
		if evicted, miss := touchSet(tags[base:base+ways], line, w); miss {
			misses++
			wbs += evicted & 1 // an empty slot (0) is never dirty
		}
		if line == last {
			break
		}
		if set++; set == sets {
			set = 0
		}
	}
	return misses, wbs
}

// touchSet accesses line in set s (most recently used first), oring w (0
// or 1) into its dirty bit. It scans from the front, shifting
// each entry back one slot, until it finds the line, which then goes to the
// front. If the line is absent, the scan has shifted out the least recently
// used entry, which it returns with miss set.
//
// It is kept out of line on purpose: inlined, its loop runs short of
// registers in the caller's and the benchmark runs about a quarter slower.
//
//go:noinline
func touchSet(s []uint64, line, w uint64) (evicted uint64, miss bool) {
	key := (line+1)<<1 | 1 // matches the line's entry whatever its dirty bit
	prev := s[0]
	if prev|1 == key {
		s[0] = prev | w
		return 0, false
	}
	for i := 1; i < len(s); i++ {
		cur := s[i]
		s[i] = prev
		if cur|1 == key {
			s[0] = cur | w
			return 0, false
		}
		prev = cur
	}
	s[0] = key&^1 | w
	return prev, true
}

// touchSet32 is touchSet for a set of 32-bit entries, given the line's key,
// (line/sets+1)<<1 | 1. It is a copy rather than one generic function for
// both widths: the generic one (its dictionary argument on a call that is
// kept out of line) ran the pure-Go path at 74-79 M accesses/s against
// 87-107 M for the two copies, in one alternating run (2026-11-26).
//
//go:noinline
func touchSet32(s []uint32, key, w uint32) (evicted uint32, miss bool) {
	prev := s[0]
	if prev|1 == key {
		s[0] = prev | w
		return 0, false
	}
	for i := 1; i < len(s); i++ {
		cur := s[i]
		s[i] = prev
		if cur|1 == key {
			s[0] = cur | w
			return 0, false
		}
		prev = cur
	}
	s[0] = key&^1 | w
	return prev, true
}

func (c *LRU) countMisses(m int64, w uint64) {
	c.stats.Misses += m
	if w != 0 {
		c.stats.WriteMisses += m
	} else {
		c.stats.ReadMisses += m
	}
}

// Snapshot is a canonical copy of a cache's state: which lines it holds,
// their LRU order within each set, and their dirty bits. Two caches with
// the same configuration and equal snapshots behave identically on any
// future trace, so if a cache's snapshot is the same before and after a
// trace, replaying the trace again gives the same Stats as the last time.
type Snapshot struct {
	cfg Config
	// Per set, in set order, the entries from most to least recently used,
	// (line+1)<<1 | dirty; set-associative snapshots keep empty (0) slots.
	entries []uint64
}

// Snapshot copies the cache's state, in O(lines) time and space.
func (c *LRU) Snapshot() Snapshot {
	if c.fa != nil {
		return Snapshot{cfg: c.cfg, entries: c.fa.appendEntries(nil)}
	}
	entries := make([]uint64, 0, c.cfg.Lines())
	c.eachEntry(func(e uint64) { entries = append(entries, e) })
	return Snapshot{cfg: c.cfg, entries: entries}
}

// Equal reports whether s and o are snapshots of the same state.
func (s Snapshot) Equal(o Snapshot) bool {
	return s.cfg == o.cfg && slices.Equal(s.entries, o.entries)
}

// Fingerprint is a 64-bit hash of the snapshot. Equal snapshots have equal
// fingerprints; different ones rarely collide, but the hash is not
// cryptographic.
func (s Snapshot) Fingerprint() uint64 {
	h := fingerprintSeed
	for _, e := range s.entries {
		h = fingerprintStep(h, e)
	}
	return h
}

// Fingerprint returns c.Snapshot().Fingerprint() without copying the state,
// in O(lines) time. It is a cheap test for a steady state between repeated
// traces; confirm a match with Snapshot.Equal where exactness matters.
func (c *LRU) Fingerprint() uint64 {
	h := fingerprintSeed
	if c.fa != nil {
		c.fa.each(func(e uint64) { h = fingerprintStep(h, e) })
		return h
	}
	c.eachEntry(func(e uint64) { h = fingerprintStep(h, e) })
	return h
}

const fingerprintSeed uint64 = 0x243f6a8885a308d3

// fingerprintStep mixes e into h with a multiply-xorshift round, so that
// both the values and their order change the result.
func fingerprintStep(h, e uint64) uint64 {
	h ^= e + 0x9e3779b97f4a7c15 + h<<6 + h>>2
	h *= 0xbf58476d1ce4e5b9
	return h ^ h>>31
}

// fullyAssoc is an LRU cache with one set: a hash table from line to node
// and an intrusive doubly linked list of nodes, most recently used at head.
type fullyAssoc struct {
	nodes      []faNode // len == capacity; the first used are in the list
	used       int32
	head, tail int32 // -1 when empty
	table      lineTable
}

type faNode struct {
	line       uint64
	prev, next int32
	dirty      bool
}

func newFullyAssoc(lines int) *fullyAssoc {
	return &fullyAssoc{
		nodes: make([]faNode, lines),
		head:  -1,
		tail:  -1,
		table: newLineTable(lines),
	}
}

// access touches lines first..last and returns the misses and write-backs.
func (f *fullyAssoc) access(first, last uint64, write bool) (misses, wbs int64) {
	for line := first; ; line++ {
		if i, ok := f.table.get(line); ok {
			f.nodes[i].dirty = f.nodes[i].dirty || write
			f.moveToFront(i)
		} else {
			misses++
			var i int32
			if int(f.used) < len(f.nodes) {
				i = f.used
				f.used++
			} else {
				i = f.tail
				v := &f.nodes[i]
				if v.dirty {
					wbs++
				}
				f.table.remove(v.line)
				f.unlink(i)
			}
			f.nodes[i] = faNode{line: line, prev: -1, next: -1, dirty: write}
			f.table.put(line, i)
			f.pushFront(i)
		}
		if line == last {
			return misses, wbs
		}
	}
}

func (f *fullyAssoc) moveToFront(i int32) {
	if f.head == i {
		return
	}
	f.unlink(i)
	f.pushFront(i)
}

func (f *fullyAssoc) unlink(i int32) {
	n := &f.nodes[i]
	if n.prev >= 0 {
		f.nodes[n.prev].next = n.next
	} else {
		f.head = n.next
	}
	if n.next >= 0 {
		f.nodes[n.next].prev = n.prev
	} else {
		f.tail = n.prev
	}
}

func (f *fullyAssoc) pushFront(i int32) {
	n := &f.nodes[i]
	n.prev, n.next = -1, f.head
	if f.head >= 0 {
		f.nodes[f.head].prev = i
	} else {
		f.tail = i
	}
	f.head = i
}

func (f *fullyAssoc) flush() (wbs int64) {
	for i := range f.nodes[:f.used] {
		if f.nodes[i].dirty {
			wbs++
			f.nodes[i].dirty = false
		}
	}
	return wbs
}

// each calls fn with the entry of every line, most recently used first,
// encoded as in the set-associative tags.
func (f *fullyAssoc) each(fn func(e uint64)) {
	for i := f.head; i >= 0; i = f.nodes[i].next {
		n := &f.nodes[i]
		e := (n.line + 1) << 1
		if n.dirty {
			e |= 1
		}
		fn(e)
	}
}

func (f *fullyAssoc) appendEntries(dst []uint64) []uint64 {
	f.each(func(e uint64) { dst = append(dst, e) })
	return dst
}
