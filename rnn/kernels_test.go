package rnn

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randSlice(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(2*r.Float64() - 1)
	}
	return v
}

func TestSoftmaxAndLogSoftmax(t *testing.T) {
	row := []float32{1, 2, 3, 1000, -1000, 0}
	sm := append([]float32(nil), row...)
	Softmax(2, 3, sm)
	lsm := append([]float32(nil), row...)
	LogSoftmax(2, 3, lsm)
	e := []float64{math.Exp(-2), math.Exp(-1), 1}
	z := e[0] + e[1] + e[2]
	want := []float64{e[0] / z, e[1] / z, e[2] / z, 1, 0, 0}
	for i, w := range want {
		if math.Abs(float64(sm[i])-w) > 1e-7 {
			t.Errorf("softmax[%d] = %v, want %v", i, sm[i], w)
		}
		if w > 0 && math.Abs(float64(lsm[i])-math.Log(w)) > 1e-5 {
			t.Errorf("log_softmax[%d] = %v, want %v", i, lsm[i], math.Log(w))
		}
	}
	if lsm[4] != -2000 {
		t.Errorf("log_softmax of a far-off value = %v, want -2000", lsm[4])
	}
}

func TestCopyRows(t *testing.T) {
	dst := []float32{20, 21, 0, 1, 10, 11}
	out := make([]float32, 8)
	CopyRows(2, 2, out[1:], 4, dst, 3)
	if out[1] != 20 || out[2] != 21 || out[5] != 1 || out[6] != 10 || out[3] != 0 {
		t.Errorf("CopyRows: %v", out)
	}
	ZeroRows(2, 1, out[1:], 4)
	if out[1] != 0 || out[2] != 21 || out[5] != 0 {
		t.Errorf("ZeroRows: %v", out)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Cell: LSTM, Input: 3, Hidden: 4, Layers: 1}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{
		{Cell: 0, Input: 3, Hidden: 4, Layers: 1},
		{Cell: GRU, Input: 0, Hidden: 4, Layers: 1},
		{Cell: GRU, Input: 3, Hidden: 4, Layers: 0},
		{Cell: GRU, Input: 3, Hidden: 4, Layers: 1, Proj: 2},
		{Cell: LSTM, Input: 3, Hidden: 4, Layers: 1, Proj: 4},
		{Cell: LSTM, Input: 3, Hidden: 4, Layers: 1, Activation: ActSoftmax},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if _, err := ParseCell("rnn"); err == nil {
		t.Error("ParseCell(rnn): no error")
	}
}

func TestSample(t *testing.T) {
	logp := []float32{float32(math.Log(0.1)), float32(math.Log(0.6)), float32(math.Log(0.3))}
	r := rand.New(rand.NewPCG(3, 3))
	if got := Sample(logp, 0, 0, r, nil); got != 1 {
		t.Errorf("greedy = %d, want 1", got)
	}
	counts := make([]int, 3)
	const n = 30000
	for i := 0; i < n; i++ {
		counts[Sample(logp, 1, 0, r, nil)]++
	}
	for i, p := range []float64{0.1, 0.6, 0.3} {
		if f := float64(counts[i]) / n; math.Abs(f-p) > 0.015 {
			t.Errorf("index %d drawn %.3f of the time, want %.1f", i, f, p)
		}
	}
	for i := 0; i < 1000; i++ {
		if Sample(logp, 1, 2, r, nil) == 0 {
			t.Fatal("top-2 sampling drew the least likely index")
		}
	}
}

func TestTopKAndProbabilities(t *testing.T) {
	row := []float32{0.1, 0.5, 0.2, 0.5, -1, 0.3}
	ids := make([]int64, 3)
	TopK(row, ids)
	if ids[0] != 1 || ids[1] != 3 || ids[2] != 5 {
		t.Errorf("TopK = %v, want [1 3 5]", ids)
	}
	all := make([]int64, len(row))
	TopK(row, all)
	for i := 1; i < len(all); i++ {
		if row[all[i]] > row[all[i-1]] {
			t.Errorf("TopK of everything not sorted: %v", all)
		}
	}
	logits := []float32{1, 2, 3}
	p := make([]float32, 3)
	Probabilities(ActNone, logits, p)
	lp := append([]float32(nil), logits...)
	LogSoftmax(1, 3, lp)
	q := make([]float32, 3)
	Probabilities(ActLogSoftmax, lp, q)
	var sum float32
	for i := range p {
		sum += p[i]
		if math.Abs(float64(p[i]-q[i])) > 1e-6 {
			t.Errorf("probabilities from logits %v and from log-softmax %v differ", p, q)
		}
	}
	if math.Abs(float64(sum)-1) > 1e-6 {
		t.Errorf("probabilities sum to %v", sum)
	}
}

func TestMixedStack(t *testing.T) {
	cfg := Config{Input: 5, Stack: []LayerConfig{
		{Cell: LSTM, Hidden: 8, Proj: 3, Bidirectional: true},
		{Cell: GRU, Hidden: 4},
		{Cell: LSTM, Hidden: 6, Bidirectional: true},
	}, HeadOut: 2}
	n, err := NewNetwork(cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	if n.Uniform() || n.NumLayers != 3 || n.Cell != LSTM || n.Hidden != 6 || !n.Bidirectional || n.OutputWidth() != 12 {
		t.Fatalf("network %+v", n)
	}
	if got := n.Layers[1][0].Input; got != 6 {
		t.Errorf("layer 1 input %d, want 2*3", got)
	}
	if got := n.Layers[2][1].Input; got != 4 {
		t.Errorf("layer 2 input %d, want 4", got)
	}
	if len(n.HeadW) != 2*12 {
		t.Errorf("head weights %d, want 24", len(n.HeadW))
	}
	const B = 3
	// h: layer 0 has 2 dirs of [B][3], layer 1 one of [B][4], layer 2 two of [B][6].
	for _, c := range []struct{ k, d, want int }{{0, 0, 0}, {0, 1, 9}, {1, 0, 18}, {2, 0, 30}, {2, 1, 48}, {3, 0, 66}} {
		if got := n.StateOffset(c.k, c.d, B); got != c.want {
			t.Errorf("StateOffset(%d, %d) = %d, want %d", c.k, c.d, got, c.want)
		}
	}
	// c: layer 0 two of [B][8], the GRU none, layer 2 two of [B][6].
	for _, c := range []struct{ k, d, want int }{{0, 1, 24}, {1, 0, 48}, {2, 0, 48}, {2, 1, 66}, {3, 0, 84}} {
		if got := n.CellOffset(c.k, c.d, B); got != c.want {
			t.Errorf("CellOffset(%d, %d) = %d, want %d", c.k, c.d, got, c.want)
		}
	}
	back := n.Config()
	if len(back.Stack) != 3 || back.Stack[0] != cfg.Stack[0] || back.Stack[2] != cfg.Stack[2] {
		t.Errorf("Config() = %+v", back)
	}
	// A uniform network keeps the uniform form and PyTorch's state layout.
	u, err := NewNetwork(Config{Cell: GRU, Input: 2, Hidden: 5, Layers: 2, Bidirectional: true}, true)
	if err != nil {
		t.Fatal(err)
	}
	if !u.Uniform() || u.Config().Stack != nil || u.StateOffset(1, 1, B) != 3*B*5 || u.StateSize(B) != 4*B*5 || u.HasCell() {
		t.Errorf("uniform network: offsets %d, size %d, config %+v", u.StateOffset(1, 1, B), u.StateSize(B), u.Config())
	}
	for _, bad := range []Config{
		{Input: 5, Stack: []LayerConfig{{Cell: GRU, Hidden: 4, Proj: 2}}},
		{Input: 5, Stack: []LayerConfig{{Cell: LSTM, Hidden: 0}}},
		{Input: 5, Cell: LSTM, Stack: []LayerConfig{{Cell: LSTM, Hidden: 3}}},
		{Input: 5, Stack: []LayerConfig{{Hidden: 3}}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted", bad)
		}
	}
}

// TestTempered checks the tempered weights against softmax(logp/t) from
// float64 math, and that a row of -Inf entries gets weight 0 there.
func TestTempered(t *testing.T) {
	logp := []float32{-1, 2, float32(math.Inf(-1)), 0.5}
	for _, temp := range []float64{0.25, 1, 3} {
		w := make([]float64, len(logp))
		sum := Tempered(w, logp, temp)
		var z float64
		for _, v := range logp {
			z += math.Exp(float64(v) / temp)
		}
		for i, v := range logp {
			want := math.Exp(float64(v)/temp) / z
			if got := w[i] / sum; math.Abs(got-want) > 1e-12 {
				t.Errorf("t=%v: weight %d = %v, want %v", temp, i, got, want)
			}
		}
		if w[1] != 1 || w[2] != 0 {
			t.Errorf("t=%v: the largest entry's weight is %v (want 1), the -Inf entry's %v (want 0)", temp, w[1], w[2])
		}
	}
}
