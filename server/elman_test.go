package server

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestServeElman serves PyTorch nn.RNN models from their files with the
// spec PyTorch's side knows: a relu tagger without biases (one direction:
// the step-by-step batcher, a solo plan and an unbatched plan), a tanh
// classifier on cat(h_n[-2], h_n[-1]) and a relu nn.RNN feeding an LSTM.
// Logits are PyTorch's; the metadata names the cell; asking for the
// cell state of a model without an LSTM layer is refused.
func TestServeElman(t *testing.T) {
	repo := t.TempDir()
	cases := []struct{ model, golden, file string }{
		{"tagger", "safetensors_rnn_relu_nobias", "model.safetensors"},
		{"cls", "ckpt_rnn_tanh_classifier_hn", "model.pt"},
		{"stack", "stack_rnn_relu_bidir_lstm", "model.pt"},
	}
	for _, c := range cases {
		dir := filepath.Join("../models/testdata/golden", c.golden)
		os.Mkdir(filepath.Join(repo, c.model), 0o755)
		data, err := os.ReadFile(filepath.Join(dir, c.file))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(repo, c.model, c.file), data, 0o644)
		spec, err := os.ReadFile(filepath.Join(dir, "expect.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(repo, c.model, "model.yaml"), append(spec, "weights: "+c.file+"\n"...), 0o644)
	}
	entries := loadRoot(t, repo)
	eachServingMode(t, entries, func(t *testing.T, url string) {
		for _, c := range cases {
			gold, resp, B := inferGolden(t, url, c.model, c.golden)
			head, _ := gold.Tensor("head")
			want := goldenF32(t, gold, "head")
			if len(head.Shape) == 3 { // [T, B, V] from PyTorch; the response is batch-first
				T, V := head.Shape[0], head.Shape[2]
				bf := make([]float32, 0, len(want))
				for b := range B {
					for tt := range T {
						bf = append(bf, want[(tt*B+b)*V:(tt*B+b+1)*V]...)
					}
				}
				want = bf
			}
			near(t, c.model+" logits", parseOutputs(t, resp)["logits"], want)
		}
	})
	_, hs := serveEntries(t, entries)
	code, body := get(t, hs.URL+"/v2/models/tagger")
	var md struct {
		Platform string `json:"platform"`
		Outputs  []struct {
			Name string `json:"name"`
		} `json:"outputs"`
		RNN struct {
			Cell string `json:"cell"`
		} `json:"rnn"`
	}
	if err := json.Unmarshal(body, &md); code != 200 || err != nil {
		t.Fatalf("metadata: %d %v %s", code, err, body)
	}
	var names []string
	for _, o := range md.Outputs {
		names = append(names, o.Name)
	}
	if md.Platform != "rnnserve_rnn_relu" || md.RNN.Cell != "rnn_relu" || slices.Contains(names, "cell") {
		t.Errorf("metadata: platform %q, cell %q, outputs %v", md.Platform, md.RNN.Cell, names)
	}
	feats := `{"name": "features", "datatype": "FP32", "shape": [1, 2, 7], "data": [1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6, 7]}`
	if code, resp, _ := post(t, hs.URL+"/v2/models/tagger/infer", fmt.Sprintf(`{"inputs": [%s], "outputs": [{"name": "cell"}]}`, feats)); code != 400 {
		t.Errorf("cell of an nn.RNN: %d %s, want 400", code, resp)
	}
}
