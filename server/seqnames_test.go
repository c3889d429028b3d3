package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"rnnserve/models"
	"rnnserve/models/safetensors"
)

// namedRepo holds two pairs of models with the same weights (same shapes
// and seed): one served under rnnserve's names, one under the names and
// layout of its spec's io section, as an exported graph has them.
var namedRepo = fstest.MapFS{}

func init() {
	for name, body := range map[string]string{
		"bi": `
cell: lstm
input_size: 3
hidden_size: 4
num_layers: 2
bidirectional: true
embedding: {vocab_size: 11}
head: {out_features: 6, activation: log_softmax, input: every_step}
seed: 9
`,
		"uni": `
cell: gru
input_size: 2
hidden_size: 5
num_layers: 2
head: {out_features: 3}
seed: 4
`,
	} {
		namedRepo[name+"/model.yaml"] = &fstest.MapFile{Data: []byte(body)}
	}
	namedRepo["bi_named/model.yaml"] = &fstest.MapFile{Data: append(namedRepo["bi/model.yaml"].Data, `io:
  input: input_ids
  time_major: true
  outputs:
    - {name: output, value: head}
    - {name: rows, value: head, rows: true}
    - {name: y, value: output}
    - {name: h_n, value: h_n}
    - {name: c_n, value: c_n}
    - {name: hcat, value: h_n, states: [2, 3], join: true}
    - {name: odd, value: none}
`...)}
	namedRepo["uni_named/model.yaml"] = &fstest.MapFile{Data: append(namedRepo["uni/model.yaml"].Data, `io:
  input: x
  outputs:
    - {name: scores, value: head}
    - {name: hlast, value: h_n, states: [1]}
`...)}
}

func newNamedServer(t *testing.T) *httptest.Server {
	t.Helper()
	entries, err := LoadRepository(namedRepo)
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.CacheBytes = 1 << 20
	o.TrafficSteps = 10
	s := newServer(t, entries, o, testDeps(t, o))
	stepAlways(s)
	return serveHTTP(t, s, true)
}

type shapedOutput struct {
	Shape []int64   `json:"shape"`
	Data  []float64 `json:"data"`
}

func inferShaped(t *testing.T, url, body string) map[string]shapedOutput {
	t.Helper()
	code, resp, _ := post(t, url, body)
	if code != 200 {
		t.Fatalf("%s: %d %s", url, code, resp)
	}
	var r struct {
		Outputs []struct {
			Name string `json:"name"`
			shapedOutput
		} `json:"outputs"`
	}
	if err := json.Unmarshal(resp, &r); err != nil {
		t.Fatal(err)
	}
	out := map[string]shapedOutput{}
	for _, o := range r.Outputs {
		out[o.Name] = o.shapedOutput
	}
	return out
}

func sameValues(t *testing.T, what string, got shapedOutput, shape []int64, want []float64) {
	t.Helper()
	if fmt.Sprint(got.Shape) != fmt.Sprint(shape) {
		t.Errorf("%s: shape %v, want %v", what, got.Shape, shape)
		return
	}
	if len(got.Data) != len(want) {
		t.Errorf("%s: %d values, want %d", what, len(got.Data), len(want))
		return
	}
	for i := range want {
		if got.Data[i] != want[i] {
			t.Errorf("%s[%d] = %v, want %v (the same model under rnnserve's names)", what, i, got.Data[i], want[i])
			return
		}
	}
}

// swap turns [a][b][x] into [b][a][x].
func swap(v []float64, a, b, x int) []float64 {
	return swapAxes(v, a, b, x)
}

// TestNamedOutputs serves a model under an exported graph's names and
// layout and checks every output against the same model under
// rnnserve's names: time-major tensors are the batch-first ones
// transposed, h_n is hidden with its first two axes swapped, a joined
// pick of states is their concatenation.
func TestNamedOutputs(t *testing.T) {
	hs := newNamedServer(t)
	const B, T, V, H, S = 2, 3, 6, 4, 4 // S: h_n entries, 2 layers x 2 directions
	tokens := [][]int64{{1, 2, 3}, {4, 5, 6}}
	plain := inferShaped(t, hs.URL+"/v2/models/bi/infer", `{"inputs": [`+tokensJSON(tokens)+`],
		"outputs": [{"name": "logits"}, {"name": "output"}, {"name": "hidden"}, {"name": "cell"}]}`)
	// The same tokens time-major: [T, B].
	tm := `{"name": "input_ids", "datatype": "INT64", "shape": [3, 2], "data": [1, 4, 2, 5, 3, 6]}`
	named := inferShaped(t, hs.URL+"/v2/models/bi_named/infer", `{"inputs": [`+tm+`]}`)
	if len(named) != 6 {
		t.Errorf("a request naming no output got %d outputs, want the model's 6 computed ones", len(named))
	}
	logits := swap(plain["logits"].Data, B, T, V)
	sameValues(t, "output", named["output"], []int64{T, B, V}, logits)
	sameValues(t, "rows", named["rows"], []int64{T * B, V}, logits)
	sameValues(t, "y", named["y"], []int64{T, B, 2 * H}, swap(plain["output"].Data, B, T, 2*H))
	sameValues(t, "h_n", named["h_n"], []int64{S, B, H}, swap(plain["hidden"].Data, B, S, H))
	sameValues(t, "c_n", named["c_n"], []int64{S, B, H}, swap(plain["cell"].Data, B, S, H))
	var hcat []float64
	for b := range B {
		hcat = append(hcat, plain["hidden"].Data[(b*S+2)*H:(b*S+4)*H]...)
	}
	sameValues(t, "hcat", named["hcat"], []int64{B, 2 * H}, hcat)
	// rnnserve's derived outputs follow the model's layout too.
	probs := inferShaped(t, hs.URL+"/v2/models/bi_named/infer", `{"inputs": [`+tm+`], "outputs": [{"name": "top_k", "parameters": {"k": 2}}]}`)
	if got := probs["top_k"].Shape; fmt.Sprint(got) != "[3 2 2]" {
		t.Errorf("top_k shape %v, want [T, B, k] = [3 2 2]", got)
	}

	// Unidirectional, batch-first, through the cellular batcher.
	feats := `"datatype": "FP32", "shape": [2, 2, 2], "data": [0.1, 0.2, 0.3, 0.4, -1, 0.5, 2, -0.25]}`
	plainU := inferShaped(t, hs.URL+"/v2/models/uni/infer", `{"inputs": [{"name": "features", `+feats+`],
		"outputs": [{"name": "logits"}, {"name": "hidden"}]}`)
	namedU := inferShaped(t, hs.URL+"/v2/models/uni_named/infer", `{"inputs": [{"name": "x", `+feats+`]}`)
	sameValues(t, "scores", namedU["scores"], []int64{2, 2, 3}, plainU["logits"].Data)
	var hlast []float64
	for b := range 2 {
		hlast = append(hlast, plainU["hidden"].Data[(b*2+1)*5:(b*2+2)*5]...)
	}
	sameValues(t, "hlast", namedU["hlast"], []int64{1, 2, 5}, hlast)
}

// TestNamedRefusals: under an exported graph's names, rnnserve's own
// names are refused with the model's names listed, an output of the
// graph that is not computed is refused by its name, and the input is
// taken under its name only.
func TestNamedRefusals(t *testing.T) {
	hs := newNamedServer(t)
	tm := `{"name": "input_ids", "datatype": "INT64", "shape": [3, 2], "data": [1, 4, 2, 5, 3, 6]}`
	for _, c := range []struct{ body, want string }{
		{`{"inputs": [` + tm + `], "outputs": [{"name": "odd"}]}`, `"odd": the exported model has this output, but rnnserve does not compute it`},
		{`{"inputs": [` + tm + `], "outputs": [{"name": "logits"}]}`, `"logits": the model's outputs have its own names (output, rows, y, h_n, c_n, hcat, probs, top_k, top_k_probs)`},
		{`{"inputs": [` + tm + `], "outputs": [{"name": "colour"}]}`, `"colour" (known: output, rows, y, h_n`},
		{`{"inputs": [` + strings.Replace(tm, "input_ids", "tokens", 1) + `]}`, `unknown input "tokens" (want "input_ids")`},
		{`{"inputs": [` + strings.Replace(tm, `"shape": [3, 2]`, `"shape": [3, 2, 1]`, 1) + `]}`, `rank 3, want 2`},
	} {
		code, body, _ := post(t, hs.URL+"/v2/models/bi_named/infer", c.body)
		var e struct{ Error string }
		json.Unmarshal(body, &e)
		if code != 400 || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s: %d %s, want 400 mentioning %s", c.body, code, body, c.want)
		}
	}
	// Metadata lists the graph's names, computed outputs only, in order.
	code, body := get(t, hs.URL+"/v2/models/bi_named")
	var md struct {
		Inputs  []struct{ Name string } `json:"inputs"`
		Outputs []struct {
			Name  string  `json:"name"`
			Shape []int64 `json:"shape"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(body, &md); code != 200 || err != nil {
		t.Fatalf("metadata: %d %s", code, body)
	}
	var names []string
	for _, o := range md.Outputs {
		names = append(names, fmt.Sprint(o.Name, o.Shape))
	}
	want := "[output[-1 -1 6] rows[-1 6] y[-1 -1 8] h_n[4 -1 4] c_n[4 -1 4] hcat[-1 8] probs[-1 -1 6] top_k[-1 -1 -1] top_k_probs[-1 -1 -1]]"
	if md.Inputs[0].Name != "input_ids" || fmt.Sprint(names) != want {
		t.Errorf("metadata inputs %v outputs %v, want input_ids and %s", md.Inputs, names, want)
	}
}

// TestONNXGoldenNames serves every ONNX export of models/testdata/golden
// (written by torch.onnx.export from scripts/torch_golden.py) and asks it
// as a client written for the graph would: the input under the graph's
// name and layout, every output under the graph's name. Each output must
// have the shape and, within 1e-5 relative to max(1, |want|), the values
// PyTorch's module returned for it.
func TestONNXGoldenNames(t *testing.T) {
	files, err := filepath.Glob("../models/testdata/golden/onnx_*/model.onnx")
	if err != nil || len(files) < 9 {
		t.Fatalf("found %d ONNX goldens (%v), want 9: regenerate with /usr/bin/python3 scripts/torch_golden.py", len(files), err)
	}
	for _, file := range files {
		dir := filepath.Dir(file)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			m, err := models.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			io, err := safetensors.ReadFile(filepath.Join(dir, "io.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			o := testOptions()
			o.CacheBytes = 1 << 20
			o.TrafficSteps = 10
			s, err := New([]Entry{{Name: "m", Model: m}}, o, testDeps(t, o))
			if err != nil {
				t.Fatal(err)
			}
			s.Start()
			hs := httptest.NewServer(s.Handler())
			defer func() { hs.Close(); s.Stop(context.Background()) }()

			in, _ := io.Tensor("graph." + m.Spec.IO.Input)
			if in == nil {
				t.Fatalf("io.safetensors has no graph.%s", m.Spec.IO.Input)
			}
			input := map[string]any{"name": m.Spec.IO.Input, "shape": in.Shape}
			if v, err := in.Int64s(); err == nil {
				input["datatype"], input["data"] = "INT64", v
			} else if v, err := in.Float32s(); err == nil {
				input["datatype"], input["data"] = "FP32", v
			} else {
				t.Fatal(err)
			}
			var outputs []map[string]string
			want := map[string]*safetensors.Tensor{}
			for _, name := range io.Names() {
				if g, ok := strings.CutPrefix(name, "graph."); ok && g != m.Spec.IO.Input {
					want[g], _ = io.Tensor(name)
					outputs = append(outputs, map[string]string{"name": g})
				}
			}
			if len(want) != len(m.Spec.IO.Outputs) {
				t.Errorf("the graph has %d outputs, the spec names %d", len(want), len(m.Spec.IO.Outputs))
			}
			body, _ := json.Marshal(map[string]any{"inputs": []any{input}, "outputs": outputs})
			got := inferShaped(t, hs.URL+"/v2/models/m/infer", string(body))
			for name, w := range want {
				g, ok := got[name]
				if !ok {
					t.Errorf("no output %q", name)
					continue
				}
				if fmt.Sprint(g.Shape) != fmt.Sprint(w.Shape) {
					t.Errorf("%s: shape %v, PyTorch's %v", name, g.Shape, w.Shape)
					continue
				}
				wv, err := w.Float32s()
				if err != nil {
					t.Fatal(err)
				}
				for i := range wv {
					if d := math.Abs(g.Data[i] - float64(wv[i])); d > 1e-5*math.Max(1, math.Abs(float64(wv[i]))) {
						t.Errorf("%s[%d] = %v, PyTorch's %v", name, i, g.Data[i], wv[i])
						break
					}
				}
			}
		})
	}
}

// TestNamedConfig: a model some of whose tensors do not have the batch
// first (time-major, h_n as PyTorch lays it out) says so in its Triton
// configuration with max_batch_size 0 and every dimension in the dims; a
// batch-first one keeps the batch out of the dims.
func TestNamedConfig(t *testing.T) {
	hs := newNamedServer(t)
	for _, c := range []struct {
		model string
		batch int
		dims  string
	}{
		{"bi_named", 0, "input_ids[-1 -1] lengths[-1] | output[-1 -1 6] rows[-1 6] y[-1 -1 8] h_n[4 -1 4]"},
		{"uni", 64, "features[-1 2] lengths[1] | logits[-1 3]"},
	} {
		code, body := get(t, hs.URL+"/v2/models/"+c.model+"/config")
		var cfg struct {
			MaxBatchSize int `json:"max_batch_size"`
			Input        []struct {
				Name string  `json:"name"`
				Dims []int64 `json:"dims"`
			} `json:"input"`
			Output []struct {
				Name string  `json:"name"`
				Dims []int64 `json:"dims"`
			} `json:"output"`
		}
		if err := json.Unmarshal(body, &cfg); code != 200 || err != nil {
			t.Fatalf("%s config: %d %s", c.model, code, body)
		}
		var dims []string
		for _, in := range cfg.Input {
			dims = append(dims, fmt.Sprint(in.Name, in.Dims))
		}
		dims = append(dims, "|")
		for _, out := range cfg.Output {
			dims = append(dims, fmt.Sprint(out.Name, out.Dims))
		}
		if got := strings.Join(dims, " "); cfg.MaxBatchSize != c.batch || !strings.HasPrefix(got, c.dims) {
			t.Errorf("%s: max_batch_size %d, dims %s; want %d, %s...", c.model, cfg.MaxBatchSize, got, c.batch, c.dims)
		}
	}
}
