package schedule

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"rnnserve/internal/f32"
	"rnnserve/internal/host"
	"rnnserve/rnn"
)

// testPool starts an unpinned pool of n workers for one test, raising
// GOMAXPROCS for it if needed.
func testPool(t *testing.T, n int) *Pool {
	t.Helper()
	if runtime.GOMAXPROCS(0) < n {
		old := runtime.GOMAXPROCS(n)
		t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	}
	p, err := NewPool(PoolOptions{Workers: n, NoPin: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func runProgram(t testing.TB, prog *Program, in Input) Result {
	t.Helper()
	p, err := prog.Plan(in, PlanOptions{Head: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Run()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestPartitionedAgreesWithAPlus runs the partitioned schedule on 1, 2 and
// 3 workers over random shapes of every cell type, direction, projection,
// embedding and head, at batch 1 and > 1, and compares every output with
// Schedule A+ (itself checked against PyTorch by TestGolden).
func TestPartitionedAgreesWithAPlus(t *testing.T) {
	pools := map[int]*Pool{2: testPool(t, 2), 3: testPool(t, 3)}
	r := rand.New(rand.NewPCG(7, 11))
	for i := 0; i < cases(48); i++ {
		cfg := randomConfig(r, i, 1+r.IntN(70), 1+r.IntN(3), 60)
		T := 1 + r.IntN(12)
		B := []int{1, 1 + r.IntN(5)}[r.IntN(2)]
		states := r.IntN(2) == 0
		workers := 1 + i%3
		name := fmt.Sprintf("%d/%v/in=%d/h=%d/p=%d/L=%d/bi=%v/V=%d/head=%d/T=%d/B=%d/states=%v/workers=%d",
			i, cfg.Cell, cfg.Input, cfg.Hidden, cfg.Proj, cfg.Layers, cfg.Bidirectional, cfg.Vocab, cfg.HeadOut, T, B, states, workers)
		t.Run(name, func(t *testing.T) {
			net := randomNet(t, cfg, uint64(i))
			in := randomInput(net, T, B, states, r)
			prog, err := NewPartitioned(net, PartitionOptions{Workers: workers, Pool: pools[workers]})
			if err != nil {
				t.Fatal(err)
			}
			want := run(t, net, APlus, in)
			// Twice: a plan must run again from the same inputs, and a
			// second plan of the program must not disturb the first.
			for rep := 0; rep < 2; rep++ {
				got := runProgram(t, prog, in)
				compareResults(t, got, want, 1e-5)
			}
		})
	}
}

func compareResults(t *testing.T, got, want Result, tol float64) {
	t.Helper()
	for _, c := range []struct {
		name      string
		got, want []float32
	}{{"output", got.Output, want.Output}, {"h_n", got.HN, want.HN}, {"c_n", got.CN, want.CN}, {"head", got.Head, want.Head}} {
		if err := closeTo(c.got, c.want, tol); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// maxRelErr is the largest |got-want| / max(1, |want|).
func maxRelErr(got, want []float32) float64 {
	var m float64
	for i := range got {
		m = max(m, math.Abs(float64(got[i])-float64(want[i]))/math.Max(1, math.Abs(float64(want[i]))))
	}
	return m
}

// TestPartitionedGolden runs the PyTorch golden cases under the
// partitioned schedule on two workers with bf16 weights: each weight is
// off by up to 2^-9 relative, so the outputs must stay within 5e-2 of
// PyTorch's float32 ones (TestGolden holds float32 P to 1e-5). The
// largest error of each case is logged.
func TestPartitionedGolden(t *testing.T) {
	pool := testPool(t, 2)
	var worst float64
	for _, g := range goldens(t) {
		prog, err := NewPartitioned(g.net, PartitionOptions{Pool: pool, Precision: BF16})
		if err != nil {
			t.Fatal(err)
		}
		got := runProgram(t, prog, g.in)
		e := max(maxRelErr(got.Output, g.want.Output), maxRelErr(got.HN, g.want.HN))
		if g.want.Head != nil {
			e = max(e, maxRelErr(got.Head, g.want.Head))
		}
		t.Logf("%s: bf16 max error %.3g", g.name, e)
		worst = max(worst, e)
	}
	t.Logf("bf16 weights: largest error against PyTorch's float32 outputs %.3g (relative to max(1,|want|))", worst)
	if worst > 5e-2 || worst == 0 {
		t.Errorf("bf16 error %.3g, want in (0, 5e-2]", worst)
	}
}

// TestPartitionedBF16 checks that bf16 storage changes nothing but the
// weights: the partitioned schedule with bf16 weights must equal A+ in
// float32 on a network whose W_ih, W_hh and W_hr were rounded to bf16.
func TestPartitionedBF16(t *testing.T) {
	pool := testPool(t, 2)
	r := rand.New(rand.NewPCG(3, 5))
	for i, cfg := range []rnn.Config{
		{Cell: rnn.LSTM, Input: 13, Hidden: 37, Layers: 2},
		{Cell: rnn.LSTM, Input: 8, Hidden: 40, Proj: 9, Layers: 2, Bidirectional: true},
		{Cell: rnn.GRU, Input: 21, Hidden: 64, Layers: 3, Vocab: 30, HeadOut: 30, Activation: rnn.ActLogSoftmax},
	} {
		net := randomNet(t, cfg, uint64(i+100))
		in := randomInput(net, 9, 1+i, i%2 == 0, r)
		prog, err := NewPartitioned(net, PartitionOptions{Pool: pool, Precision: BF16})
		if err != nil {
			t.Fatal(err)
		}
		got := runProgram(t, prog, in)
		rounded := randomNet(t, cfg, uint64(i+100))
		for _, dirs := range rounded.Layers {
			for _, l := range dirs {
				for _, w := range [][]float32{l.Wih, l.Whh, l.Whr} {
					b := make([]uint16, len(w))
					f32.ToBF16(b, w)
					f32.FromBF16(w, b)
				}
			}
		}
		want := run(t, rounded, APlus, in)
		t.Run(fmt.Sprint(i), func(t *testing.T) { compareResults(t, got, want, 1e-5) })
		if maxRelErr(got.Output, run(t, net, APlus, in).Output) == 0 {
			t.Errorf("%d: bf16 output equals float32 output exactly: weights not rounded?", i)
		}
	}
}

// TestPartitionedPlanRegions checks a dry plan's bookkeeping: every region
// inside its buffer, each worker's W_hh read once per step (so all of W_hh
// once per step), W_hh skipped at the first step from a zero state, and
// bf16 weight buffers half the bytes of float32 ones.
func TestPartitionedPlanRegions(t *testing.T) {
	for _, cell := range []rnn.CellKind{rnn.LSTM, rnn.GRU} {
		net, err := rnn.NewNetwork(rnn.Config{Cell: cell, Input: 24, Hidden: 40, Layers: 2}, true)
		if err != nil {
			t.Fatal(err)
		}
		const T = 5
		bytes := map[Precision]int64{}
		for _, prec := range []Precision{F32, BF16} {
			prog, err := NewPartitioned(net, PartitionOptions{Workers: 3, Precision: prec})
			if err != nil {
				t.Fatal(err)
			}
			if !prog.dry || prog.part.pool != nil {
				t.Fatal("a dry program must not use a pool")
			}
			p, err := prog.Plan(Input{T: T, B: 2}, PlanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			whh := map[int]int64{} // time step -> W_hh bytes read
			p.Walk(func(r Region, _ bool) {
				end := r.Off + int64(max(r.Count-1, 0))*r.Stride + r.Len
				if r.Off < 0 || end > r.Buf.Bytes() {
					t.Fatalf("%v %v: region of %q ends at %d, past %d", cell, prec, r.Buf.Name, end, r.Buf.Bytes())
				}
			})
			for _, s := range p.Steps {
				for _, r := range s.Reads() {
					if r.Buf.Kind == KindWeight && filepath.Ext(r.Buf.Name) == ".weight_hh" {
						whh[s.T] += r.Bytes()
					}
				}
			}
			G := int64(cell.Gates())
			full := 2 * G * 40 * 40 * int64(prec.elemSize()) // two layers' W_hh
			if whh[0] != 0 || whh[1] != full || whh[T-1] != full {
				t.Errorf("%v %v: W_hh bytes read at t=0,1,T-1 = %d, %d, %d; want 0, %d, %d", cell, prec, whh[0], whh[1], whh[T-1], full, full)
			}
			bytes[prec] = p.BufferBytes(KindWeight)
			for _, b := range prog.Weights() {
				if filepath.Ext(b.Name) == ".weight_hh" && b.ElemSize != prec.elemSize() {
					t.Errorf("%s: element size %d under %v", b.Name, b.ElemSize, prec)
				}
			}
		}
		// Biases stay float32, so bf16 is a little over half.
		if ratio := float64(bytes[BF16]) / float64(bytes[F32]); ratio < 0.5 || ratio > 0.53 {
			t.Errorf("%v: bf16/f32 weight bytes %.3f, want just over 0.5", cell, ratio)
		}
	}
}

// TestPartitionedStepWorkers checks that every step of a partitioned plan
// names the worker that runs it: each per-worker buffer (l0.w1.weight_hh,
// xp.w2, ...) is touched only by steps of its own worker, every worker has
// steps, and a plan on one core has worker 0 throughout.
func TestPartitionedStepWorkers(t *testing.T) {
	for _, cfg := range []rnn.Config{
		{Cell: rnn.LSTM, Input: 12, Hidden: 40, Proj: 10, Layers: 2, Vocab: 9, HeadOut: 7},
		{Cell: rnn.GRU, Input: 5, Hidden: 33, Layers: 3, Bidirectional: true, HeadOut: 4},
	} {
		net, err := rnn.NewNetwork(cfg, true)
		if err != nil {
			t.Fatal(err)
		}
		const T, B, N = 4, 2, 3
		in := Input{T: T, B: B}
		if cfg.Vocab > 0 {
			in.Tokens = make([]int64, T*B)
		}
		prog, err := NewPartitioned(net, PartitionOptions{Workers: N})
		if err != nil {
			t.Fatal(err)
		}
		if prog.Workers() != N || prog.Precision() != F32 {
			t.Errorf("%+v: program has %d workers, precision %v", cfg, prog.Workers(), prog.Precision())
		}
		p, err := prog.Plan(in, PlanOptions{Head: true})
		if err != nil {
			t.Fatal(err)
		}
		if p.Workers() != N {
			t.Errorf("%+v: plan has %d workers, want %d", cfg, p.Workers(), N)
		}
		steps := make([]int, N)
		for _, s := range p.Steps {
			if s.Worker < 0 || s.Worker >= N {
				t.Fatalf("%+v: step %v of layer %d at t=%d has worker %d", cfg, s.Kernel, s.Layer, s.T, s.Worker)
			}
			steps[s.Worker]++
			for _, r := range append(s.Reads(), s.Writes()...) {
				for _, part := range strings.Split(r.Buf.Name, ".") {
					var w int
					if _, err := fmt.Sscanf(part, "w%d", &w); err == nil && w != s.Worker {
						t.Errorf("%+v: worker %d's %v step touches %s", cfg, s.Worker, s.Kernel, r.Buf.Name)
					}
				}
			}
		}
		for w, n := range steps {
			if n == 0 {
				t.Errorf("%+v: worker %d has no steps", cfg, w)
			}
		}
		aplus, err := NewProgram(net, APlus)
		if err != nil {
			t.Fatal(err)
		}
		if p, err := aplus.Plan(in, PlanOptions{Head: true}); err != nil || p.Workers() != 1 || aplus.Workers() != 1 {
			t.Errorf("%+v: A+ plan on %d workers (%v)", cfg, p.Workers(), err)
		}
	}
	bf, err := NewPartitioned(randomNet(t, rnn.Config{Cell: rnn.GRU, Input: 3, Hidden: 4, Layers: 1}, 1), PartitionOptions{Workers: 1, Precision: BF16})
	if err != nil || bf.Precision() != BF16 || bf.Workers() != 1 {
		t.Errorf("bf16 program: precision %v, %d workers (%v)", bf.Precision(), bf.Workers(), err)
	}
}

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		n, parts int
		want     []span
	}{
		{64, 2, []span{{0, 32}, {32, 64}}},
		{100, 2, []span{{0, 48}, {48, 100}}},
		{5, 2, []span{{0, 2}, {2, 5}}},
		{1, 3, []span{{0, 0}, {0, 0}, {0, 1}}},
		{1024, 3, []span{{0, 344}, {344, 680}, {680, 1024}}},
	} {
		got := split(c.n, c.parts)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("split(%d, %d) = %v, want %v", c.n, c.parts, got, c.want)
		}
	}
}

func TestPartitionedOptions(t *testing.T) {
	net := randomNet(t, rnn.Config{Cell: rnn.GRU, Input: 3, Hidden: 4, Layers: 1}, 1)
	pool := testPool(t, 2)
	for _, opt := range []PartitionOptions{
		{Workers: -1}, {Workers: MaxWorkers + 1}, {Workers: 3, Pool: pool}, {Precision: 9},
	} {
		if _, err := NewPartitioned(net, opt); err == nil {
			t.Errorf("NewPartitioned(%+v) succeeded", opt)
		}
	}
	if _, err := NewPool(PoolOptions{Workers: runtime.GOMAXPROCS(0) + 1}); !errors.Is(err, ErrPool) {
		t.Errorf("NewPool beyond GOMAXPROCS: %v, want ErrPool", err)
	}
	for s, want := range map[string]Schedule{"P": Partitioned, "p": Partitioned, "A+": APlus} {
		if got, err := Parse(s); err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v", s, got, err)
		}
	}
	if Partitioned.String() != "P" {
		t.Errorf("Partitioned.String() = %q", Partitioned.String())
	}
	for s, want := range map[string]Precision{"": F32, "f32": F32, "bf16": BF16, "bfloat16": BF16} {
		if got, err := ParsePrecision(s); err != nil || got != want {
			t.Errorf("ParsePrecision(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParsePrecision("int4"); !errors.Is(err, ErrUnknownPrecision) {
		t.Errorf("ParsePrecision(int4) = %v", err)
	}
}

// TestPool runs many short phases on three workers and checks every
// worker ran every phase in order, with the barrier keeping them in step.
func TestPool(t *testing.T) {
	p := testPool(t, 3)
	const phases = 2000
	var seen [3][]int
	var inPhase atomic.Int64
	fs := make([]func(w int), phases)
	for i := range fs {
		fs[i] = func(w int) {
			seen[w] = append(seen[w], i)
			// Every worker of phase i must see the others' phase i-1
			// increments done: the counter is exactly 3*i + (0..2).
			if v := inPhase.Add(1) - 1; v/3 != int64(i) {
				panic(fmt.Sprintf("worker %d in phase %d saw count %d", w, i, v))
			}
		}
	}
	for rep := 0; rep < 3; rep++ {
		inPhase.Store(0)
		for w := range seen {
			seen[w] = seen[w][:0]
		}
		p.Run(fs)
		for w := range seen {
			if len(seen[w]) != phases || seen[w][phases-1] != phases-1 {
				t.Fatalf("worker %d ran %d phases", w, len(seen[w]))
			}
		}
	}
	var ran [3]atomic.Bool
	p.Each(func(w int) { ran[w].Store(true) })
	for w := range ran {
		if !ran[w].Load() {
			t.Errorf("Each skipped worker %d", w)
		}
	}
	if err := p.PinError(); err != nil {
		t.Errorf("unpinned pool reports %v", err)
	}
}

// TestPoolParksAndPins uses a pool that never spins, so every barrier and
// job start goes through the parking path, and pins its workers.
func TestPoolParksAndPins(t *testing.T) {
	p, err := NewPool(PoolOptions{Workers: runtime.GOMAXPROCS(0), Spin: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var n atomic.Int64
	fs := make([]func(w int), 50)
	for i := range fs {
		fs[i] = func(int) { n.Add(1) }
	}
	for rep := 0; rep < 5; rep++ {
		p.Run(fs)
	}
	if want := int64(5 * 50 * p.Workers()); n.Load() != want {
		t.Errorf("ran %d phase parts, want %d", n.Load(), want)
	}
	if err := p.PinError(); err != nil {
		t.Logf("pinning unavailable here: %v", err)
	}
	p.Close()
	p.Close() // a second Close is a no-op
}

// TestPoolTakesOverAbsentWorkers runs jobs on a pool whose helpers never
// come (as when their cores are busy with other processes): the caller
// must run every part itself, each once and phase by phase, and count
// the parts it took over.
func TestPoolTakesOverAbsentWorkers(t *testing.T) {
	p := &Pool{n: 3}
	p.wake.init()
	const phases = 50
	var order []int
	p.Phases(phases, func(ph, w int) { order = append(order, ph*3+w) })
	if len(order) != 3*phases {
		t.Fatalf("ran %d parts, want %d", len(order), 3*phases)
	}
	for i, v := range order {
		if v != i {
			t.Fatalf("part %d ran as number %d: parts must run once each, phase by phase", v, i)
		}
	}
	if got := p.Stolen(); got != 2*phases {
		t.Errorf("Stolen() = %d, want %d (the absent workers' parts)", got, 2*phases)
	}
}

// TestProjectionReadOnce checks that A+ and P mark their input
// projections (every W_ih product, all T steps at once) as reading W once,
// so the kernels pull W_ih in as a stream, and no other product: the
// recurrent W_hh and the head are re-read or warm.
func TestProjectionReadOnce(t *testing.T) {
	net := randomNet(t, rnn.Config{Cell: rnn.LSTM, Input: 12, Hidden: 16, Layers: 2}, 1)
	in := randomInput(net, 5, 1, false, rand.New(rand.NewPCG(1, 1)))
	progs := map[string]func() (*Program, error){
		"A+": func() (*Program, error) { return NewProgram(net, APlus) },
		"P":  func() (*Program, error) { return NewPartitioned(net, PartitionOptions{Workers: 1}) },
	}
	for name, mk := range progs {
		prog, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		p, err := prog.Plan(in, PlanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		projections := 0
		for _, st := range p.Steps {
			g, ok := st.op.(*gemmOp)
			if !ok {
				continue
			}
			ih := strings.HasSuffix(g.w.Buf.Name, ".weight_ih")
			if g.once != ih {
				t.Errorf("%s: product over %s has once = %v", name, g.w.Buf.Name, g.once)
			}
			if ih {
				projections++
			}
		}
		if projections < 2 {
			t.Errorf("%s: %d input projections marked, want one per layer at least", name, projections)
		}
	}
}

// TestPartitionedPacked checks P with packed W_hh and W_ih slices
// against P without: every output bit for bit, over random shapes of both cells
// (column counts that are and are not a multiple of eight), batches of
// 1 to 5 rows (the packed products of one, two and several rows), carried
// and initial states, on 1 to 3 workers; that exactly the slices packs
// allows are packed; and that both plans read the same regions. With the
// default bounds for a 1 MiB L2, hidden 512 on one worker (4 MiB W_hh
// slices) packs W_hh and hidden 256 (1 MiB) does not, and W_ih packs
// above 256 KiB; for a 2 MiB L2, above 2 MiB and 512 KiB.
func TestPartitionedPacked(t *testing.T) {
	pools := map[int]*Pool{2: testPool(t, 2), 3: testPool(t, 3)}
	r := rand.New(rand.NewPCG(17, 5))
	for i := 0; i < cases(24); i++ {
		hidden := []int{8, 16, 24, 40, 13, 21}[i%6]
		cfg := randomConfig(r, i, hidden, 1+r.IntN(3), 60)
		T, B := 1+r.IntN(8), 1+r.IntN(5)
		states := r.IntN(2) == 0
		workers := 1 + i%3
		name := fmt.Sprintf("%d/%v/h=%d/p=%d/L=%d/bi=%v/T=%d/B=%d/states=%v/workers=%d",
			i, cfg.Cell, cfg.Hidden, cfg.Proj, cfg.Layers, cfg.Bidirectional, T, B, states, workers)
		t.Run(name, func(t *testing.T) {
			net := randomNet(t, cfg, uint64(i))
			in := randomInput(net, T, B, states, r)
			progs := map[bool]*Program{}
			for _, packed := range []bool{false, true} {
				limit := -1
				if packed {
					limit = 1
				}
				prog, err := NewPartitioned(net, PartitionOptions{Workers: workers, Pool: pools[workers], PackBytes: limit})
				if err != nil {
					t.Fatal(err)
				}
				progs[packed] = prog
				for _, b := range prog.Weights() {
					cols := map[string]int{".weight_hh": cfg.Hidden, ".weight_ih": cfg.Input}
					if cfg.Proj > 0 {
						cols[".weight_hh"] = cfg.Proj
					}
					var k int
					if _, err := fmt.Sscanf(b.Name, "l%d", &k); err == nil {
						cols[".weight_ih"] = net.Layers[k][0].Input
					}
					c, ok := cols[filepath.Ext(b.Name)]
					want := packed && ok && c%8 == 0 && b.Elems > 0
					if b.Packed != want {
						t.Fatalf("%s (%d floats): packed %v, want %v", b.Name, b.Elems, b.Packed, want)
					}
				}
			}
			want := runProgram(t, progs[false], in)
			got := runProgram(t, progs[true], in)
			for _, c := range []struct {
				name      string
				got, want []float32
			}{{"output", got.Output, want.Output}, {"h_n", got.HN, want.HN}, {"c_n", got.CN, want.CN}, {"head", got.Head, want.Head}} {
				for j := range c.want {
					if math.Float32bits(c.got[j]) != math.Float32bits(c.want[j]) {
						t.Fatalf("%s[%d] = %v packed, %v not", c.name, j, c.got[j], c.want[j])
					}
				}
			}
			var regions [2][]string
			for k, packed := range []bool{false, true} {
				p, err := progs[packed].Plan(in, PlanOptions{Head: true})
				if err != nil {
					t.Fatal(err)
				}
				p.Walk(func(r Region, w bool) {
					regions[k] = append(regions[k], fmt.Sprintf("%s %d %d %d %d %v", r.Buf.Name, r.Off, r.Len, r.Count, r.Stride, w))
				})
			}
			if strings.Join(regions[0], "\n") != strings.Join(regions[1], "\n") {
				t.Error("the packed program's plan reads other regions")
			}
		})
	}
	for _, c := range []struct {
		l2            int64
		hidden, input int
		whh, wih      bool
	}{
		{1 << 20, 512, 8, true, false}, {1 << 20, 256, 256, false, true}, {1 << 20, 256, 64, false, false}, {1 << 20, 64, 64, false, false},
		// A 2 MiB L2 (Intel's Xeons): W_hh packs above 2 MiB, W_ih above 512 KiB.
		{2 << 20, 512, 8, true, false}, {2 << 20, 256, 256, false, true}, {2 << 20, 256, 128, false, false}, {2 << 20, 352, 8, false, false},
	} {
		net, err := rnn.NewNetwork(rnn.Config{Cell: rnn.LSTM, Input: c.input, Hidden: c.hidden, Layers: 1}, true)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := NewPartitioned(net, PartitionOptions{Workers: 1, PrivateCacheBytes: c.l2})
		if err != nil {
			t.Fatal(err)
		}
		wide := f32.WidePacked() // every W_hh slice of a multiple of 8 columns packed
		for _, b := range prog.Weights() {
			want, ok := map[string]bool{".weight_hh": c.whh || wide, ".weight_ih": c.wih}[filepath.Ext(b.Name)]
			if ok && b.Packed != want {
				t.Errorf("L2 %d, hidden %d input %d, default bounds: %s packed %v, want %v", c.l2, c.hidden, c.input, b.Name, b.Packed, want)
			}
		}
	}
}

// TestPackBounds checks both hosts' default bounds: W_hh from the L2's
// size where a row-major W's products are as wide as a packed one's,
// every W_hh slice where the packed ones are wider; W_ih from a quarter
// of L2 on both.
func TestPackBounds(t *testing.T) {
	for _, c := range []struct {
		l2       int64
		wide     bool
		whh, wih int
	}{{1 << 20, false, 1 << 20, 1 << 18}, {2 << 20, false, 2 << 20, 1 << 19}, {1 << 20, true, 0, 1 << 18}, {2 << 20, true, 0, 1 << 19}} {
		if whh, wih := packBounds(c.l2, c.wide); whh != c.whh || wih != c.wih {
			t.Errorf("packBounds(%d, %v) = %d, %d; want %d, %d", c.l2, c.wide, whh, wih, c.whh, c.wih)
		}
	}
	if !packs(64, 16, 0, 0) || packs(64, 12, 0, 0) || packs(0, 16, 0, 0) || packs(64, 16, -1, 0) || packs(64, 16, 0, 4096) || !packs(64, 16, 4095, -1) {
		t.Error("packs: a bound of 0 must pack every non-empty slice of a multiple of 8 columns, -1 none, an explicit limit override the default")
	}
}

// TestPartitionedAlternates runs P where its one-row steps read W_hh
// backwards at odd steps, with a 1 MiB L2 per core (LSTM: slices of 1
// MiB row-major, hidden 256 on one worker, and 2 MiB packed, hidden 512
// on two; GRU: 1.2 MiB packed, hidden 320 on one; Elman: 1 MiB
// row-major, hidden 512, and 1.6 MiB packed, hidden 640), with and
// without initial states, against A+, and checks that the plans do read
// W_hh backwards. Slices of four times L2 (LSTM hidden 512, GRU hidden
// 576, one worker) and of three quarters of it (GRU hidden 256, one
// worker) read W_hh backwards where f32.WidePacked, in order elsewhere.
func TestPartitionedAlternates(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, c := range []struct {
		cell            rnn.CellKind
		hidden, workers int
		// wideOnly: past twice L2, or from three quarters of it to L2
		// (GRU 256's 768 KiB): alternates only where wide
		wideOnly bool
	}{{rnn.LSTM, 256, 1, false}, {rnn.LSTM, 512, 2, false}, {rnn.GRU, 320, 1, false}, {rnn.RNNTanh, 512, 1, false}, {rnn.RNNReLU, 640, 1, false},
		{rnn.LSTM, 512, 1, true}, {rnn.GRU, 576, 1, true}, {rnn.GRU, 256, 1, true}} {
		cfg := rnn.Config{Cell: c.cell, Input: 24, Hidden: c.hidden, Layers: 1}
		net := randomNet(t, cfg, 3)
		prog, err := NewPartitioned(net, PartitionOptions{Workers: c.workers, Pool: testPool(t, c.workers), PrivateCacheBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		for _, states := range []bool{false, true} {
			in := randomInput(net, 4, 1, states, r)
			compareResults(t, runProgram(t, prog, in), run(t, net, APlus, in), 1e-5)
			backwards := backwardSteps(t, prog, in)
			if want := !c.wideOnly || f32.WidePacked(); (backwards > 0) != want {
				t.Errorf("%v hidden %d, %d workers: %d steps read W_hh backwards, want them to: %v", c.cell, c.hidden, c.workers, backwards, want)
			}
		}
	}
}

// TestPartitionedAlternatesBF16 runs P with bf16 weights whose W_hh
// slices (LSTM and GRU, hidden 512 on one worker: 2 and 1.5 MiB) lie in
// alternates' range on every host, with a 1 MiB L2: the plan must read
// W_hh backwards at odd steps and still equal A+ in float32 on the
// network with its weights rounded to bf16.
func TestPartitionedAlternatesBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	for i, cell := range []rnn.CellKind{rnn.LSTM, rnn.GRU} {
		cfg := rnn.Config{Cell: cell, Input: 24, Hidden: 512, Layers: 1}
		net := randomNet(t, cfg, uint64(i+200))
		prog, err := NewPartitioned(net, PartitionOptions{Workers: 1, Pool: testPool(t, 1), PrivateCacheBytes: 1 << 20, Precision: BF16})
		if err != nil {
			t.Fatal(err)
		}
		rounded := randomNet(t, cfg, uint64(i+200))
		for _, dirs := range rounded.Layers {
			for _, l := range dirs {
				for _, w := range [][]float32{l.Wih, l.Whh} {
					b := make([]uint16, len(w))
					f32.ToBF16(b, w)
					f32.FromBF16(w, b)
				}
			}
		}
		for _, states := range []bool{false, true} {
			in := randomInput(net, 4, 1, states, r)
			compareResults(t, runProgram(t, prog, in), run(t, rounded, APlus, in), 1e-5)
			if backwardSteps(t, prog, in) == 0 {
				t.Errorf("%v hidden 512 bf16: no step reads W_hh backwards", cell)
			}
		}
	}
}

// backwardSteps is the number of steps of prog's plan for in that read
// W_hh backwards.
func backwardSteps(t *testing.T, prog *Program, in Input) int {
	t.Helper()
	p, err := prog.Plan(in, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, st := range p.Steps {
		switch o := st.op.(type) {
		case *gemmOp:
			n += btoi(o.reverse)
		case *lstmStepOp:
			n += btoi(o.reverse)
		}
	}
	return n
}

// TestAlternatesBounds checks which W_hh slices alternate on a host with
// a 32 KiB L1d and a 1 MiB L2 per core, with the AVX-512 packed products
// (wide) and without.
func TestAlternatesBounds(t *testing.T) {
	const l1, l2 = 32 << 10, 1 << 20
	for _, c := range []struct {
		size       int
		wide, want bool
	}{
		{24<<10 - 4, true, false}, {24 << 10, true, true}, {24 << 10, false, false}, {32 << 10, true, true},
		{32 << 10, false, false}, {32<<10 + 4, false, true}, {64 << 10, true, true}, {64<<10 + 4, false, false},
		{64<<10 + 4, true, false},
		{512 << 10, true, false}, {768<<10 - 4, true, false}, {768 << 10, true, true}, {768 << 10, false, false},
		{1<<20 - 4, true, true}, {1<<20 - 4, false, false}, {1 << 20, false, true}, {2 << 20, false, true},
		{2<<20 + 4, false, false}, {2<<20 + 4, true, true}, {16 << 20, false, false}, {16 << 20, true, true},
	} {
		if got := alternates(c.size, l1, l2, c.wide); got != c.want {
			t.Errorf("alternates(%d, wide %v) = %v, want %v", c.size, c.wide, got, c.want)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestReversedGemm checks that a reversed product of one row (W's rows in
// chunks from the last) gives the plain product's bits, float32 row-major
// (with a row gap) and packed and bf16 row-major (with a row gap), and
// declares the same bytes of W, chunk by chunk in the order it reads
// them.
func TestReversedGemm(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, n := range []int{8, 96, 136, 264} {
		for _, k := range []int{1, 7, 64, 75} {
			for _, form := range []string{"row-major", "packed", "bf16"} {
				packed := form == "packed"
				ld := k
				if !packed {
					ld += 3
				}
				wb := &Buffer{Name: "w", Kind: KindWeight, Elems: n * ld, ElemSize: 4, F32: make([]float32, n*ld)}
				for i := range wb.F32 {
					wb.F32[i] = r.Float32() - 0.5
				}
				switch form {
				case "packed":
					rm := append([]float32(nil), wb.F32...)
					f32.PackNT(wb.F32, n, k, rm, k)
					wb.Packed = true
				case "bf16":
					wb.U16 = make([]uint16, n*ld)
					f32.ToBF16(wb.U16, wb.F32)
					wb.F32, wb.ElemSize = nil, 2
				}
				ab := &Buffer{Name: "a", Kind: KindInput, Elems: k, ElemSize: 4, F32: make([]float32, k)}
				for i := range ab.F32 {
					ab.F32[i] = r.Float32() - 0.5
				}
				var got [2][]float32
				var regs [2][]Region
				for i, rev := range []bool{false, true} {
					cb := &Buffer{Name: "c", Kind: KindActivation, Elems: n, ElemSize: 4, F32: make([]float32, n)}
					o := newGemmNT(Dense(cb, 0, 1, n), Dense(ab, 0, 1, k), M(wb, 0, n, k, ld), 0)
					if rev {
						o = reversed(o)
					}
					o.run()
					got[i] = cb.F32
					o.regions(func(g Region, write bool) {
						if g.Buf == wb {
							regs[i] = append(regs[i], g)
						}
					})
				}
				what := fmt.Sprintf("n=%d k=%d %s", n, k, form)
				for j := range got[0] {
					if math.Float32bits(got[0][j]) != math.Float32bits(got[1][j]) {
						t.Fatalf("%s: row %d = %v reversed, %v not", what, j, got[1][j], got[0][j])
					}
				}
				var bytes [2]int64
				for i := range regs {
					for _, g := range regs[i] {
						bytes[i] += g.Bytes()
					}
				}
				chunks := (n + reverseRows - 1) / reverseRows
				if bytes[0] != bytes[1] || len(regs[1]) != chunks || regs[1][0].Off <= regs[1][len(regs[1])-1].Off && chunks > 1 {
					t.Errorf("%s: reversed W regions %v (%d bytes), plain %v (%d)", what, regs[1], bytes[1], regs[0], bytes[0])
				}
			}
		}
	}
}

// TestPartitionedChunked checks LSTM slices kept in f32's chunked order:
// with every slice packed and a private cache that puts W_hh in
// alternates' range (hidden 64 and 256 on one worker, 128 on two, with a
// projection, two directions and two layers), P gives the bits of the
// same slices unpacked, which stay gate-major, at one row and three (with
// lengths), with and without
// initial states; its one-row steps read W_hh chunk by chunk backwards at
// odd steps, and a slice whose units are not a multiple of
// f32.StepChunk stays gate-major.
func TestPartitionedChunked(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 10))
	for _, c := range []struct {
		cfg     rnn.Config
		workers int
	}{
		{rnn.Config{Cell: rnn.LSTM, Input: 16, Hidden: 64, Layers: 2}, 1},
		{rnn.Config{Cell: rnn.LSTM, Input: 24, Hidden: 256, Layers: 1}, 1},
		{rnn.Config{Cell: rnn.LSTM, Input: 8, Hidden: 128, Layers: 1, Bidirectional: true}, 2},
		{rnn.Config{Cell: rnn.LSTM, Input: 8, Hidden: 64, Proj: 24, Layers: 2}, 1},
		{rnn.Config{Cell: rnn.LSTM, Input: 8, Hidden: 40, Layers: 1}, 1},
	} {
		net := randomNet(t, c.cfg, 5)
		units := c.cfg.Hidden / c.workers
		whh := int64(4 * 4 * units * net.Layers[0][0].Out())
		pool := testPool(t, c.workers)
		chunked, err := NewPartitioned(net, PartitionOptions{Workers: c.workers, Pool: pool, PackBytes: 1, PrivateCacheBytes: whh})
		if err != nil {
			t.Fatal(err)
		}
		plain, err := NewPartitioned(net, PartitionOptions{Workers: c.workers, Pool: pool, PackBytes: -1, PrivateCacheBytes: whh})
		if err != nil {
			t.Fatal(err)
		}
		want := units%f32.StepChunk == 0
		for _, dirs := range chunked.part.layers {
			for _, pl := range dirs {
				for w := range pl.w {
					if pl.w[w].chunked != want || plain.part.layers[0][0].w[w].chunked {
						t.Errorf("%+v: slice %d chunked %v (want %v), plain %v", c.cfg, w, pl.w[w].chunked, want, plain.part.layers[0][0].w[w].chunked)
					}
				}
			}
		}
		for _, B := range []int{1, 3} {
			for _, states := range []bool{false, true} {
				in := randomInput(net, 5, B, states, r)
				if B == 3 {
					in.Lengths = []int{5, 4, 2}
				}
				what := fmt.Sprintf("%+v B=%d states=%v", c.cfg, B, states)
				got, exp := runProgram(t, chunked, in), runProgram(t, plain, in)
				sameBits(t, what+": output, h_n, c_n", [][]float32{got.Output, got.HN, got.CN}, [][]float32{exp.Output, exp.HN, exp.CN})
				if B > 1 || !want {
					continue
				}
				p, err := chunked.Plan(in, PlanOptions{})
				if err != nil {
					t.Fatal(err)
				}
				back := 0
				for _, st := range p.Steps {
					if o, ok := st.op.(*lstmStepOp); ok && o.chunked && o.reverse {
						back++
					}
				}
				if back == 0 {
					t.Errorf("%s: no chunked step reads W_hh backwards", what)
				}
			}
		}
	}
}

// TestResident checks the count of models and what ran beside each:
// bytes through Add and Remove (twice), the models that ran since one
// last did, each once, and none before any ran; and that concurrent
// models keep it consistent (go test -race).
func TestResident(t *testing.T) {
	var r Resident
	a, b, c := r.Add(1), r.Add(10), r.Add(100)
	if r.Bytes() != 111 || a.Beside() != 0 {
		t.Fatalf("nothing ran: %d bytes, %d beside", r.Bytes(), a.Beside())
	}
	b.Ran()
	c.Ran()
	c.Ran()
	if got := a.Beside(); got != 110 {
		t.Fatalf("a never ran, b and c did: %d beside, want 110", got)
	}
	a.Ran()
	b.Ran()
	if got := a.Beside(); got != 10 {
		t.Fatalf("b ran since a: %d beside, want 10", got)
	}
	if got := b.Beside(); got != 0 {
		t.Fatalf("b ran last: %d beside, want 0", got)
	}
	b.Remove()
	b.Remove()
	if got := a.Beside(); got != 0 || r.Bytes() != 101 {
		t.Fatalf("b removed: %d beside, %d bytes", got, r.Bytes())
	}
	var nilW *Weights
	nilW.Ran()
	if nilW.Beside() != 0 {
		t.Fatal("a nil entry counts something")
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				w := r.Add(int64(g + i))
				w.Ran()
				a.Ran()
				if w.Beside() < 0 {
					t.Error("negative bytes beside")
				}
				w.Remove()
			}
		})
	}
	wg.Wait()
	if r.Bytes() != 101 {
		t.Fatalf("after the concurrent models: %d bytes, want 101", r.Bytes())
	}
}

// TestPartitionedNear checks which input projections P marks as finding
// W_ih in a cache (f32.GemmNTPackedNear): every one of a model that fits
// half the last level cache, none of one that does not (dry networks
// sized from this host's L3); and that a plan gives the same results
// either way, its W_ih packed and multiplied by ten rows a layer.
func TestPartitionedNear(t *testing.T) {
	l3 := host.Get().L3()
	perLayer := int64(4 * 4 * 1024 * 2048) // LSTM, hidden 1024, input 1024: W_ih and W_hh
	big := int(l3/2/perLayer) + 1
	// projections returns the input projections of prog's plan at T = 10.
	projections := func(t *testing.T, prog *Program) []*gemmOp {
		t.Helper()
		p, err := prog.Plan(Input{T: 10, B: 1}, PlanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ops []*gemmOp
		for _, st := range p.Steps {
			if o, ok := st.op.(*gemmOp); ok && o.once {
				ops = append(ops, o)
			}
		}
		if len(ops) == 0 {
			t.Fatal("no input projection in the plan")
		}
		return ops
	}
	near := func(t *testing.T, ops []*gemmOp, want bool, what string) {
		t.Helper()
		for _, o := range ops {
			if got := o.near != nil && o.near(); got != want {
				t.Fatalf("%s (L3 %d MiB): an input projection has near %v, want %v", what, l3>>20, got, want)
			}
		}
	}
	for _, c := range []struct {
		hidden, layers int
		near           bool
	}{{64, 1, true}, {1024, big, false}} {
		net, err := rnn.NewNetwork(rnn.Config{Cell: rnn.LSTM, Input: c.hidden, Hidden: c.hidden, Layers: c.layers}, true)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := NewPartitioned(net, PartitionOptions{Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		near(t, projections(t, prog), c.near, fmt.Sprintf("hidden %d, %d layers (%d MiB) alone", c.hidden, c.layers, net.WeightBytes()>>20))
	}
	// Beside other models: its own weights and those of the models that
	// ran since it last did decide, at every run; idle models count for
	// nothing, and a model that ran twice counts once.
	small, err := rnn.NewNetwork(rnn.Config{Cell: rnn.LSTM, Input: 64, Hidden: 64, Layers: 1}, true)
	if err != nil {
		t.Fatal(err)
	}
	large, err := rnn.NewNetwork(rnn.Config{Cell: rnn.LSTM, Input: 1024, Hidden: 1024, Layers: big}, true)
	if err != nil {
		t.Fatal(err)
	}
	var res Resident
	ws, wl := res.Add(small.WeightBytes()), res.Add(large.WeightBytes())
	ps, err := NewPartitioned(small, PartitionOptions{Workers: 2, Weights: ws})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := NewPartitioned(large, PartitionOptions{Workers: 2, Weights: wl})
	if err != nil {
		t.Fatal(err)
	}
	opsSmall, opsLarge := projections(t, ps), projections(t, pl)
	near(t, opsSmall, true, "the small model, the large one loaded and idle")
	near(t, opsLarge, false, "the large model, nothing ran")
	wl.Ran()
	near(t, opsSmall, false, "the small model after the large one ran")
	ws.Ran()
	near(t, opsSmall, true, "the small model after it ran again")
	wl.Ran()
	wl.Remove()
	wl.Remove()
	near(t, opsSmall, true, "the small model once the large one is gone")
	if got, want := res.Bytes(), small.WeightBytes(); got != want {
		t.Fatalf("%d bytes counted, want %d", got, want)
	}
	fill := res.Add(l3/2 - small.WeightBytes())
	fill.Ran()
	fill.Ran()
	near(t, opsSmall, true, "the small model beside the rest of half the L3, run twice")
	res.Add(1).Ran()
	near(t, opsSmall, false, "the small model beside a byte past half the L3")

	r := rand.New(rand.NewPCG(12, 12))
	net := randomNet(t, rnn.Config{Cell: rnn.LSTM, Input: 64, Hidden: 64, Layers: 2}, 12)
	var beside Resident
	prog, err := NewPartitioned(net, PartitionOptions{Workers: 1, PackBytes: 1, Weights: beside.Add(net.WeightBytes())})
	if err != nil {
		t.Fatal(err)
	}
	in := randomInput(net, 10, 1, true, r)
	want := run(t, net, APlus, in)
	for _, far := range []int64{0, l3} {
		beside.Add(far).Ran()
		if got := prog.part.near(); got != (far == 0) {
			t.Fatalf("near %v beside %d bytes", got, far)
		}
		compareResults(t, runProgram(t, prog, in), want, 1e-5)
	}
}
