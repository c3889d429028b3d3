package schedule

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rnnserve/internal/f32"
	"rnnserve/internal/invariants"
	"rnnserve/models"
	"rnnserve/rnn"
)

// plantKind is how a lyingOp misdeclares one region.
type plantKind uint8

const (
	plantDrop   plantKind = iota // leave the region out
	plantShrink                  // cut its last row (or element) off
	plantGrow                    // add a row (or an element) after its last
)

var plantKinds = [...]string{plantDrop: "dropped", plantShrink: "shrunk", plantGrow: "grown"}

// lyingOp runs a real op but declares its regions wrongly: the region
// numbered drop (reads and writes counted together) misdeclared by how.
type lyingOp struct {
	op
	drop int
	how  plantKind
}

func (o *lyingOp) regions(fn func(Region, bool)) {
	i := 0
	o.op.regions(func(r Region, w bool) {
		defer func() { i++ }()
		if i != o.drop {
			fn(r, w)
			return
		}
		es := int64(r.Buf.ElemSize)
		switch {
		case o.how == plantDrop:
			return
		case o.how == plantGrow && r.Count > 1:
			r.Count++
		case o.how == plantGrow:
			r.Len += es
		case r.Count > 1:
			r.Count--
		case r.Len > es:
			r.Len -= es
		default:
			return
		}
		fn(r, w)
	})
}

// plantAll plants every kind of wrong declaration in every region of
// every step of the steps build makes (afresh for each plant, over the
// buffers it returns), one at a time, and requires the checker to fail on
// each, naming the step; the steps unplanted pass. A plant that leaves
// the bytes the step declares as they were (another region declares the
// same) is skipped. It returns the number of plants.
func plantAll(t *testing.T, name string, build func() ([]Step, []*Buffer)) int {
	t.Helper()
	steps, bufs := build()
	if err := checkSteps(steps, 0, bufs); err != nil {
		t.Fatalf("%s: unplanted: %v", name, err)
	}
	planted := 0
	for i := range steps {
		if len(steps[i].Writes()) == 0 {
			// A step that copies its results out to the caller's memory
			// (cellular batching's outputs) writes nothing the checker
			// sees: a read it leaves out is not caught.
			continue
		}
		n := 0
		steps[i].Regions(func(Region, bool) { n++ })
		for drop := range n {
			for how := range plantKinds {
				// The steps before the plant run as they are, so that only
				// the planted step is checked (and a gather's ids are those
				// it reads).
				q, bufs := build()
				runSteps(q[:i])
				honest := declared(&q[i])
				q[i].op = &lyingOp{op: q[i].op, drop: drop, how: plantKind(how)}
				if declared(&q[i]) == honest {
					continue
				}
				err := checkSteps(q[i:i+1], i, bufs)
				var re *RegionError
				if !errors.As(err, &re) || !errors.Is(err, ErrRegion) {
					t.Fatalf("%s: step %d (%v) with region %d %s: checker returned %v", name, i, steps[i].Kernel, drop, plantKinds[how], err)
				}
				if re.Step != i {
					t.Fatalf("%s: planted in step %d (region %d %s), reported step %d: %v", name, i, drop, plantKinds[how], re.Step, err)
				}
				planted++
			}
		}
	}
	return planted
}

// TestRegionCheckerCatchesPlantedRegions plants wrong declarations (see
// plantAll) in real plans of every kind of op: every sequence schedule (P
// on two workers where the host has two cores, P reading W_hh backwards
// at odd steps) at batch 1 (one-row steps) and 2, both tree executors on
// every tree cell, the attention decoder, cellular batching's steps and a
// top-down generation's.
func TestRegionCheckerCatchesPlantedRegions(t *testing.T) {
	pool := twoWorkers(t)
	planSteps := func(p *Plan) ([]Step, []*Buffer) { return p.Steps, p.Buffers }
	r := rand.New(rand.NewPCG(3, 4))
	t.Run("sequence", func(t *testing.T) {
		schedules := sequenceSchedules(pool)
		// Reading W_hh backwards at odd steps of one row: a private cache
		// of W_hh's size puts it in alternates' range.
		for _, cell := range []rnn.CellKind{rnn.LSTM, rnn.GRU} {
			whh := int64(4 * cell.Gates() * 64 * 64)
			schedules = append(schedules, sequenceSchedule{"P1-alternating-" + cell.String(), 0, func(n *rnn.Network) (*Program, error) {
				return NewPartitioned(n, PartitionOptions{Workers: 1, PrivateCacheBytes: whh})
			}})
		}
		for _, cfg := range []rnn.Config{
			{Cell: rnn.LSTM, Input: 3, Hidden: 5, Proj: 2, Layers: 2, Vocab: 6, HeadOut: 6, Activation: rnn.ActLogSoftmax},
			{Cell: rnn.GRU, Input: 4, Hidden: 6, Layers: 1, Bidirectional: true, HeadOut: 3},
			// tanh, not relu: a relu unit's exact zeros make the weights
			// they multiply unread in value, which no checker can see.
			{Cell: rnn.RNNTanh, Input: 4, Hidden: 6, Layers: 1, Bidirectional: true, HeadOut: 3, HeadInput: rnn.HeadFinalState},
			{Cell: rnn.LSTM, Input: 8, Hidden: 64, Layers: 1},
			{Cell: rnn.GRU, Input: 8, Hidden: 64, Layers: 1},
		} {
			net := randomNet(t, cfg, 1)
			for _, B := range []int{1, 2} {
				in := randomInput(net, 3, B, true, r)
				for _, s := range schedules {
					alternating := strings.HasPrefix(s.name, "P1-alternating")
					if s.prog == nil || alternating != (cfg.Hidden == 64) || alternating && !strings.HasSuffix(s.name, cfg.Cell.String()) {
						continue
					}
					prog, err := s.prog(net)
					if err != nil {
						t.Fatal(err)
					}
					name := fmt.Sprintf("%s %v B=%d", s.name, cfg.Cell, B)
					n := plantAll(t, name, func() ([]Step, []*Buffer) {
						p, err := prog.Plan(in, PlanOptions{Head: true})
						if err != nil {
							t.Fatal(err)
						}
						return planSteps(p)
					})
					if n < 50 {
						t.Errorf("%s: only %d plants", name, n)
					}
				}
			}
		}
	})
	t.Run("trees", func(t *testing.T) {
		for _, name := range []string{"tree_rnn", "rntn", "binary_treelstm", "childsum_treelstm"} {
			m, trees := GoldenTrees(t, filepath.Join("testdata", "trees", "golden", name))
			for _, words := range []int64{0, -1} {
				prog, err := NewTreeProgramWith(m.Net, TreeProgramOptions{MaxWordTable: words})
				if err != nil {
					t.Fatal(err)
				}
				for _, opt := range []TreeOptions{
					{Executor: Recursive, Workers: 1, AllNodes: true},
					{Executor: DepthBatched, Workers: 1},
					{Executor: DepthBatched, Workers: 2, AllNodes: true},
				} {
					what := fmt.Sprintf("%s tables=%v %v parts=%d", name, prog.WordTable(), opt.Executor, opt.Workers)
					n := plantAll(t, what, func() ([]Step, []*Buffer) {
						tp, err := prog.Plan(trees[:min(3, len(trees))], opt)
						if err != nil {
							t.Fatal(err)
						}
						return planSteps(tp.Plan)
					})
					if n < 20 {
						t.Errorf("%s: only %d plants", what, n)
					}
				}
			}
		}
	})
	t.Run("decoder", func(t *testing.T) {
		for i, tc := range decoderCases() {
			encNet := randomNet(t, tc.enc, uint64(i)+1)
			dec := randomDecoder(t, tc.dec, uint64(i)+2)
			dp, err := NewDecoderProgram(dec)
			if err != nil {
				t.Fatal(err)
			}
			_, encIn := encoderPlan(t, encNet, tc.s, tc.T, tc.B, rand.New(rand.NewPCG(uint64(i), 11)))
			prog, err := NewProgram(encNet, tc.s)
			if err != nil {
				t.Fatal(err)
			}
			n := plantAll(t, tc.name, func() ([]Step, []*Buffer) {
				ep, err := prog.Plan(encIn, PlanOptions{})
				if err != nil {
					t.Fatal(err)
				}
				d, err := dp.Plan(ep, DecodeInput{Steps: 2, Start: 1})
				if err != nil {
					t.Fatal(err)
				}
				return planSteps(d.Plan)
			})
			if n < 50 {
				t.Errorf("%s: only %d plants", tc.name, n)
			}
		}
	})
	t.Run("stepper", func(t *testing.T) {
		for _, cfg := range []rnn.Config{
			{Cell: rnn.LSTM, Input: 4, Hidden: 9, Proj: 3, Layers: 2, Vocab: 13, HeadOut: 13},
			{Cell: rnn.GRU, Input: 5, Hidden: 7, Layers: 1, HeadOut: 4, Activation: rnn.ActSoftmax},
		} {
			net := randomNet(t, cfg, 2)
			in := randomInput(net, 3, 1, true, r)
			n := plantAll(t, "stepper "+cfg.Cell.String(), func() ([]Step, []*Buffer) {
				// TraceStepper's steps, the sequence kept in (its outputs'
				// steps append to it).
				st, err := NewStepper(net, 1)
				if err != nil {
					t.Fatal(err)
				}
				st.tracing = true
				q := &Sequence{Tokens: in.Tokens, Features: in.Features, H0: in.H0, C0: in.C0, Head: HeadAll, Outputs: true}
				if err := st.Add(q); err != nil {
					t.Fatal(err)
				}
				for q.Pending() {
					st.Step()
				}
				bufs := st.buffers()
				for i := range st.trace {
					st.trace[i].Regions(func(r Region, _ bool) {
						if !slices.Contains(bufs, r.Buf) {
							bufs = append(bufs, r.Buf)
						}
					})
				}
				return st.trace, bufs
			})
			if n < 50 {
				t.Errorf("stepper %v: only %d plants", cfg.Cell, n)
			}
		}
	})
	t.Run("generate", func(t *testing.T) {
		m, err := models.LoadTree(filepath.Join("testdata", "trees", "golden", "topdown_treelstm", "model.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		prog, err := NewTreeProgram(m.Net)
		if err != nil {
			t.Fatal(err)
		}
		n := plantAll(t, "generate", func() ([]Step, []*Buffer) {
			g, err := prog.Generate(3, GenerateOptions{MaxNodes: 4, Workers: 1})
			if err != nil {
				t.Fatal(err)
			}
			return planSteps(g.Plan)
		})
		if n < 50 {
			t.Errorf("generate: only %d plants", n)
		}
	})
}

// TestRegionCheckerKinds checks each kind of violation on a hand-built
// step: an undeclared write, a read of undeclared memory, and a declared
// write never made.
func TestRegionCheckerKinds(t *testing.T) {
	buf := func(name string, v ...float32) *Buffer {
		return &Buffer{Name: name, Kind: KindActivation, Elems: len(v), ElemSize: 4, F32: v}
	}
	a, b := buf("a", 1, 2, 3, 4), buf("b", 0, 0, 0, 0)
	for _, tc := range []struct {
		name string
		o    op
		how  string
	}{
		{"undeclared write", &lyingOp{op: newCopy(Dense(b, 0, 1, 4), Dense(a, 0, 1, 4)), drop: 1, how: plantShrink}, "written but not declared"},
		{"undeclared read", &lyingOp{op: newCopy(Dense(b, 0, 1, 4), Dense(a, 0, 1, 4)), drop: 0, how: plantShrink}, "depends on memory"},
		{"write never made", &overclaim{newCopy(Dense(b, 0, 1, 2), Dense(a, 0, 1, 2))}, "never written"},
		{"read never made", &extraRead{newCopy(Dense(b, 0, 1, 2), Dense(a, 0, 1, 2)), Dense(a, 2, 1, 2)}, "never read"},
		{"read one element too long", &extraRead{newCopy(Dense(b, 0, 1, 2), Dense(a, 0, 1, 2)), Dense(a, 0, 1, 3)}, "never read"},
		{"C read at beta 0", &extraRead{newGemmNT(Dense(b, 0, 1, 2), Dense(a, 0, 1, 2), Dense(a, 0, 2, 2), 0), Dense(b, 0, 1, 2)}, "never read"},
	} {
		err := checkSteps([]Step{{Kernel: tc.o.kernel(), op: tc.o}}, 7, nil)
		var re *RegionError
		if !errors.As(err, &re) || re.Step != 7 || !contains(re.How, tc.how) {
			t.Errorf("%s: got %v, want a RegionError at step 7 saying %q", tc.name, err, tc.how)
		}
	}
	// A violation leaves the buffers as they were before the step.
	if a.F32[0] != 1 || a.F32[3] != 4 {
		t.Errorf("a = %v after the checks, want it unchanged", a.F32)
	}
	// A correct step passes and its writes are kept.
	if err := checkSteps([]Step{{Kernel: KCopy, op: newCopy(Dense(b, 0, 1, 4), Dense(a, 0, 1, 4))}}, 0, nil); err != nil {
		t.Fatal(err)
	}
	if b.F32[0] != 1 || b.F32[3] != 4 {
		t.Errorf("b = %v after a checked copy, want a's values", b.F32)
	}
}

// declared is the set of (buffer, byte, write) a step declares, as a
// string: each buffer's read and written bytes as sorted, merged ranges.
func declared(s *Step) string {
	type key struct {
		buf   *Buffer
		write bool
	}
	ranges := map[key][][2]int64{}
	var keys []key
	s.Regions(func(r Region, w bool) {
		k := key{r.Buf, w}
		if _, ok := ranges[k]; !ok {
			keys = append(keys, k)
		}
		for i := range int64(r.Count) {
			if r.Len > 0 {
				ranges[k] = append(ranges[k], [2]int64{r.Off + i*r.Stride, r.Off + i*r.Stride + r.Len})
			}
		}
	})
	slices.SortFunc(keys, func(a, b key) int {
		if c := strings.Compare(a.buf.Name, b.buf.Name); c != 0 {
			return c
		}
		return map[bool]int{false: 0, true: 1}[a.write] - map[bool]int{false: 0, true: 1}[b.write]
	})
	var out strings.Builder
	for _, k := range keys {
		rs := ranges[k]
		slices.SortFunc(rs, func(a, b [2]int64) int { return int(a[0] - b[0]) })
		var merged [][2]int64
		for _, r := range rs {
			if n := len(merged); n > 0 && r[0] <= merged[n-1][1] {
				merged[n-1][1] = max(merged[n-1][1], r[1])
				continue
			}
			merged = append(merged, r)
		}
		fmt.Fprintf(&out, "%p %v %v;", k.buf, k.write, merged)
	}
	return out.String()
}

// overclaim declares its copy's destination twice as wide as it writes.
type overclaim struct{ *copyOp }

func (o *overclaim) regions(fn func(Region, bool)) {
	emit(fn, o.src, false)
	d := o.dst
	d.Cols *= 2
	emit(fn, d, true)
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// extraRead is an op that declares one more read than it makes.
type extraRead struct {
	op
	extra Mat
}

func (o *extraRead) regions(fn func(Region, bool)) {
	emit(fn, o.extra, false)
	o.op.regions(fn)
}

// TestRegionCheckerOrder checks, under the invariants build tag (where
// the kernels report the chunks they read W in), that a reversed LSTM
// step whose regions declare W in the kernel's order passes, and one
// that declares W whole, or its chunks forwards, fails on W.
func TestRegionCheckerOrder(t *testing.T) {
	if !invariants.Enabled {
		t.Skip("the kernels report the order they read in only under the invariants build tag")
	}
	const H, k = 2 * f32.StepChunk, 8
	r := rand.New(rand.NewPCG(5, 5))
	buf := func(name string, n int) *Buffer {
		b := &Buffer{Name: name, Kind: KindActivation, Elems: n, ElemSize: 4, F32: make([]float32, n)}
		for i := range b.F32 {
			b.F32[i] = float32(r.Float64() - 0.5)
		}
		return b
	}
	y, h, w, bias, c, hout := buf("y", 4*H), buf("h", k), buf("w", 4*H*k), buf("bias", 4*H), buf("c", H), buf("hout", H)
	for _, reverse := range []bool{false, true} {
		o := newLSTMStep(Dense(y, 0, 1, 4*H), Dense(h, 0, 1, k), Dense(w, 0, 4*H, k), Whole(bias), Dense(c, 0, 1, H), Dense(hout, 0, 1, H), reverse, false)
		if err := checkSteps([]Step{{Kernel: KLSTMStep, op: o}}, 0, nil); err != nil {
			t.Errorf("reverse=%v, declared as the kernel reads: %v", reverse, err)
		}
		if !reverse {
			continue
		}
		for name, lie := range map[string]op{
			"W whole":         &wDeclared{o, func(fn func(Region, bool)) { emit(fn, o.w, false) }},
			"chunks forwards": &wDeclared{o, func(fn func(Region, bool)) { forwardChunks(o, fn) }},
			"gates of a chunk reversed": &wDeclared{o, func(fn func(Region, bool)) {
				f32.BackChunks(H, f32.StepChunk, func(lo, hi int) {
					for g := 3; g >= 0; g-- {
						emit(fn, o.w.RowRange(g*H+lo, g*H+hi), false)
					}
				})
			}},
		} {
			err := checkSteps([]Step{{Kernel: KLSTMStep, op: lie}}, 3, nil)
			var re *RegionError
			if !errors.As(err, &re) || re.Step != 3 || re.Buffer != "w" {
				t.Errorf("%s: got %v, want a RegionError at step 3 on w", name, err)
			}
		}
	}
}

// forwardChunks declares o's W chunk by chunk from the first.
func forwardChunks(o *lstmStepOp, fn func(Region, bool)) {
	H := o.hout.Cols
	for lo := 0; lo < H; lo += f32.StepChunk {
		for g := range 4 {
			emit(fn, o.w.RowRange(g*H+lo, g*H+min(lo+f32.StepChunk, H)), false)
		}
	}
}

// wDeclared is an LSTM step that declares its W by w and everything
// else as it is.
type wDeclared struct {
	*lstmStepOp
	w func(fn func(Region, bool))
}

func (o *wDeclared) regions(fn func(Region, bool)) {
	o.w(fn)
	o.lstmStepOp.regions(func(r Region, write bool) {
		if r.Buf != o.lstmStepOp.w.Buf {
			fn(r, write)
		}
	})
}
