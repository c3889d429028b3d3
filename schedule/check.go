package schedule

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"rnnserve/internal/invariants"
	"slices"
	"sync"
	"unsafe"
)

// The region checker runs a step as the traffic analysis sees it: every
// element of every buffer that the step does not declare reading is
// overwritten with poison before the kernel runs, twice with different
// poison, and afterwards
//
//   - an element outside the step's writes that changed is an undeclared
//     write;
//   - a written element that differs between the two runs depends on
//     memory the step did not declare reading;
//   - a declared write that still holds the poison both times was never
//     written (the step declares more traffic than it makes);
//   - a declared read whose value changes nothing the step writes was
//     never read (the same: see probeReads);
//   - under the invariants build tag, a kernel that reads W in chunks
//     took them in another order than the step declares (see
//     checkOrder).
//
// The same again from random values in every declared read, so that a
// read the step does not declare cannot hide behind a zero it is
// multiplied by. Buffers are then restored, with the declared writes of
// the first run kept, so the plan goes on as if the step had run once.
// Each pass copies every buffer of the plan (poison comes from fixed
// patterns, compared span by span), and the probes run the kernel a few
// times per declared read: the checker is for tests on small shapes, and
// the invariants build tag makes Run use it everywhere, one step at a
// time (internal/invariants).

// ErrRegion is matched (errors.Is) by every *RegionError.
var ErrRegion = errors.New("schedule: a step's memory accesses differ from its declared regions")

// RegionError reports the first element a step touched against its
// declaration.
type RegionError struct {
	Step   int    // index in the plan (or the steps checked)
	Kernel Kernel // the step's kernel
	Buffer string // the buffer
	Elem   int    // the element
	How    string // what went wrong
}

func (e *RegionError) Error() string {
	return fmt.Sprintf("schedule: step %d (%v): buffer %q element %d: %s", e.Step, e.Kernel, e.Buffer, e.Elem, e.How)
}

// Is makes errors.Is(err, ErrRegion) true.
func (e *RegionError) Is(target error) bool { return target == ErrRegion }

// RunChecked runs the plan's steps in order on the calling goroutine,
// checking each against its declared regions, and returns the first
// violation (a *RegionError). The outputs are the same as Run's.
func (p *Plan) RunChecked() error {
	if p.dry {
		return ErrDryPlan
	}
	return checkSteps(p.Steps, 0, p.Buffers)
}

// checkSteps runs steps checked, numbering them from first, over bufs and
// any other buffer their regions name.
func checkSteps(steps []Step, first int, bufs []*Buffer) error {
	for i := range steps {
		if err := checkStep(&steps[i], first+i, bufs); err != nil {
			return err
		}
	}
	return nil
}

// bufState is one buffer's data as bytes, with the elements the step
// declares reading and writing.
type bufState struct {
	buf           *Buffer
	es            int    // bytes per element
	salt          int    // where in the poison patterns its element 0 is
	data          []byte // aliases the buffer
	saved         []byte // the data before the step
	reads, writes spans  // declared, in elements
}

// spans are sorted, disjoint, merged element ranges [lo, hi).
type spans [][2]int

// add adds [lo, hi); normalize sorts and merges after the last add.
func (s *spans) add(lo, hi int) {
	if n := len(*s); n > 0 && (*s)[n-1][1] == lo {
		(*s)[n-1][1] = hi
		return
	}
	*s = append(*s, [2]int{lo, hi})
}

func (s *spans) normalize() {
	slices.SortFunc(*s, func(a, b [2]int) int { return a[0] - b[0] })
	out := (*s)[:0]
	for _, r := range *s {
		if n := len(out); n > 0 && r[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], r[1])
			continue
		}
		out = append(out, r)
	}
	*s = out
}

// has reports whether element e is in s.
func (s spans) has(e int) bool {
	i, _ := slices.BinarySearchFunc(s, e, func(r [2]int, e int) int {
		switch {
		case r[1] <= e:
			return -1
		case r[0] > e:
			return 1
		}
		return 0
	})
	return i < len(s) && s[i][0] <= e && e < s[i][1]
}

// each calls f for every element of s, in order.
func (s spans) each(f func(e int)) {
	for _, r := range s {
		for e := r[0]; e < r[1]; e++ {
			f(e)
		}
	}
}

// complement is the elements of [0, n) outside s.
func (s spans) complement(n int) spans {
	var out spans
	at := 0
	for _, r := range s {
		if r[0] > at {
			out = append(out, [2]int{at, r[0]})
		}
		at = r[1]
	}
	if at < n {
		out = append(out, [2]int{at, n})
	}
	return out
}

// union is the elements in s or t.
func (s spans) union(t spans) spans {
	out := append(append(spans(nil), s...), t...)
	out.normalize()
	return out
}

// intersect is the elements in both s and t.
func (s spans) intersect(t spans) spans {
	var out spans
	for i, j := 0, 0; i < len(s) && j < len(t); {
		lo, hi := max(s[i][0], t[j][0]), min(s[i][1], t[j][1])
		if lo < hi {
			out = append(out, [2]int{lo, hi})
		}
		if s[i][1] < t[j][1] {
			i++
		} else {
			j++
		}
	}
	return out
}

// bytes copies the bytes of elements s of st's data, in order.
func (st *bufState) bytes(s spans) []byte {
	var out []byte
	for _, r := range s {
		out = append(out, st.data[r[0]*st.es:r[1]*st.es]...)
	}
	return out
}

func bytesOf(b *Buffer) []byte {
	switch {
	case b.F32 != nil:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b.F32))), 4*len(b.F32))
	case b.U16 != nil:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b.U16))), 2*len(b.U16))
	case b.U8 != nil:
		return b.U8
	case b.I64 != nil:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b.I64))), 8*len(b.I64))
	}
	return nil
}

// checkStep checks one step over bufs (the plan's buffers) and any other
// buffer its regions name.
func checkStep(s *Step, index int, bufs []*Buffer) (err error) {
	// Under the invariants tag one step is checked at a time, process
	// wide, so that what its kernel reports reading (pass 0) is its own.
	var streams []stream
	recording := false
	if invariants.Enabled {
		stop := invariants.Record(func(addr uintptr, n int) {
			if recording {
				streams = append(streams, stream{addr, n})
			}
		})
		defer stop()
	}
	states := map[*Buffer]*bufState{}
	var order []*bufState
	add := func(b *Buffer) *bufState {
		if st, ok := states[b]; ok {
			return st
		}
		d := bytesOf(b)
		st := &bufState{buf: b, es: b.ElemSize, data: d, saved: slices.Clone(d), salt: 1021 * len(order) % poisonLen}
		states[b] = st
		order = append(order, st)
		return st
	}
	for _, b := range bufs {
		if bytesOf(b) != nil {
			add(b)
		}
	}
	fail := func(st *bufState, elem int, how string) error {
		return &RegionError{Step: index, Kernel: s.Kernel, Buffer: st.buf.Name, Elem: elem, How: how}
	}
	var bad error
	s.op.regions(func(r Region, write bool) {
		if bad != nil || bytesOf(r.Buf) == nil {
			return
		}
		st := add(r.Buf)
		es := int64(r.Buf.ElemSize)
		sp := &st.reads
		if write {
			sp = &st.writes
		}
		for k := 0; k < r.Count; k++ {
			lo := r.Off + int64(k)*r.Stride
			if lo%es != 0 || r.Len%es != 0 || lo < 0 || (lo+r.Len)/es > int64(r.Buf.Elems) {
				bad = fail(st, int(lo/es), fmt.Sprintf("declared region [%d, %d) bytes is not inside the buffer's %d elements", lo, lo+r.Len, r.Buf.Elems))
				return
			}
			if r.Len > 0 {
				sp.add(int(lo/es), int((lo+r.Len)/es))
			}
		}
	})
	if bad != nil {
		return bad
	}
	type derived struct {
		poisoned spans // neither read nor written: poisoned before each pass, must stay so
		unread   spans // every element not declared read: poisoned
		readOnly spans // read, not written: must stay as they were
	}
	ds := make([]derived, len(order))
	for i, st := range order {
		st.reads.normalize()
		st.writes.normalize()
		n := st.buf.Elems
		ds[i] = derived{
			poisoned: st.reads.union(st.writes).complement(n),
			unread:   st.reads.complement(n),
			readOnly: st.reads.intersect(st.writes.complement(n)),
		}
	}

	// wrote[p][i] is buffer i's declared writes after pass p, in order.
	var wrote [4][][]byte
	for pass := range 4 {
		// Passes 2 and 3 run from random values in the declared reads
		// (the same in both), so that a read the step does not declare
		// cannot hide behind a zero it is multiplied by (h at a first
		// step from a zero state, a leaf's sum of no children).
		declaredRng := rand.New(rand.NewPCG(uint64(index)+1, 5))
		before := make([][]byte, len(order))
		for i, st := range order {
			copy(st.data, st.saved)
			st.poison(ds[i].unread, pass)
			if pass >= 2 {
				st.reads.each(func(e int) { st.set(e, probeRandom, declaredRng) })
			}
			before[i] = st.bytes(ds[i].readOnly)
		}
		recording = pass == 0
		perr := runRecovered(s.op, pass == 0)
		recording = false
		if perr != nil {
			for _, st := range order {
				copy(st.data, st.saved)
			}
			return &RegionError{Step: index, Kernel: s.Kernel, How: fmt.Sprintf("panicked on poisoned memory it did not declare reading: %v", perr)}
		}
		for i, st := range order {
			if e, ok := st.poisonChanged(ds[i].poisoned, pass); ok {
				return restored(order, fail(st, e, "written but not declared as written"))
			}
			if got := st.bytes(ds[i].readOnly); string(got) != string(before[i]) {
				e := firstDiff(ds[i].readOnly, got, before[i], st.es)
				return restored(order, fail(st, e, "written but not declared as written"))
			}
			wrote[pass] = append(wrote[pass], st.bytes(st.writes))
		}
	}
	defer func() {
		// Restore: the declared writes of the first run, the rest as it was.
		for i, st := range order {
			copy(st.data, st.saved)
			at := 0
			for _, r := range st.writes {
				at += copy(st.data[r[0]*st.es:r[1]*st.es], wrote[0][i][at:])
			}
		}
		if out, ok := s.op.(outputter); ok && err == nil {
			out.out()
		}
	}()
	for i, st := range order {
		es, at := st.es, 0
		var bad error
		st.writes.each(func(e int) {
			w := func(p int) string { return string(wrote[p][i][at : at+es]) }
			defer func() { at += es }()
			if bad != nil {
				return
			}
			if w(2) != w(3) && w(0) == w(1) {
				bad = fail(st, e, "written with a value that depends on memory the step does not declare reading (from random values in what it declares reading)")
				return
			}
			if w(0) == w(1) {
				return
			}
			if !st.reads.has(e) && w(0) == string(st.poisonOf(e, 0)) && w(1) == string(st.poisonOf(e, 1)) {
				bad = fail(st, e, "declared as written but never written")
				return
			}
			bad = fail(st, e, "written with a value that depends on memory the step does not declare reading")
		})
		if bad != nil {
			return bad
		}
	}
	if err := checkOrder(s, index, order, streams); err != nil {
		return err
	}
	return probeReads(s, index, order)
}

// restored restores every buffer as it was before the step and returns
// err.
func restored(order []*bufState, err error) error {
	for _, st := range order {
		copy(st.data, st.saved)
	}
	return err
}

// firstDiff is the first element of s whose bytes differ in a and b (s's
// bytes in order).
func firstDiff(s spans, a, b []byte, es int) int {
	at, first := 0, -1
	s.each(func(e int) {
		if first < 0 && string(a[at:at+es]) != string(b[at:at+es]) {
			first = e
		}
		at += es
	})
	return first
}

// The poison: for each pass and element type, a pattern of poisonLen
// elements that the elements not declared read get, element e the
// pattern's (e + salt)%poisonLen, salt the buffer's (so that two buffers'
// elements at one index get different poison): float32 and bf16 values in
// [1, 2) in passes 0 and 2 and in [-2, -1) in 1 and 3 (of different sign,
// so that a kernel that clamps, an Elman relu step's max(y+b, 0), cannot
// map both to one result and hide a read it did not declare), bytes in
// [0x30, 0x38) in passes 0 and 2 and [0x38, 0x40) in 1 and 3 (always
// different, nonzero as int8 weights, and finite as the high byte of a
// float32 scale, so that results never saturate to the same infinity in
// both passes), ids 0 in passes 0 and 2 and 1 in 1 and 3 (valid ids that
// differ between the passes). The patterns are computed once.
const poisonLen = 4093

var poisonPatterns = sync.OnceValue(func() (pats [4][9][]byte) {
	for pass := range 4 {
		rng := rand.New(rand.NewPCG(uint64(pass)+1, 7))
		f, u, b, id := make([]float32, poisonLen), make([]uint16, poisonLen), make([]byte, poisonLen), make([]int64, poisonLen)
		sign := float64(1 - 2*(pass%2))
		for i := range poisonLen {
			f[i] = float32(sign * (1 + rng.Float64()))
			u[i] = uint16(math.Float32bits(float32(sign*(1+rng.Float64()))) >> 16)
			b[i] = 0x30 + 8*uint8(pass%2) + uint8(rng.IntN(8))
			id[i] = int64(pass % 2)
		}
		pats[pass][4] = bytesOf(&Buffer{F32: f})
		pats[pass][2] = bytesOf(&Buffer{U16: u})
		pats[pass][1] = b
		pats[pass][8] = bytesOf(&Buffer{I64: id})
	}
	return pats
})

// poisonOf is element e's poison in pass.
func (st *bufState) poisonOf(e, pass int) []byte {
	at := ((e + st.salt) % poisonLen) * st.es
	return poisonPatterns()[pass][st.es][at : at+st.es]
}

// poison overwrites the elements s of st with pass's poison.
func (st *bufState) poison(s spans, pass int) {
	pat := poisonPatterns()[pass][st.es]
	for _, r := range s {
		for e := r[0]; e < r[1]; {
			k := (e + st.salt) % poisonLen
			n := min(r[1]-e, poisonLen-k)
			copy(st.data[e*st.es:(e+n)*st.es], pat[k*st.es:(k+n)*st.es])
			e += n
		}
	}
}

// poisonChanged returns the first element of s that no longer holds
// pass's poison.
func (st *bufState) poisonChanged(s spans, pass int) (int, bool) {
	pat := poisonPatterns()[pass][st.es]
	for _, r := range s {
		for e := r[0]; e < r[1]; {
			k := (e + st.salt) % poisonLen
			n := min(r[1]-e, poisonLen-k)
			if string(st.data[e*st.es:(e+n)*st.es]) != string(pat[k*st.es:(k+n)*st.es]) {
				for j := range n {
					if string(st.data[(e+j)*st.es:(e+j+1)*st.es]) != string(pat[(k+j)*st.es:(k+j+1)*st.es]) {
						return e + j, true
					}
				}
			}
			e += n
		}
	}
	return 0, false
}

// runRecovered runs o, or for an outputter only its computation, and
// returns what it panicked with.
func runRecovered(o op, first bool) (perr any) {
	defer func() { perr = recover() }()
	if out, ok := o.(outputter); ok {
		out.compute()
		return nil
	}
	o.run()
	return nil
}

// An outputter is an op whose run also copies results out of the plan's
// buffers into the caller's memory (cellular batching's per-sequence
// outputs): run is compute then out. The checker runs compute in each
// pass and out once, after the buffers are restored.
type outputter interface {
	op
	compute()
	out()
}
