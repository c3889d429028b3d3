package schedule

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"rnnserve/models"
	"rnnserve/models/safetensors"
	"rnnserve/rnn"
	"rnnserve/rnn/tree"
)

// conformance is one program, on one input, as every schedule must pass
// it (gonum's testblas habit: one function, every implementation).
type conformance struct {
	// build makes the plan of the input: wet to run, dry (shapes only,
	// no weights) to walk; a nil dry means the structure is decided while
	// the plan runs (top-down generation), so there is no dry plan.
	build func(dry bool) (*Plan, error)
	// outputs reads the named outputs after the plan ran.
	outputs func() map[string][]float32
	want    map[string][]float64
	tol     float64
	// dryless: the plan's structure is only known after it ran.
	dryless bool
}

// conform checks c three ways:
//
//  1. the plan, run step by step under the region checker, gives the
//     reference outputs within c.tol (relative to max(1, |want|));
//  2. every step touches exactly the regions it declares (RunChecked);
//  3. the dry plan walks exactly as the plan that ran, region by region
//     (the traffic analysis sees what runs), and Run (parallel where the
//     plan is) gives bit for bit what the checked run gave.
func conform(t *testing.T, c conformance) {
	t.Helper()
	p, err := c.build(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RunChecked(); err != nil {
		t.Fatalf("region check: %v", err)
	}
	got := c.outputs()
	for name, want := range c.want {
		if err := closeTo64(got[name], want, c.tol); err != nil {
			t.Errorf("%s vs the reference: %v", name, err)
		}
	}
	checked := map[string][]float32{}
	for name, v := range got {
		checked[name] = slices.Clone(v)
	}
	if c.dryless {
		return
	}
	if _, err := p.Run(); err != nil {
		t.Fatal(err)
	}
	for name, v := range c.outputs() {
		if !slices.Equal(v, checked[name]) {
			t.Errorf("%s: Run differs from the checked run", name)
		}
	}
	dry, err := c.build(true)
	if err != nil {
		t.Fatal(err)
	}
	if w, d := walkOf(p), walkOf(dry); !slices.Equal(w, d) {
		for k := range min(len(w), len(d)) {
			if w[k] != d[k] {
				t.Fatalf("region %d: run %+v, dry %+v", k, w[k], d[k])
			}
		}
		t.Fatalf("the run walks %d regions, the dry plan %d", len(w), len(d))
	}
}

// want64 flattens the reference outputs, leaving out empty ones.
func want64(pairs ...any) map[string][]float64 {
	m := map[string][]float64{}
	for i := 0; i < len(pairs); i += 2 {
		if v := pairs[i+1].([]float64); len(v) > 0 {
			m[pairs[i].(string)] = v
		}
	}
	return m
}

// sequenceConfigs are the stacks every sequence schedule is checked on:
// every cell (LSTM, GRU, Elman tanh and relu), stacked, bidirectional, projection, embedding and head, and
// mixed stacks.
func sequenceConfigs() []rnn.Config {
	return []rnn.Config{
		{Cell: rnn.LSTM, Input: 5, Hidden: 7, Layers: 1},
		{Cell: rnn.GRU, Input: 6, Hidden: 19, Layers: 3, HeadOut: 4, Activation: rnn.ActSoftmax},
		{Cell: rnn.LSTM, Input: 4, Hidden: 17, Layers: 2, Bidirectional: true, Vocab: 9, HeadOut: 9, Activation: rnn.ActLogSoftmax},
		{Cell: rnn.LSTM, Input: 6, Hidden: 11, Proj: 5, Layers: 3, Bidirectional: true, HeadOut: 3},
		{Cell: rnn.GRU, Input: 3, Hidden: 40, Layers: 2, Bidirectional: true, Vocab: 7},
		{Input: 5, Stack: []rnn.LayerConfig{
			{Cell: rnn.LSTM, Hidden: 8, Proj: 3, Bidirectional: true},
			{Cell: rnn.GRU, Hidden: 21},
			{Cell: rnn.LSTM, Hidden: 6, Bidirectional: true},
		}, HeadOut: 4, Activation: rnn.ActLogSoftmax},
		{Input: 4, Vocab: 12, Stack: []rnn.LayerConfig{
			{Cell: rnn.GRU, Hidden: 18},
			{Cell: rnn.LSTM, Hidden: 33},
		}, HeadOut: 12, Activation: rnn.ActLogSoftmax},
		// Heads that read one row per sequence: a classifier on out[-1]
		// and on h_n[-1] of one direction (cellular batching too); the
		// relu Elman one below reads cat(h_n[-2], h_n[-1]).
		{Cell: rnn.LSTM, Input: 4, Hidden: 10, Proj: 3, Layers: 1, Bidirectional: true, Vocab: 6, HeadOut: 5,
			Activation: rnn.ActLogSoftmax, HeadInput: rnn.HeadLastStep},
		{Cell: rnn.LSTM, Input: 3, Hidden: 8, Layers: 2, HeadOut: 4, Activation: rnn.ActSoftmax, HeadInput: rnn.HeadFinalState},
		// Elman cells (nn.RNN): tanh stacked (cellular batching too),
		// relu bidirectional under a classifier head, and both in a
		// mixed stack with an LSTM.
		{Cell: rnn.RNNTanh, Input: 5, Hidden: 13, Layers: 2, HeadOut: 3},
		{Cell: rnn.RNNReLU, Input: 4, Hidden: 9, Layers: 2, Bidirectional: true, Vocab: 7, HeadOut: 4, HeadInput: rnn.HeadFinalState},
		{Input: 6, Stack: []rnn.LayerConfig{
			{Cell: rnn.RNNReLU, Hidden: 10, Bidirectional: true},
			{Cell: rnn.LSTM, Hidden: 7},
			{Cell: rnn.RNNTanh, Hidden: 16},
		}, HeadOut: 3, Activation: rnn.ActLogSoftmax},
	}
}

// sequenceSchedule makes the program of one schedule for a network.
type sequenceSchedule struct {
	name string
	tol  float64 // against the float64 reference
	prog func(net *rnn.Network) (*Program, error)
}

func sequenceSchedules(pool *Pool) []sequenceSchedule {
	ss := []sequenceSchedule{
		{"A", 1e-5, func(n *rnn.Network) (*Program, error) { return NewProgram(n, A) }},
		{"A+", 1e-5, func(n *rnn.Network) (*Program, error) { return NewProgram(n, APlus) }},
		{"P1", 1e-5, func(n *rnn.Network) (*Program, error) { return NewPartitioned(n, PartitionOptions{Workers: 1}) }},
		// bf16 weights: a relative weight error of 2^-9, compounded
		// through the steps of these small models.
		{"P1-bf16", 3e-2, func(n *rnn.Network) (*Program, error) {
			return NewPartitioned(n, PartitionOptions{Workers: 1, Precision: BF16})
		}},
		// int8 weights and activations: steps of 1/127 of each row's
		// largest value, compounded likewise (measured: at most 4.4e-3
		// on these stacks, bf16 1.2e-3). On two workers it gives the
		// same bits (TestPartitionedInt8Rows).
		{"P1-int8", 2e-2, func(n *rnn.Network) (*Program, error) {
			return NewPartitioned(n, PartitionOptions{Workers: 1, Precision: Int8})
		}},
		{"P3-dry", 1e-5, nil}, // three workers: walked dry only (the plan of a bigger host)
	}
	if pool != nil {
		ss = append(ss, sequenceSchedule{"P2", 1e-5, func(n *rnn.Network) (*Program, error) {
			if n.Dry() {
				return NewPartitioned(n, PartitionOptions{Workers: 2})
			}
			return NewPartitioned(n, PartitionOptions{Pool: pool})
		}})
	}
	return ss
}

// TestConformance runs every schedule's programs through conform: the
// sequence schedules (A, A+, P on one and two workers, P-bf16) on random
// stacks with and without initial states, cellular batching, the
// attention decoder, both tree executors on the PyTorch tree goldens, and
// top-down generation.
func TestConformance(t *testing.T) {
	pool := twoWorkers(t)
	if pool == nil {
		t.Log("GOMAXPROCS < 2: P on two workers is checked dry only")
	}
	r := rand.New(rand.NewPCG(5, 6))
	for i, cfg := range sequenceConfigs() {
		net := randomNet(t, cfg, uint64(i)+40)
		dryNet, err := rnn.NewNetwork(cfg, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []struct{ states, lengths bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			states := v.states
			T, B := 1+r.IntN(6), 1+r.IntN(3)
			if v.lengths {
				T, B = 3+r.IntN(5), 3+r.IntN(2)
			}
			in := randomInput(net, T, B, states, r)
			if v.lengths {
				in.Lengths = randomLengths(T, B, r)
			}
			out, hn, cn, head := refStack(net, in)
			want := want64("output", out, "h_n", hn, "c_n", cn, "head", head)
			for _, s := range sequenceSchedules(pool) {
				t.Run(fmt.Sprintf("%d/states=%v/lengths=%v/%s", i, states, v.lengths, s.name), func(t *testing.T) {
					if s.prog == nil {
						prog, err := NewPartitioned(dryNet, PartitionOptions{Workers: 3})
						if err != nil {
							t.Fatal(err)
						}
						if _, err := prog.Plan(dryInput(in), PlanOptions{Head: true}); err != nil {
							t.Fatal(err)
						}
						return
					}
					var res Result
					var p *Plan
					conform(t, conformance{
						build: func(dry bool) (*Plan, error) {
							n, input := net, in
							if dry {
								n, input = dryNet, dryInput(in)
							}
							prog, err := s.prog(n)
							if err != nil {
								return nil, err
							}
							q, err := prog.Plan(input, PlanOptions{Head: true})
							if !dry {
								p = q
							}
							return q, err
						},
						outputs: func() map[string][]float32 {
							res = p.result()
							return map[string][]float32{"output": res.Output, "h_n": res.HN, "c_n": res.CN, "head": res.Head}
						},
						want: want, tol: s.tol,
					})
				})
			}
		}
		if !net.Unidirectional() {
			continue
		}
		t.Run(fmt.Sprintf("%d/cellular", i), func(t *testing.T) { conformStepper(t, net, r, F32, 1e-5) })
		t.Run(fmt.Sprintf("%d/cellular-int8", i), func(t *testing.T) { conformStepper(t, net, r, Int8, 2e-2) })
	}
	t.Run("decoder", func(t *testing.T) { conformDecoder(t) })
	t.Run("trees", func(t *testing.T) { conformTrees(t, pool) })
	t.Run("generate", func(t *testing.T) { conformGenerate(t, pool) })
}

// dryInput is in as a dry plan takes it: the same shape, token ids and
// initial states (their presence decides steps), no features.
func dryInput(in Input) Input {
	return Input{T: in.T, B: in.B, Tokens: in.Tokens, H0: in.H0, C0: in.C0, Lengths: in.Lengths}
}

// randomLengths draws B lengths in 1..T, longest first, the longest T and
// at least two rows of different lengths.
func randomLengths(T, B int, r *rand.Rand) []int {
	ls := make([]int, B)
	ls[0] = T
	for b := 1; b < B; b++ {
		ls[b] = 1 + r.IntN(ls[b-1])
	}
	if ls[B-1] == T {
		ls[B-1] = 1
	}
	return ls
}

// conformStepper serves three sequences of different lengths together
// through a Stepper (weights at precision prec) whose steps are checked
// against their regions, compares each with the reference run alone
// (within tol), and checks that the steps one sequence runs alone are the
// steps TraceStepper walks. With int8 weights each sequence must also
// give, bit for bit, what P with int8 weights gives for it alone: both
// quantize every row on its own and run the same kernels in the same
// order.
func conformStepper(t *testing.T, net *rnn.Network, r *rand.Rand, prec Precision, tol float64) {
	st, err := NewStepperPrecision(net, 3, prec)
	if err != nil {
		t.Fatal(err)
	}
	st.checked = true
	var seqs []*Sequence
	var ins []Input
	for j := range 3 {
		in := randomInput(net, 2+j, 1, j == 1, r)
		q := &Sequence{Tokens: in.Tokens, Features: in.Features, H0: in.H0, C0: in.C0, Head: HeadAll, Outputs: true}
		if net.HeadInput != rnn.HeadEveryStep {
			q.Head = HeadLast
		}
		if err := st.Add(q); err != nil {
			t.Fatal(err)
		}
		seqs, ins = append(seqs, q), append(ins, in)
	}
	for st.Active() > 0 {
		for _, q := range st.Step() {
			st.Remove(q)
		}
	}
	for j, q := range seqs {
		out, hn, cn, head := refStack(net, ins[j])
		for name, c := range map[string]struct {
			got  []float32
			want []float64
		}{"output": {q.Output, out}, "h_n": {q.HN, hn}, "c_n": {q.CN, cn}, "head": {q.HeadOut, head}} {
			if len(c.want) == 0 && len(c.got) == 0 {
				continue
			}
			if err := closeTo64(c.got, c.want, tol); err != nil {
				t.Errorf("sequence %d %s: %v", j, name, err)
			}
		}
		if prec != Int8 {
			continue
		}
		prog, err := NewPartitioned(net, PartitionOptions{Workers: 1, Precision: Int8})
		if err != nil {
			t.Fatal(err)
		}
		p := runProgram(t, prog, ins[j])
		if !slices.Equal(q.Output, p.Output) || !slices.Equal(q.HeadOut, p.Head) || !slices.Equal(q.HN, p.HN) || !slices.Equal(q.CN, p.CN) {
			t.Errorf("sequence %d: cellular batching with int8 weights differs from P with int8 weights", j)
		}
	}
	// One sequence alone: the steps served equal TraceStepper's walk.
	in := ins[0]
	alone, err := NewStepperPrecision(net, 1, prec)
	if err != nil {
		t.Fatal(err)
	}
	alone.checked, alone.tracing = true, true
	q := &Sequence{Tokens: in.Tokens, Features: in.Features, Head: HeadLast}
	if err := alone.Add(q); err != nil {
		t.Fatal(err)
	}
	for q.Pending() {
		alone.Step()
	}
	traced, err := TraceStepper(net, &Sequence{Tokens: in.Tokens, Features: in.Features, Head: HeadLast}, prec)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := walkOf(traced), walkOf(&Plan{Steps: alone.trace}); !slices.Equal(got, want) {
		t.Errorf("TraceStepper walks %d regions, serving %d, or they differ", len(got), len(want))
	}
}

// conformDecoder checks encoder + attention decoder plans (encoder A and
// A+) against refDecode, a float64 greedy decoder written from the
// equations.
func conformDecoder(t *testing.T) {
	for i, tc := range decoderCases() {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(i), 11))
			encNet := randomNet(t, tc.enc, uint64(i)+1)
			dec := randomDecoder(t, tc.dec, uint64(i)+2)
			_, encIn := encoderPlan(t, encNet, tc.s, tc.T, tc.B, r)
			const start = 1
			var wet *DecoderPlan
			var tokens []int64
			conform(t, conformance{
				build: func(dry bool) (*Plan, error) {
					en, dn, in, din := encNet, dec, encIn, DecodeInput{Steps: tc.S, Start: start}
					if dry {
						var err error
						if en, err = rnn.NewNetwork(tc.enc, true); err != nil {
							return nil, err
						}
						if dn, err = rnn.NewDecoder(tc.dec, true); err != nil {
							return nil, err
						}
						in, din.Tokens = dryInput(encIn), slices.Clone(wet.tokens.I64)
					}
					prog, err := NewProgram(en, tc.s)
					if err != nil {
						return nil, err
					}
					ep, err := prog.Plan(in, PlanOptions{})
					if err != nil {
						return nil, err
					}
					dp, err := NewDecoderProgram(dn)
					if err != nil {
						return nil, err
					}
					d, err := dp.Plan(ep, din)
					if err != nil {
						return nil, err
					}
					if !dry {
						wet = d
					}
					return d.Plan, nil
				},
				outputs: func() map[string][]float32 {
					// The reference decodes over the encoder outputs the run
					// computed, so compare the tokens here and the values below.
					var att, logp, hn, cn []float64
					tokens, att, logp, hn, cn = refDecode(dec, wet.Plan.output.F32, tc.T, tc.B, tc.S, start)
					_ = att
					if !slices.Equal(wet.tokens.I64, tokens) {
						t.Errorf("tokens %v, want %v", wet.tokens.I64, tokens)
					}
					if distinct := len(slices.Compact(slices.Sorted(slices.Values(tokens)))); distinct < 2 {
						t.Errorf("only %d distinct token(s) %v: the case does not exercise feedback", distinct, tokens)
					}
					out := map[string][]float32{"attentional": wet.att.F32, "log-probs": wet.logits.F32, "h_n": wet.hn.F32}
					c := conformance{want: want64("attentional", att, "log-probs", logp, "h_n", hn)}
					if wet.cn != nil {
						out["c_n"], c.want["c_n"] = wet.cn.F32, cn
					}
					for name, w := range c.want {
						if err := closeTo64(out[name], w, 1e-4); err != nil {
							t.Errorf("%s: %v", name, err)
						}
					}
					return out
				},
			})
		})
	}
}

// conformTrees checks both tree executors on the PyTorch tree goldens,
// in parts run in turn and on pool (where the host has two cores).
func conformTrees(t *testing.T, pool *Pool) {
	for _, name := range []string{"tree_rnn", "rntn", "binary_treelstm", "childsum_treelstm"} {
		dir := filepath.Join("testdata", "trees", "golden", name)
		m, trees := GoldenTrees(t, dir)
		dryModel, err := tree.NewModel(m.Net.Config, true)
		if err != nil {
			t.Fatal(err)
		}
		gold := GoldenIO(t, dir)
		want := map[string][]float64{"h": widen(gold["h"]), "probs": widen(gold["probs"])}
		if m.Net.Cell.HasMemory() {
			want["c"] = widen(gold["c"])
		}
		// Both executors on one worker, split into three parts (run in
		// turn), and on a pool of two, the depth-batched one built into
		// the memory of a plan another batch used (TreeProgram.Acquire).
		cases := []struct {
			name  string
			opt   TreeOptions
			reuse bool
		}{
			{"recursive", TreeOptions{Executor: Recursive, AllNodes: true, Workers: 1}, false},
			{"depth_batched", TreeOptions{Executor: DepthBatched, AllNodes: true, Workers: 1}, false},
			{"recursive/parts=3", TreeOptions{Executor: Recursive, AllNodes: true, Workers: 3}, false},
			{"depth_batched/parts=3/reused", TreeOptions{Executor: DepthBatched, AllNodes: true, Workers: 3}, true},
		}
		if pool != nil {
			cases = append(cases, []struct {
				name  string
				opt   TreeOptions
				reuse bool
			}{
				{"recursive/pool=2", TreeOptions{Executor: Recursive, AllNodes: true, Workers: 2, Pool: pool}, false},
				{"depth_batched/pool=2/reused", TreeOptions{Executor: DepthBatched, AllNodes: true, Workers: 2, Pool: pool}, true},
			}...)
		}
		for _, c := range cases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				var tp *TreePlan
				outputs := func() map[string][]float32 {
					h, c, pr := NodeOutputs(tp)
					return map[string][]float32{"h": h, "c": c, "probs": pr}
				}
				conform(t, conformance{
					build: func(dry bool) (*Plan, error) {
						mm := m.Net
						if dry {
							mm = dryModel
						}
						prog, err := NewTreeProgram(mm)
						if err != nil {
							return nil, err
						}
						var q *TreePlan
						if c.reuse {
							q, err = acquireReused(prog, trees, c.opt)
						} else {
							q, err = prog.Plan(trees, c.opt)
						}
						if err != nil {
							return nil, err
						}
						if !dry {
							tp = q
						}
						return q.Plan, nil
					},
					outputs: outputs,
					want:    want, tol: 1e-5,
				})
				sameTreeRun(t, tp, outputs)
			})
		}
	}
}

// conformGenerate regenerates the top-down golden model's first tree, on
// one worker and on pool (where the host has two cores), and reruns its
// recorded steps under the region checker: the structure is decided
// while it runs, so the recorded plan is the trace (no dry plan).
func conformGenerate(t *testing.T, pool *Pool) {
	dir := filepath.Join("testdata", "trees", "golden", "topdown_treelstm")
	m, err := models.LoadTree(filepath.Join(dir, "model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := NewTreeProgram(m.Net)
	if err != nil {
		t.Fatal(err)
	}
	opts := []GenerateOptions{{Workers: 1}}
	if pool != nil {
		opts = append(opts, GenerateOptions{Workers: 2, Pool: pool})
	}
	var first *Generated
	for _, opt := range opts {
		g, err := prog.Generate(3, opt)
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Words) < 2 {
			t.Fatalf("generated %d nodes: the golden model should grow a tree", len(g.Words))
		}
		if first == nil {
			first = g
		} else if !slices.Equal(g.Words, first.Words) || !slices.Equal(g.Parents, first.Parents) {
			t.Fatalf("on the pool: words %v, parents %v; on one worker %v, %v", g.Words, g.Parents, first.Words, first.Parents)
		}
		// The state rows as generated (TestTopDownGolden holds them to
		// PyTorch); rerun, the recorded steps must recompute them exactly.
		h := g.Plan.Buffers[len(prog.Weights())]
		if h.Name != "h" {
			t.Fatalf("buffer %q, want h", h.Name)
		}
		want := make([]float64, len(h.F32))
		for i, v := range h.F32 {
			want[i] = float64(v)
		}
		clear(h.F32)
		conform(t, conformance{
			build:   func(bool) (*Plan, error) { return g.Plan, nil },
			outputs: func() map[string][]float32 { return map[string][]float32{"h": h.F32} },
			want:    map[string][]float64{"h": want}, tol: 0, dryless: true,
		})
	}
}

// ReadLines returns the non-blank lines of a text file, trimmed.
// (Exported for the external test package too.)
func ReadLines(t testing.TB, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// GoldenTrees loads a tree golden case's model (dir/model.yaml) and
// parses its trees (dir/trees.txt, bracketed or JSON, one per line).
func GoldenTrees(t testing.TB, dir string) (*models.TreeModel, []*tree.Tree) {
	t.Helper()
	m, err := models.LoadTree(filepath.Join(dir, "model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var trees []*tree.Tree
	for _, line := range ReadLines(t, filepath.Join(dir, "trees.txt")) {
		var tr *tree.Tree
		if strings.HasPrefix(line, "{") {
			tr, err = tree.ParseJSON([]byte(line), m.ParseOptions())
		} else {
			tr, err = tree.ParseBracketed(line, m.ParseOptions())
		}
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		trees = append(trees, tr)
	}
	return m, trees
}

// GoldenIO reads a golden case's tensors (dir/io.safetensors) as float32.
func GoldenIO(t testing.TB, dir string) map[string][]float32 {
	t.Helper()
	f, err := safetensors.ReadFile(filepath.Join(dir, "io.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for _, name := range f.Names() {
		tn, _ := f.Tensor(name)
		v, err := tn.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		out[name] = v
	}
	return out
}

// widen converts float32 values to float64.
func widen(v []float32) []float64 {
	w := make([]float64, len(v))
	for i, x := range v {
		w[i] = float64(x)
	}
	return w
}

// twoWorkers is a Pool of two workers, closed when the test ends, or nil
// where GOMAXPROCS is 1.
func twoWorkers(t *testing.T) *Pool {
	if runtime.GOMAXPROCS(0) < 2 {
		return nil
	}
	pool, err := NewPool(PoolOptions{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
