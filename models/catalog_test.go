package models

import (
	"errors"
	"math"
	"slices"
	"testing"

	"rnnserve/rnn"
)

const mib = 1 << 20

// TestCatalogSizes checks the sizes the DRE paper states (byteNER's 9.4 MB,
// the layer counts and vocabularies) and the ones the catalog derives.
func TestCatalogSizes(t *testing.T) {
	if got, want := AppNames(), []string{"gnmt", "deepspeech1", "lm", "lm-dre", "bytener"}; !slices.Equal(got, want) {
		t.Fatalf("AppNames() = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name          string
		layers, vocab int // vocab: the softmax head's size
		mib           float64
		tol           float64 // relative
	}{
		// GNMT: encoder 80000x1024 embedding + 8 x 4096x(2048) LSTM; decoder the
		// same embedding, layer 0 reads 3072 inputs, head 80000x1024, attention.
		{"gnmt", 8, 80000, 312.5 + 8*32 + 312.5 + 48 + 7*32 + 312.5 + 4 + 8, 0.001},
		// Deep Speech: 5 bidirectional layers of 2048: layer 0 reads 494, the
		// others 4096.
		{"deepspeech1", 5, 28, 2 * (float64(8192*(494+2048))*4 + 4*float64(8192*(4096+2048))*4) / mib, 0.001},
		// LM: two embeddings-sized matrices (80000x2048) and two layers of
		// W_ih + W_hh (2 x 256 MiB) + W_hr (64 MiB).
		{"lm", 2, 80000, 625 + 625 + 2*(512+64), 0.001},
		// The DRE paper's LM: embedding 625 MiB, layer 1 W_ih and W_hh
		// [8192][2048] (64 MiB each), layer 2 W_ih [32768][2048] (256 MiB)
		// and W_hh [32768][8192] (1 GiB), head [80000][8192] (2500 MiB).
		{"lm-dre", 2, 80000, 625 + 2*64 + 256 + 1024 + 2500, 0.001},
		// byteNER: the paper's 9.4 MB.
		{"bytener", 4, 4, 9.4, 0.01},
	} {
		a, err := LookupApp(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		enc, dec, err := a.Shape()
		if err != nil {
			t.Fatal(err)
		}
		if !enc.Dry() || dec != nil && !dec.Dry() {
			t.Errorf("%s: Shape is not dry", tc.name)
		}
		vocab := enc.HeadOut
		if dec != nil {
			vocab = dec.Vocab
		}
		if enc.NumLayers != tc.layers || vocab != tc.vocab {
			t.Errorf("%s: %d layers, vocabulary %d; want %d, %d", tc.name, enc.NumLayers, vocab, tc.layers, tc.vocab)
		}
		n, err := a.WeightBytes()
		if err != nil {
			t.Fatal(err)
		}
		got := float64(n) / mib
		if math.Abs(got-tc.mib)/tc.mib > tc.tol {
			t.Errorf("%s: %.2f MiB of weights, want %.2f MiB ± %.1f%%", tc.name, got, tc.mib, 100*tc.tol)
		}
		t.Logf("%s: %.2f MiB (%d bytes)", tc.name, got, n)
	}
}

func TestCatalogLookup(t *testing.T) {
	a, err := LookupApp("byteNER")
	if err != nil || a.Name != "bytener" {
		t.Fatalf("LookupApp(byteNER) = %v, %v", a.Name, err)
	}
	if _, err := LookupApp("bert"); !errors.Is(err, ErrUnknownApp) {
		t.Errorf("LookupApp(bert) = %v, want ErrUnknownApp", err)
	}
	// Apps returns fresh values: changing one does not change the catalog.
	apps := Apps()
	apps[0].Encoder.Embedding.VocabSize = 1
	apps[0].Decoder.NumLayers = 1
	if g := GNMT(); g.Encoder.Embedding.VocabSize != 80000 || g.Decoder.NumLayers != 8 {
		t.Error("changing a returned App changed the catalog")
	}
	// Only GNMT has a decoder; it attends over the encoder's outputs.
	for _, a := range Apps() {
		enc, dec, err := a.Shape()
		if err != nil {
			t.Fatal(err)
		}
		if (dec != nil) != (a.Name == "gnmt") {
			t.Errorf("%s: decoder %v", a.Name, dec != nil)
		}
		if dec != nil && dec.Attn.Memory != enc.OutputWidth() {
			t.Errorf("%s: attention memory %d, encoder output %d", a.Name, dec.Attn.Memory, enc.OutputWidth())
		}
	}
	bad := GNMT()
	bad.Decoder.Cell = "rnn"
	if _, _, err := bad.Shape(); !errors.Is(err, ErrSpec) {
		t.Errorf("decoder cell rnn: %v, want ErrSpec", err)
	}
	bad = ByteNER()
	bad.Encoder.NumLayers = 0
	if _, err := bad.WeightBytes(); !errors.Is(err, ErrSpec) {
		t.Errorf("zero layers: %v, want ErrSpec", err)
	}
}

// TestPaperLMShape checks lm-dre against every size Section V-B of the
// DRE paper states: one layer of 2048 cells and one of 8192, G1 and G2
// of the first layer "equally sized", the second's input weights
// "2048x8192" per gate and its hidden-hidden ones "8192x8192", and G of
// "96 MB" and "960 MB", which are three gate blocks of these layers.
func TestPaperLMShape(t *testing.T) {
	a, err := LookupApp("lm-dre")
	if err != nil {
		t.Fatal(err)
	}
	net, _, err := a.Shape()
	if err != nil {
		t.Fatal(err)
	}
	if net.Uniform() || len(net.Layers) != 2 || net.Vocab != 80000 || net.HeadOut != 80000 || net.OutputWidth() != 8192 {
		t.Fatalf("lm-dre: uniform %v, %d layers, vocabulary %d, head %d over %d", net.Uniform(), len(net.Layers), net.Vocab, net.HeadOut, net.OutputWidth())
	}
	for k, dirs := range net.Layers {
		if len(dirs) != 1 || dirs[0].Cell != rnn.LSTM || dirs[0].Proj != 0 {
			t.Fatalf("layer %d: %d directions, %v, proj %d; want one LSTM direction without projection", k, len(dirs), dirs[0].Cell, dirs[0].Proj)
		}
	}
	l1, l2 := net.Layers[0][0], net.Layers[1][0]
	if l1.Hidden != 2048 || l1.Input != 2048 || l2.Hidden != 8192 || l2.Input != 2048 {
		t.Errorf("layers: %d cells over %d inputs, %d cells over %d inputs; want 2048 over 2048, 8192 over 2048", l1.Hidden, l1.Input, l2.Hidden, l2.Input)
	}
	// Per gate: W is hidden x input, U hidden x hidden.
	if w, u := l1.Hidden*l1.Input, l1.Hidden*l1.Out(); w != u {
		t.Errorf("layer 1: G1 %d and G2 %d elements per gate, want equal", w, u)
	}
	if w, u := l2.Hidden*l2.Input, l2.Hidden*l2.Out(); w != 8192*2048 || u != 8192*8192 {
		t.Errorf("layer 2: %d and %d elements per gate, want 2048x8192 and 8192x8192", w, u)
	}
	for k, want := range []float64{96, 960} {
		l := net.Layers[k][0]
		g := float64(4*l.Rows()*(l.Input+l.Out())) / mib
		if got := g * 3 / 4; got != want {
			t.Errorf("layer %d: G %.0f MiB, three gate blocks %.0f MiB; the paper says %.0f MB", k+1, g, got, want)
		}
	}
}
