package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"rnnserve/models/bundled"
	"rnnserve/server/api"
)

func newTreeServer(t *testing.T, delay time.Duration) (*Server, *httptest.Server) {
	t.Helper()
	entries, err := LoadRepository(bundled.FS)
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.Batching.MaxQueueDelay = delay
	s := newServer(t, entries, o, testDeps(t, o))
	// A queue delay asks for the batched path: every request through the
	// lane, none run alone (TestTreeSolo covers lone requests).
	if delay > 0 {
		for _, m := range s.table() {
			if tm, ok := m.(*treeModel); ok {
				tm.alwaysBatch = true
			}
		}
	}
	return s, serveHTTP(t, s, true)
}

func treeRequest(trees []string, params string, outputs ...string) string {
	data, _ := json.Marshal(trees)
	var outs []string
	for _, o := range outputs {
		outs = append(outs, fmt.Sprintf(`{"name": %q}`, o))
	}
	body := fmt.Sprintf(`{"inputs": [{"name": "trees", "datatype": "BYTES", "shape": [%d], "data": %s}]`, len(trees), data)
	if params != "" {
		body += `, "parameters": ` + params
	}
	if len(outs) > 0 {
		body += `, "outputs": [`
		for i, o := range outs {
			if i > 0 {
				body += ","
			}
			body += o
		}
		body += "]"
	}
	return body + "}"
}

// TestInferTrees classifies arithmetic expressions with the bundled
// TreeLSTM through POST /v2/models/treelstm/infer, in both tree forms and
// with both executors, with per-node probabilities on request.
func TestInferTrees(t *testing.T) {
	_, hs := newTreeServer(t, 0)
	url := hs.URL + "/v2/models/treelstm/infer"
	// 3 * (4 + 5) = 27 -> 7;  (9 - 2) = 7;  8 -> 8
	trees := []string{
		"((3) ((*) ((4) ((+) (5)))))",
		`{"children": [{"word": "9"}, {"children": [{"word": "-"}, {"word": "2"}]}]}`,
		"(8)",
	}
	for _, params := range []string{"", `{"executor": "recursive"}`, `{"executor": "depth_batched"}`} {
		code, body, _ := post(t, url, treeRequest(trees, params, "class", "probs", "node_probs", "nodes"))
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", params, code, body)
		}
		var res struct {
			Outputs []struct {
				Name  string    `json:"name"`
				Shape []int64   `json:"shape"`
				Data  []float64 `json:"data"`
			} `json:"outputs"`
		}
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatal(err)
		}
		got := map[string][]float64{}
		for _, o := range res.Outputs {
			got[o.Name] = o.Data
		}
		if c := got["class"]; len(c) != 3 || c[0] != 7 || c[1] != 7 || c[2] != 8 {
			t.Errorf("%s: classes %v, want [7 7 8]", params, c)
		}
		if n := got["nodes"]; len(n) != 3 || n[0] != 9 || n[1] != 5 || n[2] != 1 {
			t.Errorf("%s: node counts %v, want [9 5 1]", params, n)
		}
		if len(got["probs"]) != 30 || len(got["node_probs"]) != 150 {
			t.Errorf("%s: %d root probabilities, %d node probabilities; want 30, 150", params, len(got["probs"]), len(got["node_probs"]))
		}
		// The root's row of node_probs is the tree's probs.
		for k := 0; k < 10; k++ {
			if got["node_probs"][8*10+k] != got["probs"][k] {
				t.Fatalf("%s: node_probs of the first root differ from probs", params)
			}
		}
	}
}

func TestInferTreesErrors(t *testing.T) {
	_, hs := newTreeServer(t, 0)
	url := hs.URL + "/v2/models/treelstm/infer"
	for _, c := range []struct {
		body string
		code int
	}{
		{treeRequest([]string{"((3) (4)"}, ""), http.StatusBadRequest},      // unbalanced
		{treeRequest([]string{"((3) (x))"}, ""), http.StatusBadRequest},     // unknown word, no UNK
		{treeRequest([]string{"((3) (4) (5))"}, ""), http.StatusBadRequest}, // not binary
		{treeRequest([]string{""}, ""), http.StatusBadRequest},              // empty tree
		{treeRequest([]string{"(3)"}, `{"executor": "fold2"}`), http.StatusBadRequest},
		{treeRequest([]string{"(3)"}, "", "logits"), http.StatusBadRequest},
		{`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 1], "data": [1]}]}`, http.StatusBadRequest},
		{`{"inputs": [{"name": "trees", "datatype": "BYTES", "shape": [2], "data": ["(3)"]}]}`, http.StatusBadRequest},
		// Strict like sequence models: no sequence parameters, no unknown
		// output parameters, no output twice, nothing after the object.
		{treeRequest([]string{"(3)"}, `{"sequence_id": "s", "sequence_start": true}`), http.StatusBadRequest},
		{`{"inputs": [{"name": "trees", "datatype": "BYTES", "shape": [1], "data": ["(3)"]}], "outputs": [{"name": "class", "parameters": {"k": 1}}]}`, http.StatusBadRequest},
		{treeRequest([]string{"(3)"}, "", "class", "class"), http.StatusBadRequest},
		{treeRequest([]string{"(3)"}, "") + "]", http.StatusBadRequest},
		{treeRequest([]string{"(3)"}, "") + "}}}", http.StatusBadRequest},
		{`{"inputs": [{"name": "trees", "datatype": "BYTES", "shape": [1], "data": ["(3 \ud800)"]}]}`, http.StatusBadRequest},
	} {
		if code, body, _ := post(t, url, c.body); code != c.code {
			t.Errorf("%s: %d %s, want %d", c.body, code, body, c.code)
		}
	}
	if code, _, _ := post(t, hs.URL+"/v2/models/treelstm/generate", `{"prompt": "1"}`); code != http.StatusBadRequest {
		t.Errorf("generate on a tree model: %d, want 400", code)
	}
}

// TestTreeBatching sends concurrent one-tree requests while the batcher
// waits 50ms before each batch: trees of different requests must share
// plans (fewer plan runs than requests), each answer still its own.
func TestTreeBatching(t *testing.T) {
	s, hs := newTreeServer(t, 50*time.Millisecond)
	url := hs.URL + "/v2/models/treelstm/infer"
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := i % 10
			code, body, _ := post(t, url, treeRequest([]string{fmt.Sprintf("((%d) ((+) (0)))", d)}, "", "class"))
			var res api.InferResponse
			if code != http.StatusOK || json.Unmarshal(body, &res) != nil {
				errs <- fmt.Errorf("request %d: %d %s", i, code, body)
				return
			}
			if got := res.Outputs[0].Data.([]any)[0].(float64); int(got) != d {
				errs <- fmt.Errorf("request %d: class %v, want %d", i, got, d)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := statsOf(s.table()["treelstm"]).RNNServe
	if st.Tokens != n || st.Steps >= n {
		t.Errorf("%d trees in %d plans: want %d trees in fewer plans", st.Tokens, st.Steps, n)
	}
	t.Logf("%d requests ran as %d plans", n, st.Steps)
}

// TestTreeSolo sends lone requests to an idle tree model: each runs as its
// own plan in the handler's goroutine (the solo counter), not through the
// batcher's lane, and answers exactly as the batched path does.
func TestTreeSolo(t *testing.T) {
	s, hs := newTreeServer(t, 0)
	url := hs.URL + "/v2/models/treelstm/infer"
	body := treeRequest([]string{"((3) ((*) ((4) ((+) (5)))))", "(8)"}, `{"executor": "depth_batched"}`, "class", "node_probs")
	answers := map[bool]string{}
	for _, batched := range []bool{false, true} {
		for _, m := range s.table() {
			if tm, ok := m.(*treeModel); ok {
				tm.alwaysBatch = batched
			}
		}
		solo0 := testutil.ToFloat64(s.metrics.solo.WithLabelValues("treelstm"))
		code, out, _ := post(t, url, body)
		if code != http.StatusOK {
			t.Fatalf("batched %v: %d %s", batched, code, out)
		}
		var res api.InferResponse
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatal(err)
		}
		if got := res.Outputs[0].Data.([]any); got[0].(float64) != 7 || got[1].(float64) != 8 {
			t.Errorf("batched %v: classes %v, want [7 8]", batched, got)
		}
		data, _ := json.Marshal(res.Outputs)
		answers[batched] = string(data)
		solo := testutil.ToFloat64(s.metrics.solo.WithLabelValues("treelstm")) - solo0
		if want := map[bool]float64{false: 1, true: 0}[batched]; solo != want {
			t.Errorf("batched %v: %v solo plans, want %v", batched, solo, want)
		}
	}
	if answers[false] != answers[true] {
		t.Errorf("solo and batched answers differ:\n%s\n%s", answers[false], answers[true])
	}
}
