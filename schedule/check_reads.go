package schedule

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"unsafe"
)

// stream is one chunk a kernel reported reading (invariants.Stream): its
// first byte's address and its length, from the first byte to one past
// the last.
type stream struct {
	addr  uintptr
	bytes int
}

// checkOrder holds what the kernel of step s reported reading in chunks,
// in the order it read them (under the invariants build tag:
// internal/f32's LSTM step kernels report each chunk of W they take, and
// W whole when they take it at once), to the read regions the step
// declares on the same buffers, in their order: region for region, each
// chunk must be the next declared region, from its first byte to one past
// its last. So the order the traffic analysis replays a reversed step's
// W in is the order the kernel reads it. Without the tag nothing is
// reported and nothing is compared.
func checkOrder(s *Step, index int, order []*bufState, streams []stream) error {
	if len(streams) == 0 {
		return nil
	}
	// The buffer and byte offset of every chunk.
	type chunk struct {
		buf      *Buffer
		off, end int64
	}
	var got []chunk
	for _, c := range streams {
		found := false
		for _, st := range order {
			base := uintptr(unsafe.Pointer(unsafe.SliceData(st.data)))
			if c.addr >= base && c.addr < base+uintptr(len(st.data)) {
				off := int64(c.addr - base)
				got = append(got, chunk{st.buf, off, off + int64(c.bytes)})
				found = true
				break
			}
		}
		if !found {
			return &RegionError{Step: index, Kernel: s.Kernel, How: fmt.Sprintf("its kernel read %d bytes outside every buffer the step names", c.bytes)}
		}
	}
	var want []chunk
	s.op.regions(func(r Region, write bool) {
		if write || !slices.ContainsFunc(got, func(c chunk) bool { return c.buf == r.Buf }) {
			return
		}
		want = append(want, chunk{r.Buf, r.Off, r.Off + int64(r.Count-1)*r.Stride + r.Len})
	})
	for i, g := range got {
		es := int64(g.buf.ElemSize)
		if i >= len(want) {
			return &RegionError{Step: index, Kernel: s.Kernel, Buffer: g.buf.Name, Elem: int(g.off / es),
				How: fmt.Sprintf("its kernel read %d chunks of the buffer, the step declares %d regions of it", len(got), len(want))}
		}
		if w := want[i]; w != g {
			return &RegionError{Step: index, Kernel: s.Kernel, Buffer: g.buf.Name, Elem: int(g.off / es),
				How: fmt.Sprintf("its kernel read bytes [%d, %d) of it as chunk %d, where the step declares [%d, %d) of %s: the order it declares is not the order it reads",
					g.off, g.end, i, w.off, w.end, w.buf.Name)}
		}
	}
	if len(want) > len(got) {
		w := want[len(got)]
		return &RegionError{Step: index, Kernel: s.Kernel, Buffer: w.buf.Name, Elem: int(w.off / int64(w.buf.ElemSize)),
			How: fmt.Sprintf("its kernel read %d chunks of the buffer, the step declares %d regions of it", len(got), len(want))}
	}
	return nil
}

// probeReads checks that every region step s declares reading is read:
// that its value changes what the step writes. It runs the step from
// small random values in every element the step declares reading (so
// that no read is hidden by a zero it is multiplied by, such as a
// recurrent product's h at a first step from a zero state), then, for
// each read region, with the whole region, its first element and its last
// element given other values in turn: 3, -3 and NaN (see set). A probe
// after which every declared write holds what it held with the random
// values alone, each time, names a declared read the step never makes:
// traffic the analysis would count and the kernel does not cause. The
// whole region catches a read declared and not made, the first and last
// elements a region declared longer than the kernel reads at either end;
// a gap inside a region read at both ends goes unseen.
//
// A region of ids (int64) is probed with the ids 0 and 1 (a panic, an id
// outside its table, proves the read too). A step that writes nothing in the
// plan's buffers (it copies results out to the caller) has nothing to
// compare and is not probed. order is the step's buffers (checkStep's),
// restored by checkStep afterwards.
func probeReads(s *Step, index int, order []*bufState) error {
	states := map[*Buffer]*bufState{}
	var touched []*bufState
	writes := false
	for _, st := range order {
		states[st.buf] = st
		if len(st.reads) > 0 || len(st.writes) > 0 {
			touched = append(touched, st)
			writes = writes || len(st.writes) > 0
		}
	}
	if !writes {
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(index)+1, 99))
	declared := make([]spans, len(touched))
	for i, st := range touched {
		copy(st.data, st.saved)
		st.reads.each(func(e int) { st.set(e, probeRandom, rng) })
		declared[i] = st.reads.union(st.writes)
	}
	snapshot := func() [][]byte {
		out := make([][]byte, len(touched))
		for i, st := range touched {
			out[i] = st.bytes(declared[i])
		}
		return out
	}
	written := func() [][]byte {
		out := make([][]byte, len(touched))
		for i, st := range touched {
			out[i] = st.bytes(st.writes)
		}
		return out
	}
	base := snapshot()
	// The elements the step declares reading and writing (updated in
	// place), as they were.
	inPlace := make([]spans, len(touched))
	inPlaceBefore := make([][]byte, len(touched))
	for i, st := range touched {
		inPlace[i] = st.reads.intersect(st.writes)
		inPlaceBefore[i] = st.bytes(inPlace[i])
	}
	if perr := runRecovered(s.op, false); perr != nil {
		return &RegionError{Step: index, Kernel: s.Kernel, How: fmt.Sprintf("panicked on random values in the memory it declares reading: %v", perr)}
	}
	want := written()
	// run runs the step from base with elems of st set to v, and returns
	// what it wrote.
	run := func(st *bufState, elems []int, v probeValue) ([][]byte, error) {
		for i, t := range touched {
			at := 0
			for _, r := range declared[i] {
				at += copy(t.data[r[0]*t.es:r[1]*t.es], base[i][at:])
			}
		}
		for _, e := range elems {
			st.set(e, v, rng)
		}
		if perr := runRecovered(s.op, false); perr != nil {
			return nil, &RegionError{Step: index, Kernel: s.Kernel, Buffer: st.buf.Name, Elem: elems[0],
				How: fmt.Sprintf("panicked on other values in the memory it declares reading: %v", perr)}
		}
		return written(), nil
	}
	changed := func(out [][]byte) bool {
		for i := range touched {
			if string(out[i]) != string(want[i]) {
				return true
			}
		}
		return false
	}
	// An element updated in place that still holds what it held, and
	// holds 3 when given 3 and other random values everywhere else the
	// step reads (a product's exact zero is no coincidence twice), is a
	// declared write the step never makes.
	for i, st := range touched {
		if len(inPlace[i]) == 0 {
			continue
		}
		after := st.bytes(inPlace[i])
		var same []int
		at := 0
		inPlace[i].each(func(e int) {
			if string(after[at:at+st.es]) == string(inPlaceBefore[i][at:at+st.es]) {
				same = append(same, e)
			}
			at += st.es
		})
		if len(same) == 0 {
			continue
		}
		for _, t := range touched {
			t.reads.each(func(e int) { t.set(e, probeRandom, rng) })
		}
		for _, e := range same {
			st.set(e, probeHigh, rng)
		}
		if perr := runRecovered(s.op, false); perr != nil {
			return &RegionError{Step: index, Kernel: s.Kernel, How: fmt.Sprintf("panicked on random values in the memory it declares reading: %v", perr)}
		}
		for _, e := range same {
			if st.unchanged(e, probeHigh) {
				return &RegionError{Step: index, Kernel: s.Kernel, Buffer: st.buf.Name, Elem: e,
					How: "declared as written but never written (it is read, and left as it was)"}
			}
		}
	}
	// The regions first: a gather's depend on its ids, which the probes
	// change.
	var reads []Region
	s.op.regions(func(r Region, write bool) {
		if !write && bytesOf(r.Buf) != nil {
			reads = append(reads, r)
		}
	})
	for _, r := range reads {
		st := states[r.Buf]
		es := int64(r.Buf.ElemSize)
		var all []int
		for k := range r.Count {
			lo := r.Off + int64(k)*r.Stride
			for e := lo / es; e < (lo+r.Len)/es; e++ {
				all = append(all, int(e))
			}
		}
		probes := [][]int{all}
		if len(all) > 1 {
			probes = append(probes, all[:1], all[len(all)-1:])
		}
		values := []probeValue{probeHigh, probeLow, probeNaN}
		if r.Buf.I64 != nil {
			values = values[:2]
		}
		// shows reports whether other values in elems change what the
		// step writes.
		shows := func(elems []int) (bool, error) {
			for _, v := range values {
				out, err := run(st, elems, v)
				if err != nil && r.Buf.I64 != nil {
					// Another id made the kernel read outside its table:
					// it reads the id.
					return true, nil
				}
				if err != nil {
					return false, err
				}
				if changed(out) {
					return true, nil
				}
			}
			return false, nil
		}
		for _, elems := range probes {
			read, err := shows(elems)
			if err != nil {
				return err
			}
			// Changes to several elements can cancel: an int8 product
			// adds a·Δw over them exactly, and a·Δw + a'·Δw' is zero
			// where |a| = |a'| and the flips go opposite ways. One
			// element that shows alone is read: up to eight are tried,
			// spread over the region.
			for i := 0; !read && len(elems) > 1 && i < min(8, len(elems)); i++ {
				if read, err = shows(elems[i*len(elems)/min(8, len(elems)):][:1]); err != nil {
					return err
				}
			}
			if !read && es == 1 && len(elems) == 1 {
				// A byte may be the lowest of a float32 scale, too little
				// to show: the highest byte of its word, if declared too.
				if w := elems[0] | 3; w != elems[0] {
					if _, ok := slices.BinarySearch(all, w); ok {
						if read, err = shows([]int{w}); err != nil {
							return err
						}
					}
				}
			}
			if !read {
				what := "it"
				if len(elems) < len(all) {
					what = fmt.Sprintf("element %d of it", elems[0])
				}
				return &RegionError{Step: index, Kernel: s.Kernel, Buffer: r.Buf.Name, Elem: elems[0],
					How: fmt.Sprintf("declared as read (region of %d bytes from byte %d) but never read: other values in %s change nothing the step writes", r.Bytes(), r.Off, what)}
			}
		}
	}
	return nil
}

// probeValue is what probeReads sets an element to.
type probeValue uint8

const (
	probeRandom probeValue = iota // the base: small random values
	probeHigh                     // far above any base value
	probeLow                      // far below
	probeNaN                      // NaN, which even a softmax of one value passes on
)

// set gives element e of st the value v: for float32 and bf16, a random
// value of magnitude in [1/4, 1/2) from rng (small, so that no gate the base
// feeds saturates and hides a change, and far enough from zero that an int8
// product's quantization, which rounds values below 1/254 of the row's
// largest to zero, keeps every one: the AVX2 and pure-Go int8 products would
// not read a weight against a zero), 3, -3 or NaN; for bytes, the base's own
// values (int8 weights and their scales, which random bytes could make
// infinite) with one bit flipped for each other value: bits 6, 7 and 0,
// which change an int8 weight by 64 or its sign, and a float32 scale or
// int32 sum by far more through its highest byte; for ids, the base's own
// and then 0 and 1 (so a gather reads other rows).
func (st *bufState) set(e int, v probeValue, rng *rand.Rand) {
	b := st.buf
	u := rng.Float64() - 0.5
	small := float32(u/2 + math.Copysign(0.25, u))
	f := [...]float32{probeRandom: small, probeHigh: 3, probeLow: -3, probeNaN: float32(math.NaN())}[v]
	switch {
	case b.F32 != nil:
		b.F32[e] = f
	case b.U16 != nil:
		b.U16[e] = uint16(math.Float32bits(f) >> 16)
	case b.U8 != nil && v != probeRandom:
		b.U8[e] ^= [...]uint8{probeHigh: 0x40, probeLow: 0x80, probeNaN: 0x01}[v]
	case b.I64 != nil && v != probeRandom:
		b.I64[e] = int64(v - probeHigh)
	}
}

// unchanged reports whether element e of st holds what set(e, v) gives
// it (for the values set gives the same whatever it held).
func (st *bufState) unchanged(e int, v probeValue) bool {
	b := st.buf
	switch {
	case b.F32 != nil:
		return b.F32[e] == 3 && v == probeHigh
	case b.U16 != nil:
		return b.U16[e] == uint16(math.Float32bits(3)>>16) && v == probeHigh
	case b.I64 != nil:
		return b.I64[e] == int64(v-probeHigh)
	}
	return false
}
