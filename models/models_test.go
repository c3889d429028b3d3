package models

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"rnnserve/internal/fuzzbound"
	"rnnserve/models/safetensors"
	"rnnserve/rnn"
)

const tinySpec = `
cell: lstm
input_size: 3
hidden_size: 4
num_layers: 2
bidirectional: true
proj_size: 2
embedding:
  vocab_size: 7
head:
  out_features: 5
  activation: log_softmax
  input: every_step
`

func TestParseSpec(t *testing.T) {
	s, err := ParseSpec([]byte(tinySpec))
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := s.Config()
	want := rnn.Config{Cell: rnn.LSTM, Input: 3, Hidden: 4, Proj: 2, Layers: 2, Bidirectional: true, Vocab: 7, HeadOut: 5, Activation: rnn.ActLogSoftmax}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("config %+v, want %+v", cfg, want)
	}
	// JSON is YAML too.
	j, err := ParseSpec([]byte(`{"cell": "gru", "input_size": 2, "hidden_size": 3}`))
	if err != nil || j.NumLayers != 1 {
		t.Errorf("JSON spec: %+v, %v", j, err)
	}
}

func TestParseSpecErrors(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"", "empty"},
		{"cell: lstm\ninput_size: 3\nhidden_size: 4\ncolour: red\n", "colour"},
		{"cell: elman\ninput_size: 3\nhidden_size: 4\n", `"elman"`},
		{"cell: rnn\ninput_size: 3\nhidden_size: 4\n", `write "cell: rnn_tanh"`},
		{"input_size: 3\nlayers: [{cell: gru, hidden_size: 4}, {cell: rnn, hidden_size: 3}]\n", `layers[1].cell: rnn`},
		{"cell: rnn_relu\ninput_size: 3\nhidden_size: 4\nproj_size: 2\n", "projection is LSTM only"},
		{"cell: lstm\ninput_size: 0\nhidden_size: 4\n", "input_size = 0"},
		{"cell: lstm\ninput_size: 3\nhidden_size: -4\n", "hidden_size = -4"},
		{"cell: lstm\ninput_size: 3\nhidden_size: 4\nnum_layers: -1\n", "num_layers = -1"},
		{"cell: gru\ninput_size: 3\nhidden_size: 4\nproj_size: 2\n", "proj_size = 2"},
		{"cell: lstm\ninput_size: 3\nhidden_size: 4\nproj_size: 4\n", "proj_size = 4"},
		{"cell: lstm\ninput_size: 3\nhidden_size: 4\nembedding: {vocab_size: 0}\n", "embedding.vocab_size = 0"},
		{"cell: lstm\ninput_size: 3\nhidden_size: 4\nhead: {out_features: 2, activation: relu}\n", `"relu"`},
		{"cell: lstm\ninput_size: 3\nhidden_size: 4\nhead: {out_features: 0}\n", "head.out_features = 0"},
		{"cell: lstm\ninput_size: 3\nhidden_size: 4\nhead: {out_features: 2, input: h_n_reverse}\n", `"h_n_reverse"`},
		{"cell: lstm\ninput_size: 3\nhidden_size: 4\nbidirectional: true\nhead: {out_features: 2}\n", `add "input: h_n"`},
		{"input_size: 3\nlayers: [{cell: gru, hidden_size: 4}, {cell: lstm, hidden_size: 3, bidirectional: true}]\nhead: {out_features: 2}\n",
			"over a bidirectional nn.LSTM"},
		{"cell: lstm\ninput_size: 3000000\nhidden_size: 3000000\n", "2^34"},
		{"cell: [lstm]\n", "line 1"},
		{"a: 1\n---\nb: 2\n", "field a not found"},
	} {
		_, err := ParseSpec([]byte(c.doc))
		if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseSpec(%q) = %v, want ErrSpec mentioning %q", c.doc, err, c.want)
		}
	}
}

// TestHeadInput: head.input reaches the network; where the last layer
// runs in one direction an unset head.input is every_step (the three
// meanings agree there); over a bidirectional one it must be stated, and
// the error says so with the line to add, matching ErrAmbiguous.
func TestHeadInput(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want rnn.HeadInput
	}{
		{"cell: gru\ninput_size: 3\nhidden_size: 4\nhead: {out_features: 2}\n", rnn.HeadEveryStep},
		{"cell: gru\ninput_size: 3\nhidden_size: 4\nhead: {out_features: 2, input: h_n}\n", rnn.HeadFinalState},
		{"cell: gru\ninput_size: 3\nhidden_size: 4\nbidirectional: true\nhead: {out_features: 2, input: last_step}\n", rnn.HeadLastStep},
		{"cell: gru\ninput_size: 3\nhidden_size: 4\nbidirectional: true\nhead: {out_features: 2, input: every_step}\n", rnn.HeadEveryStep},
		{"cell: lstm\ninput_size: 3\nhidden_size: 4\nbidirectional: true\nhead: {out_features: 2, input: h_n}\n", rnn.HeadFinalState},
	} {
		s, err := ParseSpec([]byte(c.doc))
		if err != nil {
			t.Errorf("%q: %v", c.doc, err)
			continue
		}
		m, err := Build(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m.Net.HeadInput != c.want {
			t.Errorf("%q: head input %v, want %v", c.doc, m.Net.HeadInput, c.want)
		}
	}
	_, err := ParseSpec([]byte("cell: lstm\ninput_size: 3\nhidden_size: 4\nbidirectional: true\nhead: {out_features: 2}\n"))
	var amb *AmbiguousError
	if !errors.Is(err, ErrAmbiguous) || !errors.As(err, &amb) || amb.Spec == nil || amb.Source.Inferred ||
		!strings.Contains(err.Error(), "the spec does not say") {
		t.Errorf("unset head.input over a bidirectional LSTM: %v", err)
	}
}

func tinyModel(t *testing.T) *Model {
	t.Helper()
	s, err := ParseSpec([]byte(tinySpec))
	if err != nil {
		t.Fatal(err)
	}
	m, err := Build(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestWeightsRoundTrip(t *testing.T) {
	m := tinyModel(t)
	data, err := EncodeWeights(m.Net)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "w.safetensors"), data, 0o644)
	os.WriteFile(filepath.Join(dir, "m.yaml"), []byte(tinySpec+"weights: w.safetensors\n"), 0o644)
	got, err := Load(filepath.Join(dir, "m.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	a, b := Params(m.Net), Params(got.Net)
	for i := range a {
		if a[i].Name != b[i].Name || !equal(a[i].Data, b[i].Data) {
			t.Errorf("param %s differs after round trip", a[i].Name)
		}
	}
	// Seeded random weights are deterministic and seed-dependent.
	again := tinyModel(t)
	if !equal(Params(again.Net)[1].Data, a[1].Data) {
		t.Error("same seed gave different weights")
	}
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestWeightsErrors edits a valid weights file and checks the error names the problem.
func TestWeightsErrors(t *testing.T) {
	m := tinyModel(t)
	s := m.Spec
	base := func() []safetensors.Tensor {
		var ts []safetensors.Tensor
		for _, p := range Params(m.Net) {
			ts = append(ts, safetensors.FromFloat32(p.Name, p.Shape, append([]float32(nil), p.Data...)))
		}
		return ts
	}
	encode := func(ts []safetensors.Tensor) []byte {
		var buf bytes.Buffer
		if err := safetensors.Write(&buf, ts, nil); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	for _, c := range []struct {
		name string
		edit func([]safetensors.Tensor) []safetensors.Tensor
		want string
	}{
		{"missing", func(ts []safetensors.Tensor) []safetensors.Tensor { return ts[1:] }, `"embedding.weight" is missing`},
		{"extra", func(ts []safetensors.Tensor) []safetensors.Tensor {
			return append(ts, safetensors.FromFloat32("rnn.weight_ih_l9", []int{1}, []float32{0}))
		}, `unexpected tensor "rnn.weight_ih_l9"`},
		{"shape", func(ts []safetensors.Tensor) []safetensors.Tensor {
			ts[0] = safetensors.FromFloat32("embedding.weight", []int{3, 7}, make([]float32, 21))
			return ts
		}, `"embedding.weight" has shape [3 7], want [7 3]`},
		{"dtype", func(ts []safetensors.Tensor) []safetensors.Tensor {
			ts[0] = safetensors.FromInt64("embedding.weight", []int{7, 3}, make([]int64, 21))
			return ts
		}, `dtype I64, want F32`},
		{"nan", func(ts []safetensors.Tensor) []safetensors.Tensor {
			v := make([]float32, 21)
			v[4] = float32(math.NaN())
			ts[0] = safetensors.FromFloat32("embedding.weight", []int{7, 3}, v)
			return ts
		}, `non-finite value NaN at flat index 4`},
		{"bias sum", func(ts []safetensors.Tensor) []safetensors.Tensor {
			// Each half finite; the b_ih + b_hh the steps run on is not.
			for i, tn := range ts {
				if strings.HasPrefix(tn.Name, "rnn.bias_") && strings.HasSuffix(tn.Name, "_l0") {
					v := make([]float32, tn.Shape[0])
					for j := range v {
						v[j] = 3e38
					}
					ts[i] = safetensors.FromFloat32(tn.Name, tn.Shape, v)
				}
			}
			return ts
		}, `layer 0 direction 0: bias_ih and bias_hh sum to non-finite value +Inf at flat index 0`},
	} {
		_, err := Build(s, encode(c.edit(base())))
		if !errors.Is(err, ErrWeights) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrWeights mentioning %q", c.name, err, c.want)
		}
	}
	// A truncated file is a read error, not a panic.
	data := encode(base())
	for _, n := range []int{0, 7, 8, 20, len(data) / 2, len(data) - 1} {
		if _, err := Build(s, data[:n]); err == nil {
			t.Errorf("truncated to %d bytes: no error", n)
		}
	}
}

func TestShapeIsDry(t *testing.T) {
	s, _ := ParseSpec([]byte("cell: lstm\ninput_size: 2048\nhidden_size: 8192\nproj_size: 2048\nnum_layers: 2\n"))
	net, err := Shape(s)
	if err != nil {
		t.Fatal(err)
	}
	if !net.Dry() || net.WeightBytes() < 1<<30 {
		t.Errorf("dry=%v weight bytes=%d", net.Dry(), net.WeightBytes())
	}
}

func FuzzParseSpec(f *testing.F) {
	f.Add([]byte(tinySpec))
	f.Add([]byte(`{"cell": "gru", "input_size": 2, "hidden_size": 3}`))
	f.Add([]byte("cell: lstm\ninput_size: 1\nhidden_size: 2\nproj_size: 1\n"))
	f.Add([]byte("[1, 2"))
	f.Add([]byte("input_size: 3\nlayers:\n  - {cell: gru, hidden_size: 4, bias: false}\n  - {cell: lstm, hidden_size: 5, proj_size: 2}\nprefixes: {rnn: [a, b], head: fc}\nhead: {out_features: 2, bias: false}\n"))
	addFiles(f, "testdata/hostile/*.yaml")
	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		s, err := ParseSpec(data)
		if err != nil {
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("error %v does not match ErrSpec", err)
			}
			return
		}
		if _, err := s.Config(); err != nil {
			t.Fatalf("accepted spec has invalid config: %v", err)
		}
		// Only build dry networks: a valid spec may be huge.
		if _, err := Shape(s); err != nil {
			t.Fatal(err)
		}
	})
}

// TestTreeBiasSumFinite: a top-down tree model's bias is bias_ih +
// bias_hh, summed as it is loaded; two finite halves of 3e38 sum to
// +Inf, a non-finite weight the loader refuses as it refuses one in the
// file.
func TestTreeBiasSumFinite(t *testing.T) {
	s, err := ParseTreeSpec([]byte("kind: tree\ncell: topdown_treelstm\nembedding_size: 2\nhidden_size: 2\nvocab: [a, b]\n"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := BuildTree(s, s.Vocab, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for name, tn := range m.Net.Tensors() {
		ts = append(ts, safetensors.FromFloat32(name, tn.Shape, *tn.Data))
	}
	H := m.Net.Hidden
	big := make([]float32, 4*H)
	for i := range big {
		big[i] = 3e38
	}
	ts = append(ts, safetensors.FromFloat32("cell.lstm.bias_ih", []int{4 * H}, big),
		safetensors.FromFloat32("cell.lstm.bias_hh", []int{4 * H}, big))
	_, err = BuildTree(s, s.Vocab, encodeTensors(t, ts))
	if !errors.Is(err, ErrWeights) || !strings.Contains(err.Error(), "non-finite") {
		t.Fatalf("biases summing to +Inf: %v, want ErrWeights saying non-finite", err)
	}
}
