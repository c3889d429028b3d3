package cachesim

import "math/bits"

// lineTable maps line numbers to int32 values. It is an open-addressing
// hash table with linear probing and backward-shift deletion, so it leaves
// no tombstones and, once sized, never allocates: the fully associative LRU
// deletes and inserts a line on every miss.
type lineTable struct {
	slots []tableSlot // power-of-two length, at most half full
	shift uint        // 64 - log2(len(slots))
	n     int
}

type tableSlot struct {
	key uint64 // line + 1; 0 marks an empty slot
	val int32
}

// newLineTable returns a table that holds n entries without growing.
func newLineTable(n int) lineTable {
	size := 16
	for size < 2*n {
		size *= 2
	}
	return lineTable{
		slots: make([]tableSlot, size),
		shift: uint(64 - bits.TrailingZeros(uint(size))),
	}
}

// home is the slot where key's probe sequence starts. Keys go in groups
// of eight consecutive ones to eight consecutive slots, and groups are
// spread by Fibonacci hashing, so that the lines of a sequential scan share
// cache lines of the table.
func (t *lineTable) home(key uint64) uint64 {
	return ((key>>3)*0x9e3779b97f4a7c15)>>(t.shift+3)<<3 | key&7
}

// find returns the slot holding line, or the empty slot where it would go.
func (t *lineTable) find(line uint64) (uint64, bool) {
	key := line + 1
	mask := uint64(len(t.slots) - 1)
	for i := t.home(key); ; i = (i + 1) & mask {
		switch t.slots[i].key {
		case key:
			return i, true
		case 0:
			return i, false
		}
	}
}

func (t *lineTable) get(line uint64) (int32, bool) {
	i, ok := t.find(line)
	return t.slots[i].val, ok
}

// put sets the value of line, adding it if absent and growing if needed.
func (t *lineTable) put(line uint64, val int32) {
	i, ok := t.find(line)
	if !ok {
		if 2*(t.n+1) > len(t.slots) {
			t.grow()
			i, _ = t.find(line)
		}
		t.slots[i].key = line + 1
		t.n++
	}
	t.slots[i].val = val
}

// remove deletes line, which must be present, and closes the gap by moving
// back later entries of the probe run that may live in it.
func (t *lineTable) remove(line uint64) {
	i, ok := t.find(line)
	if !ok {
		panic("cachesim: removing an absent line")
	}
	mask := uint64(len(t.slots) - 1)
	for j := (i + 1) & mask; t.slots[j].key != 0; j = (j + 1) & mask {
		// The entry at j may move to i if i lies on its probe path,
		// that is, no further from j than its home is.
		if (j-t.home(t.slots[j].key))&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = tableSlot{}
	t.n--
}

func (t *lineTable) grow() {
	old := t.slots
	*t = newLineTable(len(old))
	for _, s := range old {
		if s.key != 0 {
			t.put(s.key-1, s.val)
		}
	}
}
