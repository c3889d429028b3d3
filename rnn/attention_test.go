package rnn

import (
	"errors"
	"math"
	"testing"
)

func TestArgmax(t *testing.T) {
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
