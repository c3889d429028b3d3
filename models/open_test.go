package models

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"rnnserve/models/internal/onnxbuild"
	"rnnserve/models/onnx"
	pb "rnnserve/models/onnx/onnxpb"
	"rnnserve/models/pytorch"
	"rnnserve/models/safetensors"
	"rnnserve/rnn"
)

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestOpenFolder serves a folder holding only a user's checkpoint, then
// saves the inferred spec beside it as model.yaml (as a user would after
// `serve` printed it), edits the activation, and opens the folder again.
func TestOpenFolder(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, "testdata/golden/ckpt_emb_lstm_fc_batchfirst/model.pt", filepath.Join(dir, "model.pt"))
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Source.Inferred || m.Source.Format.Name() != "pytorch" || m.Source.Weights != filepath.Join(dir, "model.pt") ||
		len(m.Source.DTypes) != 1 || m.Source.DTypes[0] != "F32" {
		t.Errorf("source %+v", m.Source)
	}
	text, err := FormatSpec(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Inferred by rnnserve from model.pt (pytorch)", "head.activation", "weights: model.pt", "rnn: lstm"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("FormatSpec output lacks %q:\n%s", want, text)
		}
	}
	edited := strings.Replace(string(text), "out_features: 50", "out_features: 50\n  activation: log_softmax", 1)
	if err := os.WriteFile(filepath.Join(dir, SpecFile), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Source.Inferred || again.Spec.Head.Activation != "log_softmax" || again.Net.Activation.String() != "log_softmax" {
		t.Errorf("spec from model.yaml: %+v, source %+v", again.Spec.Head, again.Source)
	}
	for i, p := range again.Params() {
		if !equal(p.Data, m.Params()[i].Data) {
			t.Errorf("%s differs between the inferred and the saved spec", p.Name)
		}
	}

	// A second weights file makes the folder ambiguous.
	empty := t.TempDir()
	if _, err := Open(empty); !errors.Is(err, ErrNoModel) {
		t.Errorf("empty folder: %v", err)
	}
	copyFile(t, "testdata/golden/f16_safetensors_lstm/model.safetensors", filepath.Join(empty, "a.safetensors"))
	copyFile(t, "testdata/golden/f16_safetensors_lstm/model.safetensors", filepath.Join(empty, "b.safetensors"))
	if _, err := Open(empty); !errors.Is(err, ErrNoModel) || !strings.Contains(err.Error(), "a.safetensors") {
		t.Errorf("two weights files: %v", err)
	}
}

// TestOpenWrongFiles hands the loader files that are not what their
// names say, or no model at all.
func TestOpenWrongFiles(t *testing.T) {
	dir := t.TempDir()
	// A checkpoint named .safetensors loads by its content...
	copyFile(t, "testdata/golden/bf16_ckpt_gru/model.pth", filepath.Join(dir, "misnamed.safetensors"))
	m, err := Open(filepath.Join(dir, "misnamed.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Source.Format.Name() != "pytorch" || m.Source.DTypes[0] != "BF16" {
		t.Errorf("source %+v", m.Source)
	}
	// ...and the readers say what a file is when handed the wrong one.
	ckpt, _ := os.ReadFile("testdata/golden/bf16_ckpt_gru/model.pth")
	if _, err := safetensors.Read(ckpt); !errors.Is(err, safetensors.ErrFormat) || !strings.Contains(err.Error(), "PyTorch zip checkpoint") {
		t.Errorf("checkpoint handed to the safetensors reader: %v", err)
	}
	st, _ := os.ReadFile("testdata/golden/f16_safetensors_lstm/model.safetensors")
	if _, err := pytorch.Read(st); !errors.Is(err, pytorch.ErrFormat) || !strings.Contains(err.Error(), "safetensors file") {
		t.Errorf("safetensors handed to the checkpoint reader: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "notes.pt"), []byte("just text"), 0o644)
	if _, err := Open(filepath.Join(dir, "notes.pt")); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "unknown format") {
		t.Errorf("text file: %v", err)
	}
	// Shapes that fit no architecture.
	bad, _ := safetensors.Read(st)
	var ts []safetensors.Tensor
	for _, tn := range bad.Tensors() {
		if strings.Contains(tn.Name, "weight_hh_l0") {
			tn.Shape = []int{tn.Shape[0] / 2, tn.Shape[1] * 2}
		}
		ts = append(ts, tn)
	}
	os.WriteFile(filepath.Join(dir, "bad.safetensors"), encodeTensors(t, ts), 0o644)
	if _, err := Open(filepath.Join(dir, "bad.safetensors")); !errors.Is(err, ErrInfer) || !strings.Contains(err.Error(), "fit no LSTM, GRU or nn.RNN") {
		t.Errorf("misshapen weights: %v", err)
	}
}

// TestLoadSpecWithCheckpoint names a checkpoint under the user's own names
// in a hand-written spec that sets no prefixes: they are found in the file.
func TestLoadSpecWithCheckpoint(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, "testdata/golden/nobias_ckpt_lstm_proj/model.pt", filepath.Join(dir, "w.pt"))
	spec := "cell: lstm\ninput_size: 8\nhidden_size: 16\nnum_layers: 2\nproj_size: 5\nbias: false\nhead: {out_features: 6, bias: false}\nweights: w.pt\n"
	os.WriteFile(filepath.Join(dir, "model.yaml"), []byte(spec), 0o644)
	m, err := Load(filepath.Join(dir, "model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Spec.Prefixes == nil || *m.Spec.Prefixes.Head != "proj" || m.Source.Format.Name() != "pytorch" {
		t.Errorf("prefixes %+v source %+v", m.Spec.Prefixes, m.Source)
	}
	// With biases claimed, the error names what is missing.
	os.WriteFile(filepath.Join(dir, "model.yaml"), []byte(strings.Replace(spec, "bias: false\nhead", "head", 1)), 0o644)
	if _, err := Load(filepath.Join(dir, "model.yaml")); !errors.Is(err, ErrWeights) || !strings.Contains(err.Error(), `"rnn.bias_ih_l0" is missing`) {
		t.Errorf("biases claimed: %v", err)
	}
}

// TestFormatONNXSpec: the spec printed for an ONNX file carries the
// graph's names, and no note asking for an activation the graph would
// have shown (a Gemm head on h_n, without one).
func TestFormatONNXSpec(t *testing.T) {
	m, err := Open("testdata/golden/onnx_gru_classifier_hn/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	text, err := FormatSpec(m)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(text); strings.Contains(s, "head.activation") || !strings.Contains(s, "- name: last_hidden") || !strings.Contains(s, "input: h_n") {
		t.Errorf("FormatSpec of an ONNX classifier:\n%s", s)
	}
}

// TestOpenONNXExternalData moves the GRU export's weights into a data
// file beside it: read from inside the model's folder, refused when the
// model points outside it (a file that exists there is not read).
func TestOpenONNXExternalData(t *testing.T) {
	data, err := os.ReadFile("testdata/golden/onnx_gru_bidir/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	inline, err := Open("testdata/golden/onnx_gru_bidir/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	split := func(location string) ([]byte, []byte) {
		var mp pb.ModelProto
		if err := proto.Unmarshal(data, &mp); err != nil {
			t.Fatal(err)
		}
		var blob []byte
		for _, init := range mp.GetGraph().GetInitializer() {
			blob = append(blob, onnxbuild.External(init, location, len(blob))...)
		}
		model, err := proto.Marshal(&mp)
		if err != nil {
			t.Fatal(err)
		}
		return model, blob
	}
	parent := t.TempDir()
	dir := filepath.Join(parent, "gru")
	os.MkdirAll(filepath.Join(dir, "data"), 0o755)
	model, blob := split("data/weights.bin")
	os.WriteFile(filepath.Join(dir, "model.onnx"), model, 0o644)
	os.WriteFile(filepath.Join(dir, "data", "weights.bin"), blob, 0o644)
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Source.Format.Name() != "onnx" || m.Spec.Cell != "gru" || !m.Spec.Bidirectional || m.Spec.NumLayers != 2 {
		t.Errorf("ONNX spec %+v, source %+v", m.Spec, m.Source)
	}
	for i, p := range m.Params() {
		if !equal(p.Data, inline.Params()[i].Data) {
			t.Errorf("%s differs from the inline export", p.Name)
		}
	}

	outside := filepath.Join(parent, "evil")
	os.MkdirAll(outside, 0o755)
	model, blob = split("../gru/data/weights.bin")
	os.WriteFile(filepath.Join(outside, "model.onnx"), model, 0o644)
	if _, err := Open(outside); !errors.Is(err, onnx.ErrExternalData) || !strings.Contains(err.Error(), "outside the model's folder") {
		t.Errorf("external data outside the folder: %v", err)
	}
	// A symbolic link in the folder is the operator's and is followed (a
	// Hugging Face snapshot links every file into ../../blobs); the
	// location the file names must still lie below the folder.
	os.Symlink(filepath.Join(dir, "data"), filepath.Join(outside, "data"))
	model, _ = split("data/weights.bin")
	os.WriteFile(filepath.Join(outside, "model.onnx"), model, 0o644)
	if _, err := Open(outside); err != nil {
		t.Errorf("external data through the operator's symlink: %v", err)
	}
}

func TestParseSpecStackErrors(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"input_size: 3\ncell: lstm\nlayers: [{cell: gru, hidden_size: 4}]\n", "layers lists the modules"},
		{"input_size: 3\nlayers: [{cell: rnn, hidden_size: 4}]\n", "layers[0].cell"},
		{"input_size: 3\nlayers: [{cell: gru, hidden_size: 4}, {cell: gru, hidden_size: 0}]\n", "layers[1].hidden_size = 0"},
		{"input_size: 3\nlayers: [{cell: gru, hidden_size: 4, proj_size: 2}]\n", "layers[0].proj_size = 2"},
		{"input_size: 3\nlayers: [{cell: lstm, hidden_size: 4, num_layers: -1}]\n", "layers[0].num_layers = -1"},
		{"input_size: 3\nlayers: [{cell: lstm, hidden_size: 4}]\nprefixes: {rnn: [a, b]}\n", "prefixes.rnn lists 2 prefixes for 1"},
		{"input_size: 3\ncell: lstm\nhidden_size: 4\nprefixes: {rnn: {a: 1}}\n", "line 4"},
		{"input_size: 3\ncell: lstm\nhidden_size: 4\nprefixes: {decoder: x}\n", "decoder"},
	} {
		_, err := ParseSpec([]byte(c.doc))
		if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseSpec(%q) = %v, want ErrSpec mentioning %q", c.doc, err, c.want)
		}
	}
}

// TestOpenHeadInput: a bidirectional classifier's checkpoint alone is an
// *AmbiguousError carrying the inferred spec, which FormatSpec prints
// with what it lacks; saved as it is, the spec is refused the same way;
// with the line added, or with OpenOptions.HeadInput, it loads. The
// option is refused for a spec, for a model without a head, and for a
// value that is no head input.
func TestOpenHeadInput(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, "testdata/golden/ckpt_bilstm_classifier_hn/model.pt", filepath.Join(dir, "model.pt"))
	_, err := Open(dir)
	var amb *AmbiguousError
	if !errors.As(err, &amb) || !amb.Source.Inferred || amb.Source.Weights != "model.pt" || amb.Spec.Head == nil {
		t.Fatalf("Open: %v, want an *AmbiguousError with the inferred spec", err)
	}
	text, err := FormatSpec(&Model{Spec: amb.Spec, Source: amb.Source})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "# Not servable until stated: head.input") {
		t.Errorf("FormatSpec does not say what is missing:\n%s", text)
	}
	os.WriteFile(filepath.Join(dir, SpecFile), text, 0o644)
	if _, err := Open(dir); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("the printed spec saved as it is: %v, want ErrAmbiguous", err)
	}
	edited := strings.Replace(string(text), "out_features: 4", "out_features: 4\n  input: h_n", 1)
	os.WriteFile(filepath.Join(dir, SpecFile), []byte(edited), 0o644)
	m, err := Open(dir)
	if err != nil || m.Net.HeadInput != rnn.HeadFinalState {
		t.Fatalf("the spec with the line added: %v", err)
	}
	if _, err := OpenWith(dir, OpenOptions{HeadInput: "h_n"}); !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), "is a spec") {
		t.Errorf("option with a spec: %v", err)
	}
	os.Remove(filepath.Join(dir, SpecFile))
	for hi, want := range map[string]rnn.HeadInput{"h_n": rnn.HeadFinalState, "last_step": rnn.HeadLastStep, "every_step": rnn.HeadEveryStep} {
		m, err := OpenWith(filepath.Join(dir, "model.pt"), OpenOptions{HeadInput: hi})
		if err != nil || m.Net.HeadInput != want || m.Spec.Head.Input != hi {
			t.Errorf("OpenWith %s: %v", hi, err)
		}
	}
	if _, err := OpenWith(filepath.Join(dir, "model.pt"), OpenOptions{HeadInput: "h_0"}); !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), `"h_0"`) {
		t.Errorf("OpenWith h_0: %v", err)
	}
	if _, err := OpenWith("testdata/golden/onnx_gru_bidir/model.onnx", OpenOptions{HeadInput: "h_n"}); !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), "has no head") {
		t.Errorf("OpenWith a model without a head: %v", err)
	}
}

// TestOpenNonlinearity: an nn.RNN's checkpoint alone is refused with the
// line to write; OpenOptions.Nonlinearity states it for every nn.RNN
// module of the file, and is refused for a value that is neither tanh
// nor relu and for a file without an nn.RNN.
func TestOpenNonlinearity(t *testing.T) {
	file := "testdata/golden/stack_rnn_relu_bidir_lstm/model.pt"
	_, err := Open(file)
	var amb *AmbiguousError
	if !errors.As(err, &amb) || !strings.Contains(err.Error(), `layers[0].cell: rnn`) || amb.Spec.Layers[0].Cell != "rnn" {
		t.Fatalf("Open: %v, want an *AmbiguousError naming layers[0].cell", err)
	}
	for nl, want := range map[string]rnn.CellKind{"relu": rnn.RNNReLU, "tanh": rnn.RNNTanh} {
		m, err := OpenWith(file, OpenOptions{Nonlinearity: nl})
		if err != nil || m.Net.Layers[0][0].Cell != want || m.Net.Layers[1][0].Cell != rnn.LSTM || m.Spec.Layers[0].Cell != want.String() {
			t.Errorf("OpenWith %s: %v", nl, err)
		}
	}
	if _, err := OpenWith(file, OpenOptions{Nonlinearity: "sigmoid"}); !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), `"sigmoid"`) {
		t.Errorf("OpenWith sigmoid: %v", err)
	}
	if _, err := OpenWith("testdata/golden/ckpt_emb_lstm_fc_batchfirst/model.pt", OpenOptions{Nonlinearity: "tanh"}); !errors.Is(err, ErrSpec) ||
		!strings.Contains(err.Error(), "no nn.RNN module") {
		t.Errorf("OpenWith an LSTM: %v", err)
	}
}
