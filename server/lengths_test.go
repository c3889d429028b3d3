package server

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"rnnserve/models"
	"rnnserve/models/safetensors"
)

// TestLengthsMatchPyTorch serves a PyTorch golden case whose rows have
// different lengths (pack_padded_sequence, written by
// scripts/torch_golden.py) with the rows in a different order than
// PyTorch's longest-first, through the step-by-step batcher and as a
// whole plan, batching on and off: logits, hidden and cell must be
// PyTorch's, row for row, padding steps included (the head of a zero
// output, as pad_packed_sequence gives).
func TestLengthsMatchPyTorch(t *testing.T) {
	dir := "../schedule/testdata/golden/lstm_proj5_embed_head_b3_t7_packed"
	m, err := models.Load(filepath.Join(dir, "model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	gold, err := safetensors.ReadFile(filepath.Join(dir, "io.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	ten := func(name string) ([]float32, []int) {
		tn, ok := gold.Tensor(name)
		if !ok {
			t.Fatalf("golden has no %s", name)
		}
		if tn.DType == "I64" {
			v, _ := tn.Int64s()
			f := make([]float32, len(v))
			for i, x := range v {
				f[i] = float32(x)
			}
			return f, tn.Shape
		}
		v, err := tn.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return v, tn.Shape
	}
	tok, shape := ten("tokens")
	T, B := shape[0], shape[1]
	lens, _ := ten("lengths")
	head, hs := ten("head")
	V := hs[2]
	hn, _ := ten("h_n")
	cn, _ := ten("c_n")
	O, H := m.Net.Out(), m.Net.Hidden

	perm := []int{2, 0, 1} // request row r is PyTorch's row perm[r]
	rows := make([][]int64, B)
	lengths := make([]int64, B)
	for r, b := range perm {
		lengths[r] = int64(lens[b])
		for t2 := range T {
			rows[r] = append(rows[r], int64(tok[t2*B+b]))
		}
	}
	lj, _ := json.Marshal(lengths)
	body := fmt.Sprintf(`{"inputs": [%s, {"name": "lengths", "datatype": "INT64", "shape": [%d], "data": %s}],
		"outputs": [{"name": "logits"}, {"name": "hidden"}, {"name": "cell"}]}`, tokensJSON(rows), B, lj)

	repo := t.TempDir()
	if err := os.CopyFS(filepath.Join(repo, "packed"), os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	eachServingMode(t, loadRoot(t, repo), func(t *testing.T, url string) {
		code, resp, _ := post(t, url+"/v2/models/packed/infer", body)
		if code != 200 {
			t.Fatalf("infer: %d %s", code, resp)
		}
		got := parseOutputs(t, resp)
		for r, b := range perm {
			for t2 := range T {
				for v := range V {
					near1(t, fmt.Sprintf("logits[%d][%d][%d]", r, t2, v), got["logits"][(r*T+t2)*V+v], head[(t2*B+b)*V+v])
				}
			}
			for j := range O {
				near1(t, fmt.Sprintf("hidden[%d][%d]", r, j), got["hidden"][r*O+j], hn[b*O+j])
			}
			for j := range H {
				near1(t, fmt.Sprintf("cell[%d][%d]", r, j), got["cell"][r*H+j], cn[b*H+j])
			}
		}
	})
	// Bad lengths are the client's error.
	_, srv := newTestServer(t, nil, true)
	for _, bad := range []string{`[3, 9]`, `[0, 2]`, `[1]`} {
		b := fmt.Sprintf(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 6]},
			{"name": "lengths", "datatype": "INT64", "shape": [%d], "data": %s}]}`, len(bad)/3+1, bad)
		if code, resp, _ := post(t, srv.URL+"/v2/models/lm/infer", b); code != 400 {
			t.Errorf("lengths %s: %d %s, want 400", bad, code, resp)
		}
	}
}

func near1(t *testing.T, what string, got float64, want float32) {
	t.Helper()
	if math.Abs(got-float64(want)) > 1e-5*math.Max(1, math.Abs(float64(want))) {
		t.Fatalf("%s = %v, PyTorch %v", what, got, want)
	}
}

// TestServeWeightsOnlyMixedStack serves a repository folder holding
// nothing but a PyTorch checkpoint of two RNN modules of different cells
// and sizes (a bidirectional LSTM, then a GRU) under a user's own names:
// the spec is inferred, and logits and the final states (flattened per
// row for a mixed stack) are PyTorch's.
func TestServeWeightsOnlyMixedStack(t *testing.T) {
	dir := "../models/testdata/golden/stack_lstm_bidir_gru"
	repo := t.TempDir()
	os.Mkdir(filepath.Join(repo, "stack"), 0o755)
	data, err := os.ReadFile(filepath.Join(dir, "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(repo, "stack", "model.pt"), data, 0o644)
	_, hs := serveEntries(t, loadRoot(t, repo))

	gold, err := safetensors.ReadFile(filepath.Join(dir, "io.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	rows, T, B, ok := goldenTokens(gold)
	if !ok {
		t.Fatal("golden has no tokens")
	}
	code, resp, _ := post(t, hs.URL+"/v2/models/stack/infer", fmt.Sprintf(`{"inputs": [%s],
		"outputs": [{"name": "logits"}, {"name": "hidden"}, {"name": "cell"}]}`, tokensJSON(rows)))
	if code != 200 {
		t.Fatalf("infer: %d %s", code, resp)
	}
	got := parseOutputs(t, resp)
	head, hn, cn := goldenF32(t, gold, "head"), goldenF32(t, gold, "h_n"), goldenF32(t, gold, "c_n")
	V := len(head) / (T * B)
	for b := range B {
		for t2 := range T {
			for v := range V {
				near1(t, fmt.Sprintf("logits[%d][%d][%d]", b, t2, v), got["logits"][(b*T+t2)*V+v], head[(t2*B+b)*V+v])
			}
		}
	}
	// h_n and c_n are, module by module, [dirs][B][out] blocks; a row's
	// hidden output is its row of every block in turn.
	for _, st := range []struct {
		name   string
		gold   []float32
		blocks []int // width of each (layer, direction) block
	}{{"hidden", hn, []int{24, 24, 16}}, {"cell", cn, []int{24, 24}}} {
		per := 0
		for _, w := range st.blocks {
			per += w
		}
		for b := range B {
			off, j := 0, 0
			for _, w := range st.blocks {
				for i := range w {
					near1(t, fmt.Sprintf("%s[%d][%d]", st.name, b, j), got[st.name][b*per+j], st.gold[off+b*w+i])
					j++
				}
				off += B * w
			}
		}
	}
}
