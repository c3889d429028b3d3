package schedule

import "slices"

// The memory a tree plan is built in. A TreePlan from TreeProgram.Acquire
// goes back to its program's pool at Release with everything it was built
// in: its buffers, its step list, its ops and its index lists. The next
// batch is built into the same memory, which grows to the largest batch
// seen and is otherwise reused as it is: at steady state building a plan
// allocates nothing. Nothing is cleared between batches: every step
// writes what it declares before any later step reads it, as the region
// checker verifies, and TestTreePlanReuseDirty runs reused plans on
// poisoned memory.

// slabFirst is the number of ops of one type in a slab's first chunk;
// each chunk after it holds twice the one before, so a fresh plan's slabs
// hold at most about twice the ops it has.
const slabFirst = 16

// slab hands out values of one op type from chunks that are never moved,
// so a step may keep a pointer to its op while the slab grows.
type slab[T any] struct {
	chunks [][]T
	c, i   int // the next free value: chunks[c][i]
}

// put copies v into the next free value and returns its address.
func (s *slab[T]) put(v *T) *T {
	if s.c < len(s.chunks) && s.i == len(s.chunks[s.c]) {
		s.c, s.i = s.c+1, 0
	}
	if s.c == len(s.chunks) {
		n := slabFirst
		if s.c > 0 {
			n = 2 * len(s.chunks[s.c-1])
		}
		s.chunks = append(s.chunks, make([]T, n))
	}
	p := &s.chunks[s.c][s.i]
	s.i++
	*p = *v
	return p
}

// reset makes every value free again; put overwrites a value whole, so
// none is cleared.
func (s *slab[T]) reset() { s.c, s.i = 0, 0 }

// treeOps are the slabs of every op type a tree plan uses.
type treeOps struct {
	gemm   slab[gemmOp]
	gather slab[gatherOp]
	rows   slab[gatherRowsOp]
	sum    slab[sumRowsOp]
	zero   slab[zeroOp]
	head   slab[headOp]
	tanh   slab[tanhBiasOp]
	bil    slab[bilinearOp]
	leaf   slab[binaryLeafOp]
	inner  slab[binaryInnerOp]
	child  slab[childSumOp]
}

func (o *treeOps) reset() {
	o.gemm.reset()
	o.gather.reset()
	o.rows.reset()
	o.sum.reset()
	o.zero.reset()
	o.head.reset()
	o.tanh.reset()
	o.bil.reset()
	o.leaf.reset()
	o.inner.reset()
	o.child.reset()
}

// list hands out consecutive runs of one backing slice. A run stays valid
// when a later one makes the backing slice grow (it keeps the old array),
// and the next batch reuses the grown one.
type list[T any] struct{ s []T }

// take returns a run of n elements (not cleared).
func (l *list[T]) take(n int) []T {
	i := len(l.s)
	l.s = slices.Grow(l.s, n)[:i+n]
	return l.s[i : i+n : i+n]
}

// add appends v to the run that started at element from and returns it.
func (l *list[T]) add(from int, v ...T) []T {
	l.s = append(l.s, v...)
	return l.s[from:len(l.s):len(l.s)]
}

func (l *list[T]) reset() { l.s = l.s[:0] }

// resize returns s with n elements, reusing its array when it is large
// enough; the elements are not cleared.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
