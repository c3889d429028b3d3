package f32

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The kernels' contract with their callers, gonum's way (testblas): every
// exported kernel, called with one slice one element shorter than its
// dimensions need, panics with one of the package's constant messages
// before it writes anything; called with slices exactly as long as they
// need, it leaves its inputs as they were and writes nothing past its
// outputs' ends.

// shapeArg is one slice argument of a kernel call.
type shapeArg struct {
	name string
	n    int  // the elements the call needs
	out  bool // the kernel writes it (in place or as a destination)
	// free: a source whose length the destination bounds (ToBF16's src):
	// shorter is no error.
	free bool
	kind argKind
}

// argKind is a slice argument's element type.
type argKind uint8

const (
	kF32 argKind = iota // []float32
	kU16                // []uint16: bf16 weights
	kU8                 // []uint8: packed or quantized int8
	kI8                 // []int8: an unpacked int8 row
)

// shapeArgs are a call's slices, each exactly its shapeArg's length; a
// slice of each kind is made for every argument, and the call takes the
// one of its kind.
type shapeArgs struct {
	f [][]float32
	u [][]uint16
	b [][]uint8
	i [][]int8
}

func (a shapeArgs) F(i int) []float32 { return a.f[i] }
func (a shapeArgs) U(i int) []uint16  { return a.u[i] }
func (a shapeArgs) B(i int) []uint8   { return a.b[i] }
func (a shapeArgs) I(i int) []int8    { return a.i[i] }

// shapeCase is one kernel call: its slices and the call over them.
type shapeCase struct {
	name string
	args []shapeArg
	call func(a shapeArgs)
}

func f(name string, n int) shapeArg    { return shapeArg{name: name, n: n} }
func out(name string, n int) shapeArg  { return shapeArg{name: name, n: n, out: true} }
func u16(name string, n int) shapeArg  { return shapeArg{name: name, n: n, kind: kU16} }
func u8(name string, n int) shapeArg   { return shapeArg{name: name, n: n, kind: kU8} }
func free(name string, n int) shapeArg { return shapeArg{name: name, n: n, free: true} }

// kernelDims are the dimensions a table of kernel calls is made at: m
// rows of A, n rows of W, k columns, and h gate units (at least 8) whose
// blocks are s apart; and the products' beta. LSTMStepPackedReverse
// takes h&^7 units: it needs a multiple of 8; the chunked kernels a
// multiple of StepChunk, at least one.
type kernelDims struct {
	m, n, k, h, s int
	beta          float32
}

// lds are the leading dimensions kernelCases gives A, W, C and a
// quantized A.
func (d kernelDims) lds() (lda, ldw, ldc, ldq int) {
	return d.k + 1, d.k + 2, d.n + 3, I8Stride(d.k) + 4
}

// shapeCases lists every exported kernel at odd dimensions and padded
// leading dimensions.
func shapeCases() []shapeCase {
	return kernelCases(kernelDims{m: 3, n: 10, k: 9, h: 8, s: 11, beta: 1})
}

// kernelCases lists every exported kernel at d, with padded leading
// dimensions.
func kernelCases(d kernelDims) []shapeCase {
	m, n, k, h, s, beta := d.m, d.n, d.k, d.h, d.s, d.beta
	h8 := h &^ 7
	hc := max(StepChunk, h/StepChunk*StepChunk) // the chunked kernels' units
	lda, ldw, ldc, ldq := d.lds()
	mat := func(rows, cols, ld int) int { return (rows-1)*ld + cols }
	return []shapeCase{
		{"GemmNT", []shapeArg{f("a", mat(m, k, lda)), f("w", mat(n, k, ldw)), out("c", mat(m, n, ldc))},
			func(a shapeArgs) { GemmNT(m, n, k, a.F(0), lda, a.F(1), ldw, beta, a.F(2), ldc) }},
		{"GemmNTOnce", []shapeArg{f("a", mat(m, k, lda)), f("w", mat(n, k, ldw)), out("c", mat(m, n, ldc))},
			func(a shapeArgs) { GemmNTOnce(m, n, k, a.F(0), lda, a.F(1), ldw, beta, a.F(2), ldc) }},
		{"GemvN", []shapeArg{f("w", mat(n, k, ldw)), f("x", k), out("y", n)},
			func(a shapeArgs) { GemvN(n, k, a.F(0), ldw, a.F(1), beta, a.F(2)) }},
		{"GemmNN", []shapeArg{f("a", mat(m, k, lda)), f("w", mat(k, n, ldc)), out("c", mat(m, n, ldc))},
			func(a shapeArgs) { GemmNN(m, n, k, a.F(0), lda, a.F(1), ldc, beta, a.F(2), ldc) }},
		{"GemvT", []shapeArg{f("w", mat(k, n, ldc)), f("x", k), out("y", n)},
			func(a shapeArgs) { GemvT(k, n, a.F(0), ldc, a.F(1), beta, a.F(2)) }},
		{"GemmNTBF16", []shapeArg{f("a", mat(m, k, lda)), u16("w", mat(n, k, ldw)), out("c", mat(m, n, ldc))},
			func(a shapeArgs) { GemmNTBF16(m, n, k, a.F(0), lda, a.U(1), ldw, beta, a.F(2), ldc) }},
		{"GemmNTBF16/rows=5", []shapeArg{f("a", mat(5, k, lda)), u16("w", mat(n, k, ldw)), out("c", mat(5, n, ldc))},
			func(a shapeArgs) { GemmNTBF16(5, n, k, a.F(0), lda, a.U(1), ldw, beta, a.F(2), ldc) }},
		{"GemmNTPacked", []shapeArg{f("a", mat(m, k, lda)), f("p", n*k), out("c", mat(m, n, ldc))},
			func(a shapeArgs) { GemmNTPacked(m, n, k, a.F(0), lda, a.F(1), beta, a.F(2), ldc) }},
		{"GemmNTPackedNear", []shapeArg{f("a", mat(m, k, lda)), f("p", n*k), out("c", mat(m, n, ldc))},
			func(a shapeArgs) { GemmNTPackedNear(m, n, k, a.F(0), lda, a.F(1), beta, a.F(2), ldc) }},
		{"PackNT", []shapeArg{out("dst", n*k), f("w", mat(n, k, ldw))},
			func(a shapeArgs) { PackNT(a.F(0), n, k, a.F(1), ldw) }},
		{"UnpackRow", []shapeArg{out("dst", k), f("p", n*k)},
			func(a shapeArgs) { UnpackRow(a.F(0), n, k, a.F(1), 3) }},
		{"LSTMGates", []shapeArg{f("y", 3*s+h), f("bias", 3*s+h), out("c", h), out("h", h)},
			func(a shapeArgs) { LSTMGates(h, s, a.F(0), a.F(1), a.F(2), a.F(3)) }},
		{"LSTMStep", []shapeArg{f("h", k), f("w", mat(4*h, k, ldw)), out("xp", 4*h), f("bias", 4*h), out("c", h), out("hout", h)},
			func(a shapeArgs) { LSTMStep(h, k, a.F(0), a.F(1), ldw, a.F(2), a.F(3), a.F(4), a.F(5)) }},
		{"LSTMStepReverse", []shapeArg{f("h", k), f("w", mat(4*h, k, ldw)), out("xp", 4*h), f("bias", 4*h), out("c", h), out("hout", h)},
			func(a shapeArgs) { LSTMStepReverse(h, k, a.F(0), a.F(1), ldw, a.F(2), a.F(3), a.F(4), a.F(5)) }},
		{"LSTMStepPacked", []shapeArg{f("h", k), f("p", 4*h*k), out("xp", 4*h), f("bias", 4*h), out("c", h), out("hout", h)},
			func(a shapeArgs) { LSTMStepPacked(h, k, a.F(0), a.F(1), a.F(2), a.F(3), a.F(4), a.F(5)) }},
		{"LSTMStepPackedReverse", []shapeArg{f("h", k), f("p", 4*h8*k), out("xp", 4*h8), f("bias", 4*h8), out("c", h8), out("hout", h8)},
			func(a shapeArgs) { LSTMStepPackedReverse(h8, k, a.F(0), a.F(1), a.F(2), a.F(3), a.F(4), a.F(5)) }},
		{"LSTMGatesChunked", []shapeArg{f("y", 4*hc), f("bias", 4*hc), out("c", hc), out("h", hc)},
			func(a shapeArgs) { LSTMGatesChunked(hc, a.F(0), a.F(1), a.F(2), a.F(3)) }},
		{"LSTMStepPackedChunked", []shapeArg{f("h", k), f("p", 4*hc*k), out("xp", 4*hc), f("bias", 4*hc), out("c", hc), out("hout", hc)},
			func(a shapeArgs) { LSTMStepPackedChunked(hc, k, a.F(0), a.F(1), a.F(2), a.F(3), a.F(4), a.F(5), false) }},
		{"LSTMStepPackedChunked/reverse", []shapeArg{f("h", k), f("p", 4*hc*k), out("xp", 4*hc), f("bias", 4*hc), out("c", hc), out("hout", hc)},
			func(a shapeArgs) { LSTMStepPackedChunked(hc, k, a.F(0), a.F(1), a.F(2), a.F(3), a.F(4), a.F(5), true) }},
		{"GRUGates", []shapeArg{f("x", 2*s+h), f("p", 2*s+h), f("bih", 2*s+h), f("bhh", 2*s+h), f("hprev", h), out("hout", h)},
			func(a shapeArgs) { GRUGates(h, s, a.F(0), a.F(1), a.F(2), a.F(3), a.F(4), a.F(5)) }},
		{"ElmanGates/tanh", []shapeArg{f("y", h), f("bias", h), out("h", h)},
			func(a shapeArgs) { ElmanGates(h, false, a.F(0), a.F(1), a.F(2)) }},
		{"ElmanGates/relu", []shapeArg{f("y", h), f("bias", h), out("h", h)},
			func(a shapeArgs) { ElmanGates(h, true, a.F(0), a.F(1), a.F(2)) }},
		{"TreeLeafGates", []shapeArg{f("y", 2*s+h), f("bias", 2*s+h), out("c", h), out("h", h)},
			func(a shapeArgs) { TreeLeafGates(h, s, a.F(0), a.F(1), a.F(2), a.F(3)) }},
		{"TreeInnerGates", []shapeArg{f("y", 4*s+h), f("bias", 4*s+h), f("cl", h), f("cr", h), out("c", h), out("h", h)},
			func(a shapeArgs) { TreeInnerGates(h, s, a.F(0), a.F(1), a.F(2), a.F(3), a.F(4), a.F(5)) }},
		{"ToBF16", []shapeArg{{name: "dst", n: n, out: true, kind: kU16}, free("src", n)},
			func(a shapeArgs) { ToBF16(a.U(0), a.F(1)) }},
		{"FromBF16", []shapeArg{out("dst", n), {name: "src", n: n, kind: kU16, free: true}},
			func(a shapeArgs) { FromBF16(a.F(0), a.U(1)) }},
		{"SigmoidTo", []shapeArg{out("dst", n), free("src", n)},
			func(a shapeArgs) { SigmoidTo(a.F(0), a.F(1)) }},
		{"TanhTo", []shapeArg{out("dst", n), free("src", n)},
			func(a shapeArgs) { TanhTo(a.F(0), a.F(1)) }},
		{"PackI8", []shapeArg{{name: "dst", n: PackedI8Bytes(n, k), out: true, kind: kU8}, f("w", mat(n, k, ldw))},
			func(a shapeArgs) { PackI8(a.B(0), n, k, a.F(1), ldw) }},
		{"UnpackI8Row", []shapeArg{{name: "q", n: k, out: true, kind: kI8}, u8("p", PackedI8Bytes(n, k))},
			func(a shapeArgs) { UnpackI8Row(a.I(0), n, k, a.B(1), 3) }},
		{"QuantizeI8", []shapeArg{f("a", mat(m, k, lda)), {name: "q", n: mat(m, I8Stride(k), ldq), out: true, kind: kU8}, out("s", m)},
			func(a shapeArgs) { QuantizeI8(m, k, a.F(0), lda, a.B(1), ldq, a.F(2)) }},
		{"GemmNTI8", []shapeArg{u8("q", mat(m, I8Stride(k), ldq)), f("s", m), u8("p", PackedI8Bytes(n, k)), out("c", mat(m, n, ldc))},
			func(a shapeArgs) { GemmNTI8(m, n, k, a.B(0), ldq, a.F(1), a.B(2), beta, a.F(3), ldc) }},
	}
}

// shapeGuard is how many elements past each slice's end its backing
// array holds, to catch a kernel that writes past the slice.
const shapeGuard = 16

// backing is every argument's backing arrays, one of each kind.
type backing struct {
	f [][]float32
	u [][]uint16
	b [][]uint8
	i [][]int8
}

// build makes c's slices, short being the argument one element shorter
// (-1 for none), each inside a backing array of random values.
func (c shapeCase) build(r *rand.Rand, short int) (shapeArgs, *backing) {
	var a shapeArgs
	bk := &backing{}
	for i, arg := range c.args {
		n := arg.n
		if i == short {
			n--
		}
		fb, ub := make([]float32, n+shapeGuard), make([]uint16, n+shapeGuard)
		bb, ib := make([]uint8, n+shapeGuard), make([]int8, n+shapeGuard)
		for j := range fb {
			fb[j] = float32(2*r.Float64() - 1)
			ub[j] = bf16Round(fb[j])
			bb[j] = uint8(r.Uint32())
			ib[j] = int8(bb[j])
		}
		a.f, a.u, a.b, a.i = append(a.f, fb[:n]), append(a.u, ub[:n]), append(a.b, bb[:n]), append(a.i, ib[:n])
		bk.f, bk.u, bk.b, bk.i = append(bk.f, fb), append(bk.u, ub), append(bk.b, bb), append(bk.i, ib)
	}
	return a, bk
}

func (b *backing) clone() *backing {
	return &backing{clone2(b.f), clone2(b.u), clone2(b.b), clone2(b.i)}
}

// same reports whether argument i of kind k agrees in b and o from
// element from on.
func (b *backing) same(o *backing, i int, k argKind, from int) bool {
	switch k {
	case kU16:
		return slices.Equal(b.u[i][from:], o.u[i][from:])
	case kU8:
		return slices.Equal(b.b[i][from:], o.b[i][from:])
	case kI8:
		return slices.Equal(b.i[i][from:], o.i[i][from:])
	}
	return slices.Equal(b.f[i][from:], o.f[i][from:])
}

// panicMessages are the package's panic messages, all constants.
var panicMessages = []string{errNegative, errLd, errShortA, errShortW, errShortC, errShortX, errShortY, errShortDst,
	errShortGat, errPanels, errChunks, errI8K, errShortQ, errShortS, errShortP, errLdq, errI8Meta}

// constantPanic reports whether v is one of panicMessages.
func constantPanic(v any) bool {
	msg, ok := v.(string)
	return ok && slices.Contains(panicMessages, msg)
}

// TestKernelShapes runs shapeCases on every kernel path of the host.
func TestKernelShapes(t *testing.T) {
	impls(t, func(t *testing.T) {
		for ci, c := range shapeCases() {
			r := rand.New(rand.NewPCG(uint64(ci), 9))
			// Exact lengths: inputs unchanged, nothing written past an end.
			a, got := c.build(r, -1)
			want := got.clone()
			c.call(a)
			for i, arg := range c.args {
				if !arg.out && !got.same(want, i, arg.kind, 0) {
					t.Errorf("%s: input %s changed", c.name, arg.name)
				}
				if arg.out && !got.same(want, i, arg.kind, arg.n) {
					t.Errorf("%s: wrote past the end of %s", c.name, arg.name)
				}
			}
			// One slice short: a constant panic, and nothing written.
			for i, arg := range c.args {
				if arg.free {
					continue
				}
				a, got := c.build(r, i)
				want := got.clone()
				if msg := panicOf(func() { c.call(a) }); !constantPanic(msg) {
					t.Errorf("%s with %s one element short: panic %v, want one of the package's messages", c.name, arg.name, msg)
				}
				for j, o := range c.args {
					if !got.same(want, j, o.kind, 0) {
						t.Errorf("%s with %s one element short: %s changed before the panic", c.name, arg.name, o.name)
					}
				}
			}
		}
	})
}

// TestKernelNegativeDims checks that the products refuse a negative
// dimension with errNegative.
func TestKernelNegativeDims(t *testing.T) {
	x := make([]float32, 64)
	u := make([]uint16, 64)
	b := make([]uint8, 64)
	for name, call := range map[string]func(){
		"GemmNT":           func() { GemmNT(1, -1, 1, x, 1, x, 1, 0, x, 1) },
		"GemmNTOnce":       func() { GemmNTOnce(-1, 1, 1, x, 1, x, 1, 0, x, 1) },
		"GemvN":            func() { GemvN(1, -1, x, 1, x, 0, x) },
		"GemmNN":           func() { GemmNN(1, 1, -1, x, 1, x, 1, 0, x, 1) },
		"GemvT":            func() { GemvT(-1, 1, x, 1, x, 0, x) },
		"GemmNTBF16":       func() { GemmNTBF16(1, -1, 1, x, 1, u, 1, 0, x, 1) },
		"GemmNTPacked":     func() { GemmNTPacked(1, 1, -1, x, 1, x, 0, x, 1) },
		"GemmNTPackedNear": func() { GemmNTPackedNear(1, 1, -1, x, 1, x, 0, x, 1) },
		"PackNT":           func() { PackNT(x, -1, 1, x, 1) },
		"PackI8":           func() { PackI8(b, 1, -1, x, 1) },
		"QuantizeI8":       func() { QuantizeI8(-1, 1, x, 1, b, 4, x) },
		"GemmNTI8":         func() { GemmNTI8(1, -1, 1, b, 4, x, b, 0, x, 1) },
	} {
		if msg := panicOf(call); msg != errNegative {
			t.Errorf("%s with a negative dimension: panic %v, want %q", name, msg, errNegative)
		}
	}
}

func panicOf(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

func clone2[T any](s [][]T) [][]T {
	c := make([][]T, len(s))
	for i := range s {
		c[i] = slices.Clone(s[i])
	}
	return c
}
