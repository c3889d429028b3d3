package f32

import (
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// levelDims are the shapes TestKernelLevels runs every kernel at, each
// with a beta (C not read, added, scaled), chosen so that every kernel
// the dispatch can pick runs: one vector and nothing left over; tails
// everywhere with one row; two rows with rows a multiple of 8 (the packed
// products' two-row kernel) and gates with a tail; three rows with short
// rows; four rows; five rows, rows past a bf16 panel's kc and gates past
// 128 units; five rows of a packed W taken three and one past each block;
// nine rows of A (int8 tiles of four and a last row alone); seven rows
// of 192 columns (AVX-512's groups of three rows, the last four in one
// 4×3 pass, and a W panel's tail); one row past
// five int8 panels (the VNNI product's four and one more); rows past the
// AVX512_BF16 kernels' block of 1024 columns; 1024 gate units.
var levelDims = []kernelDims{
	{m: 1, n: 8, k: 8, h: 8, s: 8, beta: 0},
	{m: 1, n: 37, k: 29, h: 40, s: 43, beta: 1},
	{m: 2, n: 64, k: 100, h: 64, s: 67, beta: 0},
	{m: 2, n: 72, k: 64, h: 13, s: 13, beta: 1},
	{m: 3, n: 130, k: 67, h: 24, s: 24, beta: -0.5},
	{m: 4, n: 24, k: 33, h: 16, s: 19, beta: 1},
	{m: 5, n: 200, k: 515, h: 200, s: 203, beta: 0},
	{m: 5, n: 40, k: 24, h: 21, s: 22, beta: -0.5},
	{m: 9, n: 48, k: 256, h: 136, s: 137, beta: 1},
	{m: 7, n: 44, k: 192, h: 24, s: 24, beta: -0.5},
	{m: 1, n: 80, k: 20, h: 9, s: 11, beta: 0},
	{m: 3, n: 24, k: 1100, h: 8, s: 8, beta: 1},
	{m: 1, n: 16, k: 8, h: 1024, s: 1031, beta: -0.5},
}

// levelExtras are the kernels with no shape to get wrong, so not in
// kernelCases: Sum and Finite, their results written to an argument.
func levelExtras(d kernelDims) []shapeCase {
	res := shapeArg{name: "result", n: 1, out: true, free: true}
	inf := float32(math.Inf(1))
	return []shapeCase{
		{"Sum", []shapeArg{free("x", d.n*d.k+3), res}, func(a shapeArgs) { a.F(1)[0] = Sum(a.F(0)) }},
		{"Finite", []shapeArg{free("x", d.n*d.k+3), res}, func(a shapeArgs) { a.F(1)[0] = b2f(Finite(a.F(0))) }},
		{"Finite/inf", []shapeArg{free("x", d.n*d.k+3), res}, func(a shapeArgs) {
			x := a.F(0)
			x[len(x)-d.k] = inf
			a.F(1)[0] = b2f(Finite(x))
		}},
	}
}

func b2f(b bool) float32 {
	if b {
		return 1
	}
	return 0
}

// goExact are the kernels whose pure-Go path gives the assembly's bits:
// what only moves, widens or rounds values, the int8 products (exact
// integer sums, then the same float32 operations in the same order),
// Finite, and the ReLU Elman step (pure Go on every level). The others'
// pure-Go loops round each multiply and add where the assembly fuses
// them.
var goExact = []string{"PackNT", "UnpackRow", "ToBF16", "FromBF16", "PackI8", "UnpackI8Row", "QuantizeI8", "GemmNTI8",
	"Finite", "Finite/inf", "ElmanGates/relu"}

// sums are the arguments that receive sums of products (plus beta·C),
// by kernel: their rounding is measured against the same sums of the
// operands' magnitudes (the kernel run on |operands|).
var sums = map[string]string{
	"GemmNT": "c", "GemmNTOnce": "c", "GemvN": "y", "GemmNN": "c", "GemvT": "y", "GemmNTBF16": "c", "GemmNTBF16/rows=5": "c",
	"GemmNTPacked": "c", "GemmNTPackedNear": "c", "Sum": "result",
	"LSTMStep": "xp", "LSTMStepReverse": "xp", "LSTMStepPacked": "xp", "LSTMStepPackedReverse": "xp",
	"LSTMStepPackedChunked": "xp", "LSTMStepPackedChunked/reverse": "xp",
}

// The bounds where levels differ by rounding; the test logs how much of
// each it uses, and at the shapes and seeds above the most is a third:
//   - pure Go against AVX2, sums: |Δ| ≤ goSum·Σ|a·w| (1.4e-7 seen: a
//     lane's k/8 multiply-adds rounded twice each, not once, and the
//     tree that adds the lanes);
//   - pure Go against AVX2, gates: |Δ| ≤ goGate·max(1, |y|) (4.8e-7 seen,
//     TreeInnerGates); where a step's gates follow its products
//     (LSTMStep), their inputs differ by the products' rounding, which
//     σ' ≤ 1/4 and tanh' ≤ 1 carry to c and h at most 2 + |y| times over:
//     plus (2 + |y|)·goSum·the step's largest Σ|a·w| (about 1% of it
//     used);
//   - GemmNTBF16 on AVX512_BF16 against AVX2: |Δ| ≤ dpBF16·Σ|a·w|
//     (5.0e-6 seen: A goes through the dot products as hi + lo bf16
//     halves within 2^-16 = 1.5e-5 of it, each product of bf16 values
//     exact in float32; what is left is the order of the sums).
const (
	goSum  = 1e-6
	goGate = 2e-6
	dpBF16 = 1.6e-5
)

// TestKernelLevels runs every exported kernel, at each of levelDims, on
// every level this host and build have (pure Go, AVX2 and FMA, AVX-512
// with the int8 VNNI products and AVX512_BF16 where the CPU has them),
// each on the same operands, and holds the levels to what the package
// promises: AVX-512 gives AVX2's bits, every output of every kernel, but
// GemmNTBF16 with AVX512_BF16 (within dpBF16); pure Go gives AVX2's bits
// for goExact and agrees to rounding (goSum, goGate) for the rest.
// Every argument is compared, inputs and the elements past each end too.
func TestKernelLevels(t *testing.T) {
	defer setDefault()
	saved := i8Path
	defer func() { i8Path = saved }()
	ls := levels()
	if len(ls) < 2 {
		t.Skip("one kernel level on this CPU or build")
	}
	worst := map[string]float64{}
	for di, d := range levelDims {
		cases := append(kernelCases(d), levelExtras(d)...)
		abs := d
		abs.beta = float32(math.Abs(float64(d.beta)))
		absCases := append(kernelCases(abs), levelExtras(abs)...)
		for ci, c := range cases {
			for _, scale := range []float32{1, 8} {
				r := rand.New(rand.NewPCG(uint64(di), uint64(ci)))
				a, in := c.build(r, -1)
				validI8(r, c.name, d, a)
				scaleArgs(in, scale)
				outs := make([]*backing, len(ls))
				for i, l := range ls {
					setLevel(l)
					i8Path = i8At(l)
					outs[i] = in.clone()
					c.call(argsOf(c, outs[i]))
				}
				var mag *backing // the sums' Σ|a·w|, on the highest level
				if _, ok := sums[c.name]; ok {
					mag = in.clone()
					absArgs(mag)
					absCases[ci].call(argsOf(c, mag))
				}
				at := func(l level) *backing { return outs[slices.Index(ls, l)] }
				if slices.Contains(ls, levelAVX512) {
					var tol bounds
					if hostBF16 && strings.HasPrefix(c.name, "GemmNTBF16") {
						tol.sum = dpBF16
					}
					compare(t, c, d, scale, "avx2", "avx512", at(levelAVX2), at(levelAVX512), mag, tol, worst)
				}
				if slices.Contains(ls, levelAVX2) {
					var tol bounds
					if !slices.Contains(goExact, c.name) {
						tol = bounds{sum: goSum, gate: goGate}
					}
					compare(t, c, d, scale, "go", "avx2", at(levelGo), at(levelAVX2), mag, tol, worst)
				}
			}
		}
	}
	for k, v := range worst {
		t.Logf("%s: the largest difference is %.2g of its bound", k, v)
	}
}

// bounds are how far two levels' outputs may differ: sums by sum·Σ|a·w|,
// other values by gate·max(1, |x|) (zero: bit for bit).
type bounds struct{ sum, gate float64 }

// compare holds level y's outputs to level x's within tol, and the
// values after sums (a step's gates) also within what the sums' rounding
// carries through them (see goGate).
func compare(t *testing.T, c shapeCase, d kernelDims, scale float32, xn, yn string, x, y, mag *backing, tol bounds, worst map[string]float64) {
	t.Helper()
	carry := 0.0 // the largest Σ|a·w| of c's sums, times tol.sum
	for i, arg := range c.args {
		if mag != nil && arg.name == sums[c.name] {
			for _, v := range mag.f[i][:arg.n] {
				carry = max(carry, tol.sum*float64(v))
			}
		}
	}
	for i, arg := range c.args {
		var same bool
		switch arg.kind {
		case kU16:
			same = slices.Equal(x.u[i], y.u[i])
		case kU8:
			same = slices.Equal(x.b[i], y.b[i])
		case kI8:
			same = slices.Equal(x.i[i], y.i[i])
		default:
			same = true
			for j, xv := range x.f[i] {
				if yv := y.f[i][j]; math.Float32bits(xv) != math.Float32bits(yv) {
					same = false
					break
				}
			}
		}
		if same {
			continue
		}
		sum := mag != nil && arg.name == sums[c.name]
		if arg.kind != kF32 || sum && tol.sum == 0 || !sum && tol.gate == 0 {
			t.Errorf("%s %+v scale %v: %s differs between %s and %s", c.name, d, scale, arg.name, xn, yn)
			continue
		}
		for j, xv := range x.f[i] {
			yv := y.f[i][j]
			if math.Float32bits(xv) == math.Float32bits(yv) {
				continue
			}
			diff := math.Abs(float64(xv) - float64(yv))
			var bound float64
			if sum {
				bound = tol.sum * float64(mag.f[i][j])
			} else {
				bound = tol.gate*max(1, math.Abs(float64(xv))) + (2+math.Abs(float64(xv)))*carry
			}
			key := c.name + " " + arg.name + " " + xn + "/" + yn
			worst[key] = max(worst[key], diff/bound)
			if !(diff <= bound) {
				t.Errorf("%s %+v scale %v: %s[%d] = %v on %s, %v on %s (bound %.3g)", c.name, d, scale, arg.name, j, xv, xn, yv, yn, bound)
				break
			}
		}
	}
}

// argsOf is c's arguments over b's backing arrays, exactly as long as
// c needs.
func argsOf(c shapeCase, b *backing) shapeArgs {
	var a shapeArgs
	for i, arg := range c.args {
		a.f, a.u = append(a.f, b.f[i][:arg.n]), append(a.u, b.u[i][:arg.n])
		a.b, a.i = append(a.b, b.b[i][:arg.n]), append(a.i, b.i[i][:arg.n])
	}
	return a
}

// validI8 makes the int8 products' operands what QuantizeI8 and PackI8
// write (random bytes are no quantized row, nor a panel whose sums match
// its weights).
func validI8(r *rand.Rand, name string, d kernelDims, a shapeArgs) {
	if name != "GemmNTI8" {
		return
	}
	_, _, _, ldq := d.lds()
	x := make([]float32, d.m*d.k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	QuantizeI8(d.m, d.k, x, d.k, a.B(0), ldq, a.F(1))
	w := make([]float32, d.n*d.k)
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.1)
	}
	PackI8(a.B(2), d.n, d.k, w, d.k)
}

// scaleArgs multiplies every float32 argument by s: 8 takes the gates
// into saturation.
func scaleArgs(b *backing, s float32) {
	for _, f := range b.f {
		for j := range f {
			f[j] *= s
		}
	}
}

// absArgs clears the sign of every float32 and bf16 value.
func absArgs(b *backing) {
	for _, f := range b.f {
		for j := range f {
			f[j] = float32(math.Abs(float64(f[j])))
		}
	}
	for _, u := range b.u {
		for j := range u {
			u[j] &^= 0x8000
		}
	}
}

// i8At is the int8 product path of level l.
func i8At(l level) i8Kernel {
	ps := i8Paths()
	switch l {
	case levelAVX512:
		return ps[0]
	case levelAVX2:
		if slices.Contains(ps, i8AVX2) {
			return i8AVX2
		}
	}
	return i8Go
}

// TestKernelLevelsCover checks that TestKernelLevels runs every exported
// function of the package that takes a slice.
func TestKernelLevelsCover(t *testing.T) {
	run := map[string]bool{}
	for _, c := range append(kernelCases(levelDims[0]), levelExtras(levelDims[0])...) {
		run[strings.Split(c.name, "/")[0]] = true
	}
	fset := token.NewFileSet()
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() {
				continue
			}
			for _, p := range fn.Type.Params.List {
				if _, slice := p.Type.(*ast.ArrayType); slice && !run[fn.Name.Name] {
					t.Errorf("%s (%s) takes a slice and is not in kernelCases or levelExtras", fn.Name.Name, e.Name())
					break
				}
			}
		}
	}
}
