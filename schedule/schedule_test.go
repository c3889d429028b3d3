package schedule

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"rnnserve/internal/invariants"
	"rnnserve/models"
	"rnnserve/rnn"
)

// randomNet builds a network of the given shape with seeded random weights.
func randomNet(t testing.TB, cfg rnn.Config, seed uint64) *rnn.Network {
	t.Helper()
	net, err := rnn.NewNetwork(cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	models.Randomize(net, seed)
	return net
}

// randomInput makes an input for net with seeded values, and h0/c0 when states is set.
func randomInput(net *rnn.Network, T, B int, states bool, r *rand.Rand) Input {
	in := Input{T: T, B: B}
	if net.Vocab > 0 {
		in.Tokens = make([]int64, T*B)
		for i := range in.Tokens {
			in.Tokens[i] = r.Int64N(int64(net.Vocab))
		}
	} else {
		in.Features = randFloats(T*B*net.Input, r)
	}
	if states {
		in.H0 = randFloats(net.StateSize(B), r)
		if net.HasCell() {
			in.C0 = randFloats(net.CellSize(B), r)
		}
	}
	return in
}

func randFloats(n int, r *rand.Rand) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(2*r.Float64() - 1)
	}
	return v
}

func run(t testing.TB, net *rnn.Network, s Schedule, in Input) Result {
	t.Helper()
	prog, err := NewProgram(net, s)
	if err != nil {
		t.Fatal(err)
	}
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

// closeTo reports the first element where got and want differ by more than
// tol relative to max(1, |want|).
func closeTo(got, want []float32, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("length %d, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) || math.Abs(g-w) > tol*math.Max(1, math.Abs(w)) {
			return fmt.Errorf("element %d: got %v, want %v (diff %.3g)", i, g, w, math.Abs(g-w))
		}
	}
	return nil
}

// TestScheduleAAgreesWithAPlus runs both schedules on random shapes of every
// cell type, direction, projection, embedding and head, at batch 1 and > 1.
func TestScheduleAAgreesWithAPlus(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < cases(60); i++ {
		cfg := randomConfig(r, i, 2+r.IntN(40), 1+r.IntN(4), 100)
		T := 1 + r.IntN(30)
		B := []int{1, 1 + r.IntN(6)}[r.IntN(2)]
		states := r.IntN(2) == 0
		name := fmt.Sprintf("%d/%v/in=%d/h=%d/p=%d/L=%d/bi=%v/V=%d/head=%d/T=%d/B=%d/states=%v",
			i, cfg.Cell, cfg.Input, cfg.Hidden, cfg.Proj, cfg.Layers, cfg.Bidirectional, cfg.Vocab, cfg.HeadOut, T, B, states)
		t.Run(name, func(t *testing.T) {
			net := randomNet(t, cfg, uint64(i))
			in := randomInput(net, T, B, states, r)
			a, ap := run(t, net, A, in), run(t, net, APlus, in)
			for _, c := range []struct {
				name      string
				got, want []float32
			}{{"output", a.Output, ap.Output}, {"h_n", a.HN, ap.HN}, {"c_n", a.CN, ap.CN}, {"head", a.Head, ap.Head}} {
				if err := closeTo(c.got, c.want, 1e-5); err != nil {
					t.Errorf("%s: A vs A+: %v", c.name, err)
				}
			}
			if (a.CN != nil) != (cfg.Cell == rnn.LSTM) || (a.Head != nil) != (cfg.HeadOut > 0) {
				t.Errorf("outputs present: c_n %v head %v", a.CN != nil, a.Head != nil)
			}
		})
	}
}

// TestSingleStepByHand checks a one-unit LSTM and GRU against the equations
// written out in float64.
func TestSingleStepByHand(t *testing.T) {
	sig := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	for _, cell := range []rnn.CellKind{rnn.LSTM, rnn.GRU} {
		net := randomNet(t, rnn.Config{Cell: cell, Input: 1, Hidden: 1, Layers: 1}, 7)
		l := net.Layers[0][0]
		x, h0 := 0.7, -0.3
		in := Input{T: 1, B: 1, Features: []float32{float32(x)}, H0: []float32{float32(h0)}}
		var want float64
		w := func(v []float32, i int) float64 { return float64(v[i]) }
		if cell == rnn.LSTM {
			c0 := 0.25
			in.C0 = []float32{float32(c0)}
			y := func(g int) float64 { return w(l.Wih, g)*x + w(l.Whh, g)*h0 + w(l.Bih, g) + w(l.Bhh, g) }
			c := sig(y(1))*c0 + sig(y(0))*math.Tanh(y(2))
			want = sig(y(3)) * math.Tanh(c)
		} else {
			xi := func(g int) float64 { return w(l.Wih, g)*x + w(l.Bih, g) }
			hh := func(g int) float64 { return w(l.Whh, g)*h0 + w(l.Bhh, g) }
			r, z := sig(xi(0)+hh(0)), sig(xi(1)+hh(1))
			n := math.Tanh(xi(2) + r*hh(2))
			want = (1-z)*n + z*h0
		}
		for _, s := range []Schedule{A, APlus} {
			got := run(t, net, s, in).Output[0]
			if math.Abs(float64(got)-want) > 1e-6 {
				t.Errorf("%v %v: h = %v, want %v", cell, s, got, want)
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	feat := randomNet(t, rnn.Config{Cell: rnn.LSTM, Input: 3, Hidden: 4, Layers: 2}, 1)
	tok := randomNet(t, rnn.Config{Cell: rnn.GRU, Input: 3, Hidden: 4, Layers: 1, Vocab: 5}, 1)
	nan := float32(math.NaN())
	cases := []struct {
		name  string
		net   *rnn.Network
		in    Input
		field string
	}{
		{"zero length", feat, Input{T: 0, B: 1, Features: []float32{}}, "T"},
		{"zero batch", feat, Input{T: 1, B: 0, Features: []float32{}}, "B"},
		{"short features", feat, Input{T: 2, B: 1, Features: make([]float32, 5)}, "features"},
		{"missing features", feat, Input{T: 1, B: 1}, "features"},
		{"NaN feature", feat, Input{T: 1, B: 1, Features: []float32{0, nan, 0}}, "features"},
		{"Inf h0", feat, Input{T: 1, B: 1, Features: make([]float32, 3), H0: []float32{0, 0, 0, float32(math.Inf(1)), 0, 0, 0, 0}}, "h0"},
		{"h0 batch mismatch", feat, Input{T: 1, B: 2, Features: make([]float32, 6), H0: make([]float32, 8)}, "h0"},
		{"tokens for features model", feat, Input{T: 1, B: 1, Tokens: []int64{1}, Features: make([]float32, 3)}, "tokens"},
		{"token out of range", tok, Input{T: 2, B: 1, Tokens: []int64{1, 5}}, "tokens"},
		{"negative token", tok, Input{T: 1, B: 1, Tokens: []int64{-1}}, "tokens"},
		{"wrong token count", tok, Input{T: 2, B: 2, Tokens: []int64{1, 2, 3}}, "tokens"},
		{"c0 for GRU", tok, Input{T: 1, B: 1, Tokens: []int64{1}, C0: make([]float32, 4)}, "c0"},
		{"huge", feat, Input{T: MaxSteps, B: MaxBatch, Features: nil}, "T"},
		{"lengths count", tok, Input{T: 2, B: 2, Tokens: []int64{1, 2, 3, 4}, Lengths: []int{2}}, "lengths"},
		{"length zero", tok, Input{T: 2, B: 2, Tokens: []int64{1, 2, 3, 4}, Lengths: []int{2, 0}}, "lengths"},
		{"length past T", tok, Input{T: 2, B: 2, Tokens: []int64{1, 2, 3, 4}, Lengths: []int{3, 1}}, "lengths"},
		{"lengths unsorted", tok, Input{T: 2, B: 2, Tokens: []int64{1, 2, 3, 4}, Lengths: []int{1, 2}}, "lengths"},
	}
	for _, c := range cases {
		for _, s := range []Schedule{A, APlus} {
			prog, err := NewProgram(c.net, s)
			if err != nil {
				t.Fatal(err)
			}
			_, err = prog.Plan(c.in, PlanOptions{})
			var ie *InputError
			if !errors.Is(err, ErrInput) || !errors.As(err, &ie) || ie.Field != c.field {
				t.Errorf("%s (%v): err = %v, want an InputError on %q", c.name, s, err, c.field)
			}
		}
	}
}

func TestPlanRerun(t *testing.T) {
	net := randomNet(t, rnn.Config{Cell: rnn.GRU, Input: 2, Hidden: 3, Layers: 2}, 1)
	prog, _ := NewProgram(net, A)
	in := randomInput(net, 3, 2, true, rand.New(rand.NewPCG(1, 1)))
	p, err := prog.Plan(in, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := p.Run()
	if err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), first.Output...)
	second, _ := p.Run()
	if err := closeTo(second.Output, want, 0); err != nil {
		t.Errorf("second run differs: %v", err)
	}
}

// TestDryPlanWalksLikeRealPlan checks that a dry plan (no weights) lists
// exactly the regions of the plan that runs, and refuses to run.
func TestDryPlanWalksLikeRealPlan(t *testing.T) {
	cfg := rnn.Config{Cell: rnn.LSTM, Input: 5, Hidden: 6, Proj: 3, Layers: 3, Bidirectional: true, Vocab: 9, HeadOut: 4}
	real := randomNet(t, cfg, 3)
	dry, err := rnn.NewNetwork(cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 5))
	in := randomInput(real, 7, 2, false, r)
	for _, s := range []Schedule{A, APlus} {
		var walks [2][]string
		for i, net := range []*rnn.Network{real, dry} {
			prog, _ := NewProgram(net, s)
			p, err := prog.Plan(in, PlanOptions{Head: true})
			if err != nil {
				t.Fatal(err)
			}
			p.Walk(func(r Region, w bool) {
				walks[i] = append(walks[i], fmt.Sprintf("%s %d+%dx%d/%d %v", r.Buf.Name, r.Off, r.Len, r.Count, r.Stride, w))
			})
			if _, err := p.Run(); (err == nil) == (i == 1) {
				t.Errorf("%v: Run on plan %d: %v", s, i, err)
			}
		}
		if fmt.Sprint(walks[0]) != fmt.Sprint(walks[1]) {
			t.Errorf("%v: dry walk differs from the real plan's", s)
		}
	}
}

// TestRegionsInBounds checks every region of both schedules lies inside its buffer.
func TestRegionsInBounds(t *testing.T) {
	cfg := rnn.Config{Cell: rnn.GRU, Input: 7, Hidden: 5, Layers: 3, Bidirectional: true, HeadOut: 3}
	net := randomNet(t, cfg, 1)
	in := randomInput(net, 4, 3, true, rand.New(rand.NewPCG(1, 1)))
	for _, s := range []Schedule{A, APlus} {
		prog, _ := NewProgram(net, s)
		p, _ := prog.Plan(in, PlanOptions{Head: true})
		p.Walk(func(r Region, w bool) {
			end := r.Off + int64(r.Count-1)*r.Stride + r.Len
			if r.Off < 0 || r.Len <= 0 || r.Count < 1 || end > r.Buf.Bytes() {
				t.Errorf("%v: region %+v of %s (%d bytes) out of bounds", s, r, r.Buf.Name, r.Buf.Bytes())
			}
		})
	}
}

// TestWeightBytesPerStep checks the defining difference of the schedules:
// A reads all of G every step, A+ only W_hh (and reads W_ih once).
func TestWeightBytesPerStep(t *testing.T) {
	const H, I, T = 16, 16, 10
	net, _ := rnn.NewNetwork(rnn.Config{Cell: rnn.LSTM, Input: I, Hidden: H, Layers: 1}, true)
	for _, c := range []struct {
		s    Schedule
		want int64
	}{
		{A, T * 4 * (4 * H * (I + H))},
		{APlus, 4*(4*H*I) + T*4*(4*H*H)},
	} {
		prog, _ := NewProgram(net, c.s)
		p, err := prog.Plan(Input{T: T, B: 1}, PlanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got int64
		p.Walk(func(r Region, w bool) {
			if r.Buf.Kind == KindWeight && r.Buf.Elems > 4*H && !w {
				got += r.Bytes()
			}
		})
		if got != c.want {
			t.Errorf("%v: matrix weight bytes read = %d, want %d", c.s, got, c.want)
		}
	}
}

// cases scales a randomized test's case count down under the invariants
// build tag, where every step runs the region checker (the conformance
// suite covers every kernel there).
func cases(n int) int {
	if invariants.Enabled {
		return max(n/6, 1)
	}
	return n
}

// randomConfig draws a uniform stack of the given hidden size and layers
// (LSTM on even i, GRU on odd): random input size and direction, a
// projection a third of the time (LSTM), an embedding of up to maxVocab a
// third of the time, a head with a random activation half the time.
func randomConfig(r *rand.Rand, i, hidden, layers, maxVocab int) rnn.Config {
	cfg := rnn.Config{
		Cell:          []rnn.CellKind{rnn.LSTM, rnn.GRU}[i%2],
		Input:         1 + r.IntN(40),
		Hidden:        hidden,
		Layers:        layers,
		Bidirectional: r.IntN(2) == 1,
	}
	if cfg.Cell == rnn.LSTM && cfg.Hidden > 1 && r.IntN(3) == 0 {
		cfg.Proj = 1 + r.IntN(cfg.Hidden-1)
	}
	if r.IntN(3) == 0 {
		cfg.Vocab = 1 + r.IntN(maxVocab)
	}
	if r.IntN(2) == 0 {
		cfg.HeadOut = 1 + r.IntN(30)
		cfg.Activation = rnn.Activation(r.IntN(3))
	}
	return cfg
}
