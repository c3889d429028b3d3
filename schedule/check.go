package schedule

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
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
//     written (the step declares more traffic than it makes).
//
// Buffers are then restored, with the declared writes of the first run
// kept, so the plan goes on as if the step had run once. It is slow (each
// step copies every buffer several times) and serial; tests run it on
// small shapes, and the invariants build tag makes Run use it everywhere.

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

// bufState is one buffer's data as bytes, with its masks.
type bufState struct {
	buf           *Buffer
	data          []byte // aliases the buffer
	saved         []byte
	reads, writes []bool // per element
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
	states := map[*Buffer]*bufState{}
	var order []*bufState
	add := func(b *Buffer) *bufState {
		if st, ok := states[b]; ok {
			return st
		}
		d := bytesOf(b)
		st := &bufState{buf: b, data: d, saved: append([]byte(nil), d...),
			reads: make([]bool, b.Elems), writes: make([]bool, b.Elems)}
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
		mask := st.reads
		if write {
			mask = st.writes
		}
		for k := 0; k < r.Count; k++ {
			lo := r.Off + int64(k)*r.Stride
			if lo%es != 0 || r.Len%es != 0 || lo < 0 || (lo+r.Len)/es > int64(len(mask)) {
				bad = fail(st, int(lo/es), fmt.Sprintf("declared region [%d, %d) bytes is not inside the buffer's %d elements", lo, lo+r.Len, len(mask)))
				return
			}
			for e := lo / es; e < (lo+r.Len)/es; e++ {
				mask[e] = true
			}
		}
	})
	if bad != nil {
		return bad
	}

	var poisoned, after [2][][]byte
	for pass := range 2 {
		rng := rand.New(rand.NewPCG(uint64(index)+1, uint64(pass)+7))
		for _, st := range order {
			copy(st.data, st.saved)
			poison(st, pass, rng)
			poisoned[pass] = append(poisoned[pass], append([]byte(nil), st.data...))
		}
		if perr := runRecovered(s.op, pass == 0); perr != nil {
			for _, st := range order {
				copy(st.data, st.saved)
			}
			return &RegionError{Step: index, Kernel: s.Kernel, How: fmt.Sprintf("panicked on poisoned memory it did not declare reading: %v", perr)}
		}
		for _, st := range order {
			after[pass] = append(after[pass], append([]byte(nil), st.data...))
		}
	}
	defer func() {
		// Restore: the declared writes of the first run, the rest as it was.
		for i, st := range order {
			es := st.buf.ElemSize
			for e, w := range st.writes {
				if w {
					copy(st.saved[e*es:(e+1)*es], after[0][i][e*es:(e+1)*es])
				}
			}
			copy(st.data, st.saved)
		}
		if out, ok := s.op.(outputter); ok && err == nil {
			out.out()
		}
	}()
	for i, st := range order {
		es := st.buf.ElemSize
		for e := range st.buf.Elems {
			lo, hi := e*es, (e+1)*es
			a0, a1 := after[0][i][lo:hi], after[1][i][lo:hi]
			if !st.writes[e] {
				if string(a0) != string(poisoned[0][i][lo:hi]) || string(a1) != string(poisoned[1][i][lo:hi]) {
					return fail(st, e, "written but not declared as written")
				}
				continue
			}
			if string(a0) == string(a1) {
				continue
			}
			if !st.reads[e] && string(a0) == string(poisoned[0][i][lo:hi]) && string(a1) == string(poisoned[1][i][lo:hi]) {
				return fail(st, e, "declared as written but never written")
			}
			return fail(st, e, "written with a value that depends on memory the step does not declare reading")
		}
	}
	return nil
}

// poison overwrites every element of st not declared read: float32 and
// bf16 elements with values from rng in [1, 2) in the first pass and in
// [-2, -1) in the second, bytes with values in [0x30, 0x38) in the first
// pass and [0x38, 0x40) in the second (always different, nonzero as int8
// weights, and finite as the high byte of a float32 scale, so that
// results never saturate to the same infinity in both passes), ids with
// pass (valid ids that differ between the passes). The float passes'
// values differ in sign, so that a kernel that clamps (an Elman relu
// step: max(y+b, 0)) cannot map both to the same result and hide a read
// it did not declare.
func poison(st *bufState, pass int, rng *rand.Rand) {
	b := st.buf
	sign := float64(1 - 2*pass)
	for e, r := range st.reads {
		if r {
			continue
		}
		switch {
		case b.F32 != nil:
			b.F32[e] = float32(sign * (1 + rng.Float64()))
		case b.U16 != nil:
			b.U16[e] = uint16(math.Float32bits(float32(sign*(1+rng.Float64()))) >> 16)
		case b.U8 != nil:
			b.U8[e] = 0x30 + 8*uint8(pass) + uint8(rng.IntN(8))
		case b.I64 != nil:
			b.I64[e] = int64(pass)
		}
	}
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
