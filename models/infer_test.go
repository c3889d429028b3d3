package models

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"rnnserve/internal/fuzzbound"
	"rnnserve/models/pytorch"
	"rnnserve/models/safetensors"
	"rnnserve/rnn"
)

// tensorSet is a Tensors of zero F32 tensors of the given shapes.
type tensorSet map[string][]int

func (s tensorSet) Names() []string {
	var n []string
	for k := range s {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

func (s tensorSet) Tensor(name string) (*safetensors.Tensor, bool) {
	shape, ok := s[name]
	if !ok {
		return nil, false
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	t := safetensors.FromFloat32(name, shape, make([]float32, n))
	return &t, true
}

// lstmTensors are the parameters of nn.LSTM(in, h) under prefix.
func lstmTensors(s tensorSet, prefix string, in, h, gates int, layers int) {
	for k := range layers {
		sfx := "_l" + string(rune('0'+k))
		s[join(prefix, "weight_ih"+sfx)] = []int{gates * h, in}
		s[join(prefix, "weight_hh"+sfx)] = []int{gates * h, h}
		s[join(prefix, "bias_ih"+sfx)] = []int{gates * h}
		s[join(prefix, "bias_hh"+sfx)] = []int{gates * h}
		in = h
	}
}

func TestInfer(t *testing.T) {
	bare := tensorSet{}
	lstmTensors(bare, "", 5, 7, 4, 1)
	s, err := Infer(bare)
	if err != nil {
		t.Fatal(err)
	}
	if s.Cell != "lstm" || s.InputSize != 5 || s.HiddenSize != 7 || s.Prefixes == nil || !reflect.DeepEqual(s.Prefixes.RNN, PrefixList{""}) {
		t.Errorf("bare nn.LSTM state_dict: %+v %+v", s, s.Prefixes)
	}

	// Tied LM: embedding and head of the same shape; the head's bias tells them apart.
	tied := tensorSet{"encoder.weight": {20, 6}, "decoder.weight": {20, 6}, "decoder.bias": {20}}
	lstmTensors(tied, "rnn", 6, 6, 4, 2)
	if s, err = Infer(tied); err != nil {
		t.Fatal(err)
	}
	if *s.Prefixes.Embedding != "encoder" || *s.Prefixes.Head != "decoder" || s.Embedding.VocabSize != 20 || s.NumLayers != 2 {
		t.Errorf("tied LM: %+v %+v", s, s.Prefixes)
	}

	// Two GRU modules of equal widths, numbered: the numbers order them.
	numbered := tensorSet{}
	lstmTensors(numbered, "grus.1", 8, 8, 3, 1)
	lstmTensors(numbered, "grus.0", 8, 8, 3, 1)
	if s, err = Infer(numbered); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Prefixes.RNN, PrefixList{"grus.0", "grus.1"}) || len(s.Layers) != 2 {
		t.Errorf("numbered modules: %+v", s.Prefixes)
	}
}

func TestInferErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func() tensorSet
		msg  []string
	}{
		{"no RNN", func() tensorSet { return tensorSet{"fc.weight": {3, 4}} }, []string{"no RNN module"}},
		{"projection on an nn.RNN", func() tensorSet {
			s := tensorSet{}
			lstmTensors(s, "rnn", 4, 5, 1, 1)
			s["rnn.weight_hh_l0"], s["rnn.weight_hr_l0"] = []int{5, 3}, []int{3, 5}
			return s
		}, []string{"weight_hr on a nn.RNN"}},
		{"five gate blocks", func() tensorSet { s := tensorSet{}; lstmTensors(s, "rnn", 4, 5, 5, 1); return s }, []string{"5 gate blocks"}},
		{"rows not a multiple", func() tensorSet {
			return tensorSet{"rnn.weight_ih_l0": {13, 4}, "rnn.weight_hh_l0": {13, 5}}
		}, []string{"fit no LSTM, GRU or nn.RNN"}},
		{"one bias", func() tensorSet {
			s := tensorSet{}
			lstmTensors(s, "rnn", 4, 5, 4, 1)
			delete(s, "rnn.bias_hh_l0")
			return s
		}, []string{"both or neither"}},
		{"layer gap", func() tensorSet {
			s := tensorSet{}
			lstmTensors(s, "rnn", 4, 5, 4, 3)
			for _, k := range []string{"weight_ih", "weight_hh", "bias_ih", "bias_hh"} {
				delete(s, "rnn."+k+"_l1")
			}
			return s
		}, []string{"numbered 0..L-1"}},
		{"leftover tensor", func() tensorSet {
			s := tensorSet{"norm.weight": {5}, "norm.bias": {5}}
			lstmTensors(s, "rnn", 4, 5, 4, 1)
			return s
		}, []string{`"norm.bias"`, `"norm.weight"`, "fits no part"}},
		{"embedding or head", func() tensorSet {
			s := tensorSet{"proj.weight": {9, 5}}
			lstmTensors(s, "rnn", 5, 5, 4, 1)
			return s
		}, []string{`"proj.weight" [9 5]`, "prefixes.embedding or prefixes.head"}},
		{"two heads", func() tensorSet {
			s := tensorSet{"a.weight": {3, 5}, "a.bias": {3}, "b.weight": {4, 5}, "b.bias": {4}}
			lstmTensors(s, "rnn", 2, 5, 4, 1)
			return s
		}, []string{"several tensors could be the head", "prefixes.head"}},
		{"modules in either order", func() tensorSet {
			s := tensorSet{}
			lstmTensors(s, "encoder", 6, 6, 4, 1)
			lstmTensors(s, "refiner", 6, 6, 3, 1)
			return s
		}, []string{"more than one order", `["encoder", "refiner"] or ["refiner", "encoder"]`, "prefixes.rnn"}},
		{"modules that do not chain", func() tensorSet {
			s := tensorSet{}
			lstmTensors(s, "a", 6, 7, 4, 1)
			lstmTensors(s, "b", 3, 7, 4, 1)
			return s
		}, []string{"do not chain"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Infer(c.set())
			if !errors.Is(err, ErrInfer) {
				t.Fatalf("Infer error %v, want ErrInfer", err)
			}
			for _, m := range c.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not say %q", err, m)
				}
			}
		})
	}
}

// TestPrefixesSettleAmbiguity gives the spec key the error asks for.
func TestPrefixesSettleAmbiguity(t *testing.T) {
	s := tensorSet{}
	lstmTensors(s, "encoder", 6, 6, 4, 1)
	lstmTensors(s, "refiner", 6, 6, 3, 1)
	spec, err := ParseSpec([]byte("input_size: 6\nlayers:\n  - {cell: gru, hidden_size: 6}\n  - {cell: lstm, hidden_size: 6}\nprefixes:\n  rnn: [refiner, encoder]\n"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := buildFrom(spec, s)
	if err != nil {
		t.Fatal(err)
	}
	if m.Net.Layers[0][0].Cell != rnn.GRU || m.Net.Layers[1][0].Cell != rnn.LSTM {
		t.Errorf("stack %v", m.Net.Stack())
	}
}

// TestMixedStackBinding loads the two-module golden checkpoint (LSTM
// bidirectional then GRU, under the user's names) and checks that every
// tensor of the file landed in the right layer and direction of the
// network, and that the model's Params name them as the file does.
func TestMixedStackBinding(t *testing.T) {
	path := filepath.Join("testdata", "golden", "stack_lstm_bidir_gru", "model.pt")
	m, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	net := m.Net
	if net.Uniform() || len(net.Layers) != 2 || len(net.Layers[0]) != 2 || len(net.Layers[1]) != 1 {
		t.Fatalf("stack %+v", net.Stack())
	}
	l0, l1 := net.Layers[0][0], net.Layers[1][0]
	if l0.Cell != rnn.LSTM || l0.Hidden != 24 || l0.Input != 10 || l1.Cell != rnn.GRU || l1.Hidden != 16 || l1.Input != 48 {
		t.Errorf("layers %+v %+v", l0, l1)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	file, err := pytorch.Read(data)
	if err != nil {
		t.Fatal(err)
	}
	where := map[string][]float32{
		"embed.weight":               net.Embedding,
		"lstm1.weight_ih_l0":         net.Layers[0][0].Wih,
		"lstm1.weight_hh_l0":         net.Layers[0][0].Whh,
		"lstm1.bias_ih_l0":           net.Layers[0][0].Bih,
		"lstm1.bias_hh_l0":           net.Layers[0][0].Bhh,
		"lstm1.weight_ih_l0_reverse": net.Layers[0][1].Wih,
		"lstm1.weight_hh_l0_reverse": net.Layers[0][1].Whh,
		"lstm1.bias_ih_l0_reverse":   net.Layers[0][1].Bih,
		"lstm1.bias_hh_l0_reverse":   net.Layers[0][1].Bhh,
		"gru2.weight_ih_l0":          net.Layers[1][0].Wih,
		"gru2.weight_hh_l0":          net.Layers[1][0].Whh,
		"gru2.bias_ih_l0":            net.Layers[1][0].Bih,
		"gru2.bias_hh_l0":            net.Layers[1][0].Bhh,
		"classifier.weight":          net.HeadW,
		"classifier.bias":            net.HeadB,
	}
	if got := file.Names(); len(got) != len(where) {
		t.Errorf("file has %d tensors %q, test maps %d", len(got), got, len(where))
	}
	for name, dst := range where {
		tn, ok := file.Tensor(name)
		if !ok {
			t.Errorf("file lacks %q", name)
			continue
		}
		v, _ := tn.Float32s()
		if !equal(v, dst) {
			t.Errorf("%q is not where it belongs", name)
		}
	}
	var names []string
	for _, p := range m.Params() {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, file.Names()) {
		t.Errorf("Params names %q, file %q", names, file.Names())
	}
}

// TestMixedStackRoundTrip writes a mixed stack's weights under a spec's
// layers and prefixes and loads them back.
func TestMixedStackRoundTrip(t *testing.T) {
	const doc = `
input_size: 3
layers:
  - {cell: gru, hidden_size: 4, num_layers: 2, bidirectional: true}
  - {cell: lstm, hidden_size: 6, proj_size: 2, bias: false}
head: {out_features: 5, bias: false}
prefixes: {rnn: [enc, dec], head: out}
seed: 3
`
	s, err := ParseSpec([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	m, err := Build(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	var names []string
	for _, p := range m.Params() {
		ts = append(ts, safetensors.FromFloat32(p.Name, p.Shape, p.Data))
		names = append(names, p.Name)
	}
	want := []string{"enc.weight_ih_l0", "enc.weight_hh_l0", "enc.bias_ih_l0", "enc.bias_hh_l0",
		"enc.weight_ih_l0_reverse", "enc.weight_hh_l0_reverse", "enc.bias_ih_l0_reverse", "enc.bias_hh_l0_reverse",
		"enc.weight_ih_l1", "enc.weight_hh_l1", "enc.bias_ih_l1", "enc.bias_hh_l1",
		"enc.weight_ih_l1_reverse", "enc.weight_hh_l1_reverse", "enc.bias_ih_l1_reverse", "enc.bias_hh_l1_reverse",
		"dec.weight_ih_l0", "dec.weight_hh_l0", "dec.weight_hr_l0", "out.weight"}
	if !slices.Equal(names, want) {
		t.Errorf("names %q\nwant %q", names, want)
	}
	data := encodeTensors(t, ts)
	s2, _ := ParseSpec([]byte(doc))
	back, err := Build(s2, data)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range back.Params() {
		if !equal(p.Data, m.Params()[i].Data) {
			t.Errorf("%s differs after the round trip", p.Name)
		}
	}
	// The file had no biases for dec: they are zero in the network.
	for _, v := range back.Net.Layers[2][0].Bih {
		if v != 0 {
			t.Fatal("bias of a bias: false module is not zero")
		}
	}
	// Inferring from the same file finds the same shape.
	f, _ := safetensors.Read(data)
	inf, err := Infer(f)
	if err != nil {
		t.Fatal(err)
	}
	c1, _ := inf.Config()
	c2, _ := s.Config()
	if !reflect.DeepEqual(c1, c2) || !reflect.DeepEqual(inf.Prefixes.RNN, PrefixList{"enc", "dec"}) || inf.Layers[1].Bias == nil {
		t.Errorf("inferred %+v %+v", inf, inf.Prefixes)
	}
}

func encodeTensors(t *testing.T, ts []safetensors.Tensor) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, ts, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzWeights feeds the whole weights path (format sniffing, the three
// readers, inference and binding) arbitrary bytes: an error or a model,
// never a panic, within fuzzbound's per-input bounds. Seeds are the user
// goldens' weights files and the hostile weights files of up to 64 KiB.
//
//	go test -run '^$' -fuzz '^FuzzWeights$' -fuzztime 10m -parallel 1 ./models
func FuzzWeights(f *testing.F) {
	for _, p := range []string{"ckpt_emb_lstm_fc_batchfirst/model.pt", "f16_safetensors_lstm/model.safetensors",
		"f64_legacy_ckpt_lstm/model.bin", "onnx_gru_bidir/model.onnx"} {
		data, err := os.ReadFile(filepath.Join("testdata", "golden", p))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	hostile, _ := filepath.Glob("testdata/hostile/*")
	for _, p := range hostile {
		if fi, err := os.Stat(p); err != nil || fi.Size() > 64<<10 || strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".json") || strings.HasSuffix(p, ".md") {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		ts, _, err := readWeights(memFile("model", data), nil)
		if err != nil {
			return
		}
		var s *Spec
		if o, ok := ts.(*onnxModel); ok {
			s = o.spec
		} else if s, err = Infer(ts); err != nil {
			if !errors.Is(err, ErrInfer) {
				t.Fatalf("Infer error %v does not match ErrInfer", err)
			}
			return
		}
		if _, err := buildFrom(s, ts); err != nil && !errors.Is(err, ErrWeights) && !errors.Is(err, ErrSpec) {
			t.Fatalf("binding an inferred spec: %v", err)
		}
	})
}
