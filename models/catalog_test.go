package models

import (
	"errors"
	"math"
	"slices"
	"testing"
)

const mib = 1 << 20

// TestCatalogSizes checks the sizes the DRE paper states (byteNER's 9.4 MB,
// the layer counts and vocabularies) and the ones the catalog derives.
func TestCatalogSizes(t *testing.T) {
	if got, want := AppNames(), []string{"gnmt", "deepspeech1", "lm", "bytener"}; !slices.Equal(got, want) {
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
