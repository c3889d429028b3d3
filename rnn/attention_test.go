package rnn

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAttentionKernels checks the score and context products against
// float64 loops on a strided memory (as a time-major [S][B][W] encoder
// output is for one batch row), and that nothing outside the outputs is
// written.
func TestAttentionKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, s := range []struct{ S, W, ld int }{{1, 1, 1}, {5, 3, 3}, {7, 4, 9}, {3, 16, 32}} {
		mem := randSlice(r, s.S*s.ld)
		q := randSlice(r, s.W)
		scores := make([]float32, s.S+1)
		scores[s.S] = 42
		AttentionScores(s.S, s.W, mem, s.ld, q, scores)
		for i := 0; i < s.S; i++ {
			var want float64
			for j := 0; j < s.W; j++ {
				want += float64(mem[i*s.ld+j]) * float64(q[j])
			}
			if math.Abs(float64(scores[i])-want) > 1e-5 {
				t.Fatalf("%v: scores[%d] = %v, want %v", s, i, scores[i], want)
			}
		}
		if scores[s.S] != 42 {
			t.Fatalf("%v: AttentionScores wrote past its output", s)
		}
		weights := randSlice(r, s.S)
		ctx := make([]float32, s.W+1)
		ctx[s.W] = 42
		AttentionContext(s.S, s.W, mem, s.ld, weights, ctx)
		for j := 0; j < s.W; j++ {
			var want float64
			for i := 0; i < s.S; i++ {
				want += float64(weights[i]) * float64(mem[i*s.ld+j])
			}
			if math.Abs(float64(ctx[j])-want) > 1e-5 {
				t.Fatalf("%v: ctx[%d] = %v, want %v", s, j, ctx[j], want)
			}
		}
		if ctx[s.W] != 42 {
			t.Fatalf("%v: AttentionContext wrote past its output", s)
		}
	}
}

func TestTanhRowsAndArgmax(t *testing.T) {
	c := []float32{0, 1, 99, -2, 0.5, 99}
	TanhRows(2, 2, c, 3)
	want := []float64{0, math.Tanh(1), 99, math.Tanh(-2), math.Tanh(0.5), 99}
	for i := range c {
		if math.Abs(float64(c[i])-want[i]) > 3e-7 {
			t.Errorf("c[%d] = %v, want %v", i, c[i], want[i])
		}
	}
	nan := float32(math.NaN())
	for _, tc := range []struct {
		row  []float32
		want int
	}{{[]float32{1}, 0}, {[]float32{1, 3, 2}, 1}, {[]float32{5, 5, 1}, 0}, {[]float32{-1, -0.5, -3}, 1}, {[]float32{1, nan, 2}, 2}} {
		if got := Argmax(tc.row); got != tc.want {
			t.Errorf("Argmax(%v) = %d, want %d", tc.row, got, tc.want)
		}
	}
}

func TestNewDecoder(t *testing.T) {
	cfg := DecoderConfig{Cell: LSTM, Vocab: 11, Embed: 5, Hidden: 7, Layers: 2, Memory: 6}
	d, err := NewDecoder(cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	if d.Dry() || len(d.Embedding) != 55 || len(d.Attn.Wa) != 42 || len(d.Attn.Wc) != 7*13 {
		t.Fatalf("wrong sizes: embedding %d, Wa %d, Wc %d", len(d.Embedding), len(d.Attn.Wa), len(d.Attn.Wc))
	}
	if l0 := d.Stack.Layers[0][0]; l0.Input != 12 || d.Stack.HeadOut != 11 || d.Stack.Activation != ActLogSoftmax {
		t.Fatalf("stack: layer 0 input %d, head %d %v", l0.Input, d.Stack.HeadOut, d.Stack.Activation)
	}
	// Stack: layer 0 4*7*(12+7) + 2*28, layer 1 4*7*14 + 2*28, head 11*7+11.
	params := 4*7*19 + 56 + 4*7*14 + 56 + 11*7 + 11 + 55 + 42 + 7*13
	if got := d.WeightBytes(); got != int64(4*params) {
		t.Errorf("WeightBytes = %d, want %d", got, 4*params)
	}
	dry, err := NewDecoder(cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	if !dry.Dry() || dry.Embedding != nil || dry.Attn.Wa != nil || dry.WeightBytes() != d.WeightBytes() {
		t.Fatal("dry decoder has weights or a different size")
	}
	for _, bad := range []DecoderConfig{
		{Cell: LSTM, Vocab: 0, Embed: 5, Hidden: 7, Layers: 1, Memory: 6},
		{Cell: LSTM, Vocab: 3, Embed: 0, Hidden: 7, Layers: 1, Memory: 6},
		{Cell: LSTM, Vocab: 3, Embed: 5, Hidden: 7, Layers: 1, Memory: 0},
		{Cell: LSTM, Vocab: 3, Embed: 5, Hidden: 7, Layers: 0, Memory: 6},
		{Cell: LSTM, Vocab: 3, Embed: 5, Hidden: 0, Layers: 1, Memory: 6},
	} {
		if _, err := NewDecoder(bad, true); !errors.Is(err, ErrShape) {
			t.Errorf("NewDecoder(%+v) = %v, want ErrShape", bad, err)
		}
	}
}
