package cachesim

import "math"

// OPT replays the trace through a fully associative write-back,
// write-allocate cache of sizeBytes (rounded down to whole lines) that
// replaces with Belady's MIN (1966): on a miss in a full cache it evicts
// the line whose next use is furthest in the future, or never comes. No
// replacement policy has fewer misses, so OPT(t, size).Misses is a lower
// bound on the misses, and the DRAM read bytes, of any cache of that size
// and line size that fetches lines on demand, set-associative ones
// included.
//
// WriteBacks counts the dirty lines MIN evicts (none are flushed at the
// end, as with an LRU that is not flushed). Among lines never used again
// it evicts clean ones first, which saves write-backs without costing
// misses. WriteBacks is not a lower bound: a policy that evicts a clean
// line used sooner than a dirty one may trade a miss for a write-back, and
// minimizing the sum is a different problem.
//
// OPT takes O(n log C) time, for n accesses and C lines, and memory of 8
// bytes per access plus a hash table of the distinct lines, on top of the
// trace. A size below one line, or a trace of 2^31-1 accesses or more, is
// a programmer error and panics.
func OPT(t *Trace, sizeBytes int64) Stats {
	if sizeBytes < t.lineSize {
		panic("cachesim: cache size smaller than one line")
	}
	n := len(t.acc)
	if n >= math.MaxInt32 {
		panic("cachesim: trace too long for OPT")
	}
	s := Stats{LineSize: t.lineSize, Accesses: int64(n)}
	capacity := int(min(sizeBytes/t.lineSize, int64(n)))

	// next[i] is the index of the next access to the line of access i,
	// or -1 if there is none.
	next := make([]int32, n)
	seen := newLineTable(0)
	for i := n - 1; i >= 0; i-- {
		line := t.acc[i] >> 1
		if j, ok := seen.get(line); ok {
			next[i] = j
		} else {
			next[i] = -1
		}
		seen.put(line, int32(i))
	}
	seen = lineTable{}

	// The cache is a max-heap of its lines keyed by next use. A line used
	// again at j has key j; a line never used again has key n+i if dirty
	// and 2n+i if clean, i its last access, so clean dead lines go first.
	// Keys are distinct, and the line accessed at j is cached exactly if
	// the heap holds key j: pos[j] is then its heap index plus one.
	h := optHeap{pos: make([]int32, n), n: n}
	h.items = make([]optItem, 0, capacity)
	for i, a := range t.acc {
		write := a&1 != 0
		if p := h.pos[i]; p != 0 {
			s.Hits++
			it := &h.items[p-1]
			it.dirty = it.dirty || write
			h.pos[i] = 0
			it.key = h.key(next[i], i, it.dirty)
			h.up(int(p - 1))
			continue
		}
		if write {
			s.WriteMisses++
		} else {
			s.ReadMisses++
		}
		if len(h.items) == capacity {
			if h.items[0].dirty {
				s.WriteBacks++
			}
			h.pop()
		}
		h.push(optItem{key: h.key(next[i], i, write), dirty: write})
	}
	s.Misses = s.ReadMisses + s.WriteMisses
	return s
}

type optItem struct {
	key   int
	dirty bool
}

type optHeap struct {
	items []optItem
	pos   []int32 // by key < n: heap index + 1, 0 if absent
	n     int
}

func (h *optHeap) key(next int32, i int, dirty bool) int {
	switch {
	case next >= 0:
		return int(next)
	case dirty:
		return h.n + i
	default:
		return 2*h.n + i
	}
}

func (h *optHeap) set(i int, it optItem) {
	h.items[i] = it
	if it.key < h.n {
		h.pos[it.key] = int32(i) + 1
	}
}

func (h *optHeap) push(it optItem) {
	h.items = append(h.items, it)
	h.set(len(h.items)-1, it)
	h.up(len(h.items) - 1)
}

func (h *optHeap) pop() {
	if top := h.items[0]; top.key < h.n {
		h.pos[top.key] = 0
	}
	last := len(h.items) - 1
	it := h.items[last]
	h.items = h.items[:last]
	if last > 0 {
		h.set(0, it)
		h.down(0)
	}
}

func (h *optHeap) up(i int) {
	it := h.items[i]
	for i > 0 {
		parent := (i - 1) / 2
		if h.items[parent].key >= it.key {
			break
		}
		h.set(i, h.items[parent])
		i = parent
	}
	h.set(i, it)
}

func (h *optHeap) down(i int) {
	it := h.items[i]
	n := len(h.items)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h.items[c+1].key > h.items[c].key {
			c++
		}
		if h.items[c].key <= it.key {
			break
		}
		h.set(i, h.items[c])
		i = c
	}
	h.set(i, it)
}
