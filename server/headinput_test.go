package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rnnserve/models"
	"rnnserve/models/safetensors"
)

// TestServeClassifierHeads serves two PyTorch classifiers whose head
// reads one row per sequence (scripts/torch_golden.py): fc(cat(h_n[-2],
// h_n[-1])) over a bidirectional LSTM and fc(h_n[-1]) over a GRU, each
// from its checkpoint with a spec that says head.input: h_n. Logits are
// [B, V] and PyTorch's, through the step-by-step batcher (the GRU), a
// solo plan and an unbatched plan; the metadata says so; rows of
// different lengths give each row's own result; and the bidirectional
// checkpoint alone in a folder is refused with the line to add.
func TestServeClassifierHeads(t *testing.T) {
	repo := t.TempDir()
	for name, src := range map[string]string{"bicls": "ckpt_bilstm_classifier_hn", "grucls": "ckpt_gru_classifier_hn", "alone": "ckpt_bilstm_classifier_hn"} {
		dir := filepath.Join("../models/testdata/golden", src)
		os.Mkdir(filepath.Join(repo, name), 0o755)
		data, err := os.ReadFile(filepath.Join(dir, "model.pt"))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(repo, name, "model.pt"), data, 0o644)
		if name == "alone" {
			continue
		}
		spec, err := os.ReadFile(filepath.Join(dir, "expect.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(repo, name, "model.yaml"), append(spec, "weights: model.pt\n"...), 0o644)
	}
	root := rootFS(t, repo)
	if _, err := LoadModel(root, "alone"); !errors.Is(err, models.ErrAmbiguous) || !strings.Contains(err.Error(), `add "input: h_n"`) {
		t.Errorf("a bidirectional classifier's checkpoint alone: %v, want the line to add", err)
	}
	var entries []Entry
	for _, name := range []string{"bicls", "grucls"} {
		e, err := LoadModel(root, name)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}

	eachServingMode(t, entries, func(t *testing.T, url string) {
		for _, c := range []struct{ model, golden string }{{"bicls", "ckpt_bilstm_classifier_hn"}, {"grucls", "ckpt_gru_classifier_hn"}} {
			gold, resp, B := inferGolden(t, url, c.model, c.golden)
			shapes := outputShapes(t, resp)
			head := goldenF32(t, gold, "head")
			V := len(head) / B
			if !slices.Equal(shapes["logits"], []int64{int64(B), int64(V)}) {
				t.Errorf("%s: logits shape %v, want [%d %d]", c.model, shapes["logits"], B, V)
			}
			near(t, c.model+" logits", parseOutputs(t, resp)["logits"], head)
		}
	})

	_, hs := serveEntries(t, entries)
	code, body := get(t, hs.URL+"/v2/models/bicls")
	if code != 200 {
		t.Fatalf("metadata: %d %s", code, body)
	}
	var md struct {
		Outputs []struct {
			Name  string  `json:"name"`
			Shape []int64 `json:"shape"`
		} `json:"outputs"`
		RNN struct {
			HeadInput string `json:"head_input"`
		} `json:"rnn"`
	}
	if err := json.Unmarshal(body, &md); err != nil {
		t.Fatal(err)
	}
	if md.RNN.HeadInput != "h_n" || md.Outputs[0].Name != "logits" || !slices.Equal(md.Outputs[0].Shape, []int64{-1, 4}) {
		t.Errorf("metadata: head input %q, first output %+v", md.RNN.HeadInput, md.Outputs[0])
	}

	// Two rows of different lengths: each row's logits are its own, as
	// if it came alone with its real steps.
	rows := [][]int64{{1, 2, 3, 4, 5}, {6, 7, 8, 0, 0}}
	code, both, _ := post(t, hs.URL+"/v2/models/bicls/infer", fmt.Sprintf(`{"inputs": [%s,
		{"name": "lengths", "datatype": "INT64", "shape": [2], "data": [5, 3]}]}`, tokensJSON(rows)))
	if code != 200 {
		t.Fatalf("infer with lengths: %d %s", code, both)
	}
	got := parseOutputs(t, both)["logits"]
	for b, row := range [][]int64{rows[0], rows[1][:3]} {
		code, alone, _ := post(t, hs.URL+"/v2/models/bicls/infer", fmt.Sprintf(`{"inputs": [%s]}`, tokensJSON([][]int64{row})))
		if code != 200 {
			t.Fatalf("infer row %d alone: %d %s", b, code, alone)
		}
		want := parseOutputs(t, alone)["logits"]
		w32 := make([]float32, len(want))
		for i, v := range want {
			w32[i] = float32(v)
		}
		near(t, fmt.Sprintf("row %d of two", b), got[b*4:(b+1)*4], w32)
	}
}

// rootFS is dir opened as an os.Root, as serve opens a repository,
// closed when the test ends.
func rootFS(t *testing.T, dir string) fs.FS {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root.FS()
}

// loadRoot loads every model of the repository in dir through rootFS.
func loadRoot(t *testing.T, dir string) []Entry {
	t.Helper()
	entries, err := LoadRepository(rootFS(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

// eachServingMode serves entries (sequence models) in each way a request
// can run, a subtest each: batched step by step (the batcher's Stepper),
// batched but as a solo whole-request plan, and unbatched (a plan); and
// calls check with the server's address.
func eachServingMode(t *testing.T, entries []Entry, check func(t *testing.T, url string)) {
	for _, mode := range []struct {
		name     string
		batching bool
		step     bool
	}{{"batched, step by step", true, true}, {"batched, solo plan", true, false}, {"unbatched plan", false, false}} {
		t.Run(mode.name, func(t *testing.T) {
			o := testOptions()
			o.CacheBytes, o.TrafficSteps = 1<<20, 4
			o.Batching.Enabled = &mode.batching
			s := newServer(t, entries, o, testDeps(t, o))
			for _, e := range entries {
				seqOf(t, s, e.Name).alwaysStep = mode.step
			}
			check(t, serveHTTP(t, s, true).URL)
		})
	}
}

// serveEntries starts a server on entries with the test options.
func serveEntries(t *testing.T, entries []Entry) (*Server, *httptest.Server) {
	t.Helper()
	o := testOptions()
	o.CacheBytes, o.TrafficSteps = 1<<20, 4
	s := newServer(t, entries, o, testDeps(t, o))
	return s, serveHTTP(t, s, true)
}

// inferGolden asks model of the server at url for the logits of golden
// case golden's input (goldenRequest) and returns the case, the response
// and its batch size.
func inferGolden(t *testing.T, url, model, golden string) (gold *safetensors.File, resp []byte, B int) {
	t.Helper()
	gold, err := safetensors.ReadFile(filepath.Join("../models/testdata/golden", golden, "io.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	body, B := goldenRequest(t, gold)
	code, resp, _ := post(t, url+"/v2/models/"+model+"/infer", body)
	if code != 200 {
		t.Fatalf("%s: infer: %d %s", model, code, resp)
	}
	return gold, resp, B
}

// goldenTokens are a golden case's time-major tokens as batch-first
// rows, and its steps and rows; ok is false for a case of features.
func goldenTokens(gold *safetensors.File) (rows [][]int64, T, B int, ok bool) {
	tn, ok := gold.Tensor("tokens")
	if !ok {
		return nil, 0, 0, false
	}
	ids, _ := tn.Int64s()
	T, B = tn.Shape[0], tn.Shape[1]
	rows = make([][]int64, B)
	for b := range B {
		for t2 := range T {
			rows[b] = append(rows[b], ids[t2*B+b])
		}
	}
	return rows, T, B, true
}

// goldenRequest is the infer request of a golden case's time-major
// input, batch first, asking for logits; and its batch size.
func goldenRequest(t *testing.T, gold *safetensors.File) (string, int) {
	t.Helper()
	if rows, _, B, ok := goldenTokens(gold); ok {
		return fmt.Sprintf(`{"inputs": [%s], "outputs": [{"name": "logits"}]}`, tokensJSON(rows)), B
	}
	tn, _ := gold.Tensor("features")
	x, err := tn.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	T, B, F := tn.Shape[0], tn.Shape[1], tn.Shape[2]
	data := make([]float32, 0, len(x))
	for b := range B {
		for t2 := range T {
			data = append(data, x[(t2*B+b)*F:(t2*B+b+1)*F]...)
		}
	}
	d, _ := json.Marshal(data)
	return fmt.Sprintf(`{"inputs": [{"name": "features", "datatype": "FP32", "shape": [%d, %d, %d], "data": %s}],
		"outputs": [{"name": "logits"}]}`, B, T, F, d), B
}

func goldenF32(t *testing.T, gold *safetensors.File, name string) []float32 {
	t.Helper()
	tn, ok := gold.Tensor(name)
	if !ok {
		t.Fatalf("golden has no %s", name)
	}
	v, err := tn.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// outputShapes reads each output's shape from an infer response.
func outputShapes(t *testing.T, body []byte) map[string][]int64 {
	t.Helper()
	var resp struct {
		Outputs []struct {
			Name  string  `json:"name"`
			Shape []int64 `json:"shape"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	m := map[string][]int64{}
	for _, o := range resp.Outputs {
		m[o.Name] = o.Shape
	}
	return m
}
