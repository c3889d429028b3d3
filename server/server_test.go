package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"rnnserve/internal/invariants"
	"rnnserve/schedule"
	"rnnserve/server/api"
	"rnnserve/server/internal/choice"
)

// A small repository: a byte-level LSTM language model, a GRU on
// features, and a bidirectional LSTM, all with seeded random weights.
var testRepo = fstest.MapFS{
	"lm/model.yaml": {Data: []byte(`
cell: lstm
input_size: 8
hidden_size: 16
num_layers: 2
embedding: {vocab_size: 256}
head: {out_features: 256, activation: log_softmax}
seed: 7
`)},
	"feat/model.yaml": {Data: []byte(`
cell: gru
input_size: 3
hidden_size: 5
head: {out_features: 4, activation: softmax}
seed: 3
`)},
	"bi/model.yaml": {Data: []byte(`
cell: lstm
input_size: 3
hidden_size: 4
num_layers: 2
bidirectional: true
seed: 5
`)},
	"bi/config.yaml": {Data: []byte("schedule: A\n")},
}

func newTestServer(t testing.TB, mutate func(*Options), start bool) (*Server, *httptest.Server) {
	t.Helper()
	entries, err := LoadRepository(testRepo)
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.CacheBytes = 1 << 20
	o.TrafficSteps = 10
	if mutate != nil {
		mutate(&o)
	}
	s := newServer(t, entries, o, testDeps(t, o))
	// Tests of the batched path step every request; TestInferMatchesPlan
	// and TestSoloPlan cover lone requests run as whole plans.
	stepAlways(s)
	return s, serveHTTP(t, s, start)
}

func post(t testing.TB, url, body string) (int, []byte, http.Header) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

func get(t testing.TB, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// decodeOutputs parses an infer response's outputs into float64 slices.
func parseOutputs(t testing.TB, body []byte) map[string][]float64 {
	t.Helper()
	var resp struct {
		Outputs []struct {
			Name  string    `json:"name"`
			Shape []int64   `json:"shape"`
			Data  []float64 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("response %s: %v", body, err)
	}
	out := map[string][]float64{}
	for _, o := range resp.Outputs {
		out[o.Name] = o.Data
	}
	return out
}

// reference runs a model's plan directly on batch-first tokens.
func reference(t testing.TB, s *Server, name string, tokens [][]int64, h0, c0 []float32) schedule.Result {
	t.Helper()
	m := seqOf(t, s, name)
	B, T := len(tokens), len(tokens[0])
	in := schedule.Input{T: T, B: B, Tokens: make([]int64, T*B), H0: h0, C0: c0}
	for b := range tokens {
		for tt := range tokens[b] {
			in.Tokens[tt*B+b] = tokens[b][tt]
		}
	}
	prog, err := schedule.NewProgram(m.net, schedule.APlus)
	if err != nil {
		t.Fatal(err)
	}
	p, err := prog.Plan(in, schedule.PlanOptions{Head: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Run()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func tokensJSON(tokens [][]int64) string {
	b, _ := json.Marshal(tokens)
	return fmt.Sprintf(`{"name": "tokens", "datatype": "INT64", "shape": [%d, %d], "data": %s}`, len(tokens), len(tokens[0]), b)
}

func near(t testing.TB, what string, got []float64, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i]-float64(want[i])) > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

func TestHealthAndMetadata(t *testing.T) {
	_, hs := newTestServer(t, nil, true)
	for _, path := range []string{"/v2/health/live", "/v2/health/ready", "/v2", "/v2/models/lm/ready", "/v2/models/lm/stats",
		"/v2/models/lm/versions/1", "/v2/models/lm/versions/1/ready", "/v2/models/lm/versions/1/stats", "/v2/models/lm/config",
		"/v2/models/lm/versions/1/config", "/v2/models/stats", "/v2/openapi.yaml"} {
		if code, body := get(t, hs.URL+path); code != 200 {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
	}
	code, body := get(t, hs.URL+"/v2/models/lm")
	var md api.ModelMetadata
	if code != 200 || json.Unmarshal(body, &md) != nil {
		t.Fatalf("metadata: %d %s", code, body)
	}
	if md.Inputs[0].Name != "tokens" || md.RNN.Cell != "lstm" || md.RNN.VocabSize != 256 || len(md.RNN.Traffic) != 4 ||
		md.RNN.Traffic[0].DRE <= 0 || md.RNN.Traffic[0].WorkingSetBytes <= 0 || md.RNN.ScheduleReason == "" {
		t.Errorf("metadata: %s", body)
	}
	code, body = get(t, hs.URL+"/v2/models/bi")
	if !strings.Contains(string(body), `"schedule":"A"`) || !strings.Contains(string(body), `"cellular_batching":false`) {
		t.Errorf("bi metadata: %d %s", code, body)
	}
	if code, body := get(t, hs.URL+"/v2/models/nope"); code != 404 || !strings.Contains(string(body), "unknown model") {
		t.Errorf("unknown model: %d %s", code, body)
	}
	for _, path := range []string{"/v2/models/lm/versions/2", "/v2/models/lm/versions/2/ready", "/v2/models/lm/versions/x/stats", "/v2/models/lm/versions/0/config"} {
		if code, body := get(t, hs.URL+path); code != 404 || !strings.Contains(string(body), `versions served: [1]`) {
			t.Errorf("GET %s: %d %s, want 404 naming the versions served", path, code, body)
		}
	}
	if code, body, _ := post(t, hs.URL+"/v2/models/lm/versions/3/infer", `{"inputs": []}`); code != 404 || !strings.Contains(string(body), `versions served: [1]`) {
		t.Errorf("infer on version 3: %d %s", code, body)
	}
	if code, _ := get(t, hs.URL+"/v2/nowhere"); code != 404 {
		t.Errorf("unknown route: %d", code)
	}
}

func TestReadyBeforeStart(t *testing.T) {
	_, hs := newTestServer(t, nil, false)
	if code, _ := get(t, hs.URL+"/v2/health/ready"); code != 503 {
		t.Errorf("ready before Start: %d", code)
	}
}

// TestInferMatchesPlan checks batched inference (stepped, and a lone
// request run as a whole plan) and unbatched inference against a direct
// plan run, for every output.
func TestInferMatchesPlan(t *testing.T) {
	for _, mode := range []struct {
		batching, solo bool
	}{{true, false}, {true, true}, {false, false}} {
		t.Run(fmt.Sprintf("batching=%v,solo=%v", mode.batching, mode.solo), func(t *testing.T) {
			s, hs := newTestServer(t, func(o *Options) { o.Batching.Enabled = &mode.batching }, false)
			seqOf(t, s, "lm").alwaysStep = !mode.solo
			s.Start()
			tokens := [][]int64{{72, 101, 108, 108, 111}, {0, 255, 3, 9, 10}}
			body := `{"id": "r1", "inputs": [` + tokensJSON(tokens) + `], "outputs": [{"name": "logits"}, {"name": "output"}, {"name": "hidden"}, {"name": "cell"}, {"name": "probs", "parameters": {"last_step": true}}, {"name": "top_k", "parameters": {"k": 3}}]}`
			code, resp, _ := post(t, hs.URL+"/v2/models/lm/infer", body)
			if code != 200 {
				t.Fatalf("%d %s", code, resp)
			}
			got := parseOutputs(t, resp)
			want := reference(t, s, "lm", tokens, nil, nil)
			B, T, V := 2, 5, 256
			// The reference is time-major; the response is batch-first.
			bf := func(tm []float32, width int) []float32 {
				out := make([]float32, 0, len(tm))
				for b := 0; b < B; b++ {
					for tt := 0; tt < T; tt++ {
						out = append(out, tm[(tt*B+b)*width:(tt*B+b+1)*width]...)
					}
				}
				return out
			}
			near(t, "logits", got["logits"], bf(want.Head, V))
			near(t, "output", got["output"], bf(want.Output, 16))
			L := 2
			hn, cn := make([]float32, 0), make([]float32, 0)
			for b := 0; b < B; b++ {
				for l := 0; l < L; l++ {
					hn = append(hn, want.HN[(l*B+b)*16:(l*B+b+1)*16]...)
					cn = append(cn, want.CN[(l*B+b)*16:(l*B+b+1)*16]...)
				}
			}
			near(t, "hidden", got["hidden"], hn)
			near(t, "cell", got["cell"], cn)
			steps := testutil.ToFloat64(s.metrics.steps.WithLabelValues("lm"))
			solo := testutil.ToFloat64(s.metrics.solo.WithLabelValues("lm"))
			switch {
			case mode.batching && mode.solo && (steps != 0 || solo != 1):
				t.Errorf("a lone request ran %v batched steps and %v solo plans, want 0 and 1", steps, solo)
			case mode.batching && !mode.solo && (steps != float64(T) || solo != 0):
				t.Errorf("a stepped request ran %v batched steps and %v solo plans, want %d and 0", steps, solo, T)
			}
			// A lone plan on an idle model runs across every core when the
			// schedule has a wide form (P with more than one core).
			wantWide := 0.0
			if m := seqOf(t, s, "lm"); m.form.Load().wide != nil && (mode.solo || !mode.batching) {
				wantWide = 1
			}
			if got := testutil.ToFloat64(s.metrics.wide.WithLabelValues("lm")); got != wantWide {
				t.Errorf("%v wide plans, want %v (%s)", got, wantWide, reasonOf(seqOf(t, s, "lm")))
			}
			if len(got["probs"]) != B*V || len(got["top_k"]) != B*T*3 {
				t.Fatalf("probs %d values, top_k %d", len(got["probs"]), len(got["top_k"]))
			}
			// top_k's first id is the argmax of the logits at that step.
			for b := 0; b < B; b++ {
				row := want.Head[((T-1)*B+b)*V : ((T-1)*B+b+1)*V]
				best := 0
				for i, v := range row {
					if v > row[best] {
						best = i
					}
				}
				if int(got["top_k"][(b*T+T-1)*3]) != best {
					t.Errorf("row %d: top_k[0] = %v, argmax %d", b, got["top_k"][(b*T+T-1)*3], best)
				}
				if p := got["probs"][b*V+best]; math.Abs(p-math.Exp(float64(row[best]))) > 1e-6 {
					t.Errorf("row %d: probs %v, want %v", b, p, math.Exp(float64(row[best])))
				}
			}
		})
	}
}

func TestInferFeaturesAndBidirectional(t *testing.T) {
	_, hs := newTestServer(t, nil, true)
	feat := `{"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 2, 3], "data": [[[0.1, 0.2, 0.3], [1, -1, 0.5]]]}]}`
	code, body, _ := post(t, hs.URL+"/v2/models/feat/infer", feat)
	if code != 200 {
		t.Fatalf("feat: %d %s", code, body)
	}
	probs := parseOutputs(t, body)["logits"]
	if len(probs) != 8 || math.Abs(probs[0]+probs[1]+probs[2]+probs[3]-1) > 1e-5 {
		t.Errorf("softmax head rows should sum to 1: %v", probs)
	}
	code, body, _ = post(t, hs.URL+"/v2/models/bi/infer", strings.Replace(feat, `"inputs"`, `"outputs": [{"name": "output"}, {"name": "hidden"}], "inputs"`, 1))
	got := parseOutputs(t, body)
	if code != 200 || len(got["output"]) != 2*8 || len(got["hidden"]) != 4*4 {
		t.Errorf("bi: %d %s", code, body)
	}
}

func TestBadRequests(t *testing.T) {
	_, hs := newTestServer(t, func(o *Options) { o.MaxBodyBytes = 4096; o.MaxSteps = 50 }, true)
	ok := tokensJSON([][]int64{{1, 2}})
	for _, c := range []struct {
		model, body string
		code        int
		want        string
	}{
		{"lm", `{"inputs": [`, 400, "malformed JSON"},
		{"lm", `{"inputs": [], "bogus": 1}`, 400, "unknown field"},
		{"lm", `{"inputs": []}`, 400, "no input"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]}`, 400, "datatype"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [2], "data": [1, 2]}]}`, 400, "rank"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 3], "data": [1, 2]}]}`, 400, "2 values, want 3"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 2], "data": [1, 256]}]}`, 400, "outside the vocabulary"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 2], "data": [1, -1]}]}`, 400, "outside the vocabulary"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 2], "data": [1, 2.5]}]}`, 400, "not a 64-bit integer"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 2], "data": [1, "a"]}]}`, 400, "only numbers"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 0], "data": []}]}`, 400, "want 1..50"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 51], "data": []}]}`, 400, "0 values, want 51"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 51], "data": [` + strings.Repeat("1,", 50) + `1]}]}`, 400, "want 1..50"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 1], "data": [[[[[[[[[1]]]]]]]]]}]}`, 400, "nested deeper"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [2, 2], "data": [[1, 2, 3], [4]]}]}`, 400, "holds 3 elements"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [2, 2], "data": [[1, 2], 3, 4]}]}`, 400, "nested as shape"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [2, 2], "data": [1, 2, [3, 4]]}]}`, 400, "nested as shape"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 2], "data": [[1], [2]]}]}`, 400, "holds 1 elements"},
		{"feat", `{"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 1, 3], "data": [[1, 1, 1]]}]}`, 400, "nested as shape"},
		{"lm", `{"inputs": [` + ok + `], "outputs": [{"name": "attention"}]}`, 400, "unsupported output"},
		{"lm", `{"inputs": [` + ok + `], "outputs": [{"name": "top_k", "parameters": {"k": 0}}]}`, 400, "parameter k"},
		{"lm", `{"inputs": [` + ok + `, ` + ok + `]}`, 400, "more inputs than"},
		{"lm", `{"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 1, 8], "data": [1,1,1,1,1,1,1,1]}]}`, 400, "not \"features\""},
		{"feat", `{"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 1, 3], "data": [1, 1e39, 1]}]}`, 400, "finite"},
		{"feat", `{"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 1, 4], "data": [1, 1, 1, 1]}]}`, 400, "dimension 2"},
		{"feat", `{"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 3, 1], "data": [1, 2, 3]}]}`, 400, "input size 3"},
		{"feat", `{"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 3, 1], "data": [1, 2, 3]}], "parameters": {"sequence_id": 9, "sequence_start": true}}`, 400, "input size 3"},
		{"feat", `{"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 1, 3], "data": [1, 1, 1]}], "outputs": [{"name": "cell"}]}`, 400, "no cell state"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 1], "data": [1]}], "parameters": {"sequence_start": true}}`, 400, "without sequence_id"},
		{"lm", `{"inputs": [` + tokensJSON([][]int64{{1}, {2}}) + `], "parameters": {"sequence_id": 5, "sequence_start": true}}`, 400, "batch size 1"},
		{"lm", `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 1], "data": [` + strings.Repeat("1,", 3000) + `1]}]}`, 413, "over 4096"},
		{"nope", `{}`, 404, "unknown model"},
		{"bi", `{"prompt": "hi"}`, 400, "cannot generate"},
	} {
		path := "/infer"
		if strings.Contains(c.body, "prompt") {
			path = "/generate"
		}
		code, body, _ := post(t, hs.URL+"/v2/models/"+c.model+path, c.body)
		var e api.Error
		if code != c.code || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s %.60s: %d %s, want %d mentioning %q", c.model, c.body, code, body, c.code, c.want)
		}
	}
	// The server still serves after all that.
	if code, body, _ := post(t, hs.URL+"/v2/models/lm/infer", `{"inputs": [`+ok+`]}`); code != 200 {
		t.Errorf("after bad requests: %d %s", code, body)
	}
}

// TestSequences checks that a sequence split over requests gives the same
// result as one request, and the errors for unknown, ended and busy ids.
func TestSequences(t *testing.T) {
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprint("batching=", batching), func(t *testing.T) {
			s, hs := newTestServer(t, func(o *Options) { o.Batching.Enabled = &batching }, true)
			url := hs.URL + "/v2/models/lm/infer"
			all := []int64{5, 6, 7, 8, 9, 10, 11}
			parts := [][]int64{all[:3], all[3:4], all[4:]}
			var last map[string][]float64
			for i, p := range parts {
				params := `"sequence_id": "abc"`
				if i == 0 {
					params += `, "sequence_start": true`
				}
				if i == len(parts)-1 {
					params += `, "sequence_end": true`
				}
				code, body, _ := post(t, url, `{"parameters": {`+params+`}, "inputs": [`+tokensJSON([][]int64{p})+`], "outputs": [{"name": "hidden"}, {"name": "logits", "parameters": {"last_step": true}}]}`)
				if code != 200 {
					t.Fatalf("part %d: %d %s", i, code, body)
				}
				last = parseOutputs(t, body)
			}
			want := reference(t, s, "lm", [][]int64{all}, nil, nil)
			near(t, "hidden", last["hidden"], want.HN)
			near(t, "logits", last["logits"], want.Head[(len(all)-1)*256:])
			for _, c := range []struct {
				params string
				code   int
				want   string
			}{
				{`"sequence_id": "abc"`, 410, "sequence ended"},
				{`"sequence_id": 77`, 404, "unknown sequence"},
				{`"sequence_id": 0`, 400, "must not be empty or 0"},
				{`"sequence_id": -3`, 400, "unsigned"},
			} {
				code, body, _ := post(t, url, `{"parameters": {`+c.params+`}, "inputs": [`+tokensJSON([][]int64{{1}})+`]}`)
				if code != c.code || !strings.Contains(string(body), c.want) {
					t.Errorf("%s: %d %s, want %d %q", c.params, code, body, c.code, c.want)
				}
			}
		})
	}
}

func TestSequenceStoreLimits(t *testing.T) {
	now := time.Unix(0, 0)
	st := newSequenceStore(SequenceOptions{IdleTimeout: time.Minute, MaxLive: 2})
	st.now = func() time.Time { return now }
	a, err := st.acquire("a", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.acquire("a", false); StatusOf(err) != http.StatusConflict {
		t.Errorf("busy: %v", err)
	}
	st.release("a", a, []float32{1}, nil, false)
	b, _ := st.acquire("b", true)
	st.release("b", b, nil, nil, false)
	if _, err := st.acquire("c", true); StatusOf(err) != http.StatusTooManyRequests {
		t.Errorf("over the cap: %v", err)
	}
	now = now.Add(2 * time.Minute)
	if _, err := st.acquire("a", false); StatusOf(err) != http.StatusGone || !strings.Contains(err.Error(), "expired") {
		t.Errorf("idle: %v", err)
	}
	if st.count() != 0 {
		t.Errorf("%d live after expiry", st.count())
	}
}

func TestGenerate(t *testing.T) {
	s, hs := newTestServer(t, nil, true)
	// stream reads an NDJSON stream (rnnserve's own, on Accept:
	// application/x-ndjson) from generate or generate_stream.
	stream := func(path, body string) ([]api.GenerateEvent, api.GenerateDone) {
		req, _ := http.NewRequest("POST", hs.URL+"/v2/models/lm/"+path, strings.NewReader(body))
		req.Header.Set("Accept", "application/x-ndjson")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		var evs []api.GenerateEvent
		var done api.GenerateDone
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if bytes.Contains(sc.Bytes(), []byte(`"done"`)) {
				if err := json.Unmarshal(sc.Bytes(), &done); err != nil {
					t.Fatal(err)
				}
				continue
			}
			var ev api.GenerateEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			evs = append(evs, ev)
		}
		return evs, done
	}
	evs, done := stream("generate", `{"prompt": "Hello", "max_tokens": 6, "temperature": 0}`)
	if len(evs) != 6 || !done.Done || done.Reason != "length" || done.Tokens != 6 {
		t.Fatalf("events: %+v %+v", evs, done)
	}
	// Greedy generation equals repeated argmax over a plan of the text so far.
	text := []int64{'H', 'e', 'l', 'l', 'o'}
	for i := 0; i < 6; i++ {
		res := reference(t, s, "lm", [][]int64{text}, nil, nil)
		row := res.Head[(len(text)-1)*256:]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		if evs[i].Token != int64(best) {
			t.Fatalf("token %d = %d, greedy %d", i, evs[i].Token, best)
		}
		text = append(text, int64(best))
	}
	// Sampling with a seed is repeatable, in Triton's schema too.
	a, _ := stream("generate_stream", `{"text_input": "Hi", "parameters": {"max_tokens": 10, "temperature": 1, "top_k": 20, "top_p": 0.9, "seed": 42}}`)
	b, _ := stream("generate", `{"text_input": "Hi", "max_tokens": 10, "temperature": 1, "top_k": 20, "top_p": 0.9, "seed": 42}`)
	if fmt.Sprint(a) != fmt.Sprint(b) || len(a) != 10 {
		t.Errorf("same seed, different text:\n%v\n%v", a, b)
	}
	// generate answers one JSON object whose text is the streamed tokens'.
	code, body, hdr := post(t, hs.URL+"/v2/models/lm/generate", `{"text_input": "Hi", "parameters": {"max_tokens": 10, "temperature": 1, "top_k": 20, "top_p": 0.9, "seed": 42}}`)
	var whole api.GenerateResponse
	if code != 200 || hdr.Get("Content-Type") != "application/json" || json.Unmarshal(body, &whole) != nil {
		t.Fatalf("generate: %d %v %s", code, hdr, body)
	}
	var want []byte
	for _, ev := range a {
		want = append(want, byte(ev.Token))
	}
	var wantText string
	if data, err := json.Marshal(string(want)); err != nil || json.Unmarshal(data, &wantText) != nil {
		t.Fatal(err)
	}
	if whole.ModelName != "lm" || whole.ModelVersion != "1" || len(whole.RNNServe.Tokens) != 10 || whole.RNNServe.FinishReason != "length" ||
		whole.TextOutput != wantText {
		t.Errorf("generate: %s, want the text of %v", body, a)
	}
	// generate_stream sends Server-Sent Events, one per token, then one
	// with the finish reason.
	resp, err := http.Post(hs.URL+"/v2/models/lm/versions/1/generate_stream", "application/json",
		strings.NewReader(`{"text_input": "Hi", "parameters": {"max_tokens": 4, "temperature": 0}}`))
	if err != nil {
		t.Fatal(err)
	}
	sse, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	events := strings.Split(strings.TrimSuffix(string(sse), "\n\n"), "\n\n")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || len(events) != 5 {
		t.Fatalf("generate_stream: %d %v %q", resp.StatusCode, resp.Header, sse)
	}
	for i, ev := range events {
		var g api.GenerateResponse
		if !strings.HasPrefix(ev, "data: ") || json.Unmarshal([]byte(ev[len("data: "):]), &g) != nil {
			t.Fatalf("event %d: %q", i, ev)
		}
		if i < 4 && (len(g.RNNServe.Tokens) != 1 || g.RNNServe.Tokens[0] != evs[i].Token) || i == 4 && g.RNNServe.FinishReason != "length" {
			t.Errorf("event %d: %q (greedy tokens %v)", i, ev, evs[:4])
		}
	}
	// A stop string ends the generation after it: take the first
	// printable ASCII byte generated.
	at := slices.IndexFunc(want, func(c byte) bool { return c > ' ' && c < 0x7f && c != '"' && c != '\\' })
	if at < 0 {
		t.Fatalf("no printable byte in %q to stop at", want)
	}
	code, body, _ = post(t, hs.URL+"/v2/models/lm/generate", fmt.Sprintf(`{"text_input": "Hi", "parameters": {"max_tokens": 10, "temperature": 1, "top_k": 20, "top_p": 0.9, "seed": 42, "stop": ["%c"]}}`, want[at]))
	if json.Unmarshal(body, &whole) != nil || code != 200 || whole.RNNServe.FinishReason != "stop" || len(whole.RNNServe.Tokens) != at+1 {
		t.Errorf("stop %q: %d %s, want %d tokens", want[at], code, body, at+1)
	}
	for _, bad := range []string{`{"prompt": ""}`, `{"prompt": "x", "max_tokens": -1}`, `{"prompt": "x", "temperature": -1}`, `{"prompt": "x", "top_k": 300}`,
		`{"prompt_tokens": [300]}`, `{"text_input": "x", "top_p": 2}`, `{"text_input": "x", "prompt": "y"}`, `{"text_input": "x", "max_tokens": 2, "parameters": {"max_tokens": 3}}`,
		`{"text_input": "x", "stop": 5}`, `{"text_input": "x", "colour": 1}`, `{"text_input": "x"}]`} {
		if code, body, _ := post(t, hs.URL+"/v2/models/lm/generate", bad); code != 400 {
			t.Errorf("%s: %d %s", bad, code, body)
		}
	}
}

// TestQueueFull: with the batchers not started, one request fills a queue
// of one; the next is refused at once with 503 and Retry-After.
func TestQueueFull(t *testing.T) {
	s, hs := newTestServer(t, func(o *Options) { o.Batching.QueueLength = 1 }, false)
	body := `{"inputs": [` + tokensJSON([][]int64{{1, 2}}) + `]}`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+"/v2/models/lm/infer", strings.NewReader(body))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	for deadline := time.Now().Add(5 * time.Second); len(seqOf(t, s, "lm").batch.queue) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first request never reached the queue")
		}
	}
	code, resp, hdr := post(t, hs.URL+"/v2/models/lm/infer", body)
	if code != 503 || hdr.Get("Retry-After") == "" || !strings.Contains(string(resp), "queue full") {
		t.Errorf("full queue: %d %v %s, want 503 with Retry-After", code, hdr, resp)
	}
}

// TestDisconnectDropsRow: a request whose client has gone is dropped from
// its batch, and the batch goes on serving others.
func TestDisconnectDropsRow(t *testing.T) {
	s, hs := newTestServer(t, nil, false)
	m := seqOf(t, s, "lm")
	ctx, cancel := context.WithCancel(context.Background())
	j := &job[*seqWork]{ctx: ctx, rows: 1, work: &seqWork{seqs: []*schedule.Sequence{{Tokens: make([]int64, 40000)}}}}
	if err := m.batch.submit(j); err != nil {
		t.Fatal(err)
	}
	cancel()
	s.Start()
	select {
	case err := <-j.done:
		if err != context.Canceled {
			t.Errorf("dropped job: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("canceled job never finished")
	}
	if code, body, _ := post(t, hs.URL+"/v2/models/lm/infer", `{"inputs": [`+tokensJSON([][]int64{{1}})+`]}`); code != 200 {
		t.Errorf("after a disconnect: %d %s", code, body)
	}
}

// TestDrain: Stop lets a request already queued finish.
func TestDrain(t *testing.T) {
	s, hs := newTestServer(t, nil, true)
	done := make(chan int)
	go func() {
		code, _, _ := post(t, hs.URL+"/v2/models/lm/infer", `{"inputs": [`+tokensJSON([][]int64{make([]int64, 2000)})+`]}`)
		done <- code
	}()
	time.Sleep(20 * time.Millisecond)
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 200 && code != 503 {
		t.Errorf("in-flight request during drain: %d", code)
	}
	if code, _, _ := post(t, hs.URL+"/v2/models/lm/infer", `{"inputs": [`+tokensJSON([][]int64{{1}})+`]}`); code != 503 {
		t.Errorf("after Stop: %d, want 503", code)
	}
}

func TestMetrics(t *testing.T) {
	_, hs := newTestServer(t, nil, true)
	post(t, hs.URL+"/v2/models/lm/infer", `{"inputs": [`+tokensJSON([][]int64{{1, 2, 3}})+`]}`)
	post(t, hs.URL+"/v2/models/lm/infer", `{"inputs": [`)
	_, body := get(t, hs.URL+"/metrics")
	for _, want := range []string{
		`rnnserve_requests_total{code="200",endpoint="infer",model="lm",protocol="rest"} 1`,
		`rnnserve_requests_total{code="400",endpoint="infer",model="lm",protocol="rest"} 1`,
		`rnnserve_request_duration_seconds_bucket`, `rnnserve_queue_duration_seconds_count{model="lm"} 1`,
		`rnnserve_compute_duration_seconds_count{model="lm"} 1`, `rnnserve_batch_rows_bucket`,
		`rnnserve_tokens_total{model="lm"} 3`, `rnnserve_steps_total{model="lm"} 3`,
		`rnnserve_inflight_requests{model="lm"} 0`, `rnnserve_live_sequences{model="lm"} 0`,
		`rnnserve_model_dram_bytes_per_inference{model="lm",schedule="A+"}`,
		`rnnserve_model_working_set_bytes{model="lm",schedule="A"}`, `rnnserve_model_dre{model="bi",schedule="A+"}`,
		`go_goroutines`, `process_cpu_seconds_total`, `rnnserve_model_info{batching="true",model="lm",schedule="cellular"} 1`, `rnnserve_model_info{batching="false",model="bi",schedule="A"} 1`, `rnnserve_model_traffic_steps{model="lm"} 10`, `rnnserve_model_dre{model="lm",schedule="cellular"}`,
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestLoadtestRepository: the load test's models (configs/loadtest) load.
func TestLoadtestRepository(t *testing.T) {
	entries, err := LoadRepository(os.DirFS("../configs/loadtest"))
	if err != nil {
		t.Fatal(err)
	}
	hidden := map[string]int{}
	for _, e := range entries {
		hidden[e.Name] = e.Model.Net.Hidden
	}
	if hidden["lstm512"] != 512 || hidden["lstm2048"] != 2048 {
		t.Errorf("load test models %v", hidden)
	}
}

// quietLog keeps the servers of tests from logging.
var quietLog = slog.New(slog.DiscardHandler)

// TestLanesShareWork: jobs queued together spread over the lanes (each
// admits only while no other lane has fewer rows), so both batches, and
// cores, work at once.
func TestLanesShareWork(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) { o.Batching.Workers = 2 }, false)
	m := seqOf(t, s, "lm")
	var jobs []*job[*seqWork]
	steps := 40000
	if invariants.Enabled {
		steps = 4000 // every step checked against its regions takes some 20 times as long
	}
	for range 20 {
		j := &job[*seqWork]{ctx: context.Background(), rows: 1, work: &seqWork{seqs: []*schedule.Sequence{{Tokens: make([]int64, steps)}}}}
		if err := m.batch.submit(j); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	s.Start()
	for _, j := range jobs {
		if err := <-j.done; err != nil {
			t.Fatal(err)
		}
	}
	// Each lane takes in jobs only up to its share of the work in sight
	// (10 of the 20 at first), so neither takes them all unless the
	// other's goroutine waits for a core through that whole first batch:
	// jobs of 40000 steps make that wait some 0.1 s (with 400 steps, 2 ms,
	// a run of the whole suite on two cores once saw a 19:1 split).
	a, b := m.batch.lanes[0].admitted.Load(), m.batch.lanes[1].admitted.Load()
	if a+b != int64(len(jobs)) || a < 5 || b < 5 {
		t.Errorf("lanes took in %d and %d of the %d jobs, want them split", a, b, len(jobs))
	}
}

// TestSoloAndBatchedTogether: concurrent requests, some run as solo plans
// in their handlers and some stepped in lanes, all get the reference
// final state, with one lane (a solo plan and the lane share one core
// token) and with two.
func TestSoloAndBatchedTogether(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprint("workers=", workers), func(t *testing.T) {
			s, hs := newTestServer(t, func(o *Options) { o.Batching.Workers = workers }, false)
			seqOf(t, s, "lm").alwaysStep = false
			s.Start()
			r := rand.New(rand.NewPCG(uint64(workers), 9))
			var wg sync.WaitGroup
			errs := make(chan string, 40)
			for i := range 40 {
				toks := make([]int64, 1+r.IntN(60))
				for k := range toks {
					toks[k] = r.Int64N(256)
				}
				want := reference(t, s, "lm", [][]int64{toks}, nil, nil).HN
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := http.Post(hs.URL+"/v2/models/lm/infer", "application/json",
						strings.NewReader(`{"inputs": [`+tokensJSON([][]int64{toks})+`], "outputs": [{"name": "hidden"}]}`))
					if err != nil {
						errs <- err.Error()
						return
					}
					defer resp.Body.Close()
					var out struct {
						Outputs []struct {
							Data []float64 `json:"data"`
						} `json:"outputs"`
					}
					if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || len(out.Outputs) != 1 {
						errs <- fmt.Sprintf("request %d: status %d, %v", i, resp.StatusCode, err)
						return
					}
					for k, v := range out.Outputs[0].Data {
						if math.Abs(v-float64(want[k])) > 1e-5 {
							errs <- fmt.Sprintf("request %d: hidden[%d] = %v, want %v", i, k, v, want[k])
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Error(e)
			}
			m := seqOf(t, s, "lm")
			solo := testutil.ToFloat64(m.metrics.solo)
			steps := testutil.ToFloat64(m.metrics.steps)
			t.Logf("%v solo plans, %v batched steps", solo, steps)
			// A lane gives its core back when it next finds itself idle.
			for deadline := time.Now().Add(5 * time.Second); len(m.cores) != 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d core tokens still held after every request finished", len(m.cores))
				}
			}
		})
	}
}

// TestRequestLargerThanBatch: a request with more rows than a batch holds
// runs as its own plan instead of waiting for room that never comes.
func TestRequestLargerThanBatch(t *testing.T) {
	s, hs := newTestServer(t, func(o *Options) { o.Batching.MaxRows = 2 }, true)
	tokens := [][]int64{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}
	code, resp, _ := post(t, hs.URL+"/v2/models/lm/infer", `{"inputs": [`+tokensJSON(tokens)+`], "outputs": [{"name": "hidden"}]}`)
	if code != 200 {
		t.Fatalf("%d %s", code, resp)
	}
	want := reference(t, s, "lm", tokens, nil, nil).HN // [layer][b][16]
	got := parseOutputs(t, resp)["hidden"]             // [b][layer][16]
	for b := range 3 {
		for l := range 2 {
			near(t, "hidden", got[(b*2+l)*16:(b*2+l+1)*16], want[(l*3+b)*16:(l*3+b+1)*16])
		}
	}
}

// TestWiden: a plan goes wide only when every other core slot is free, and
// gives the slots back.
func TestWiden(t *testing.T) {
	s, _ := newTestServer(t, nil, false)
	m := seqOf(t, s, "lm")
	if m.form.Load().wide == nil {
		t.Skipf("lm runs %v: no wide form on %d core(s)", choice.Of(m.form.Load().prog), runtime.GOMAXPROCS(0))
	}
	slots := newCoreSlots(3)
	slots.tryTake() // the caller's own
	prog, release := m.widen(slots)
	if release == nil || len(slots) != 3 || prog != m.form.Load().wide {
		t.Fatalf("all free: wide %v, %d slots held, the wide program %v", release != nil, len(slots), prog == m.form.Load().wide)
	}
	release()
	if len(slots) != 1 {
		t.Fatalf("after release %d slots held, want 1", len(slots))
	}
	slots.tryTake() // another request holds a core
	if prog, release := m.widen(slots); release != nil || len(slots) != 2 || prog != m.form.Load().prog {
		t.Fatalf("one busy: wide %v, %d slots held, the one-core program %v", release != nil, len(slots), prog == m.form.Load().prog)
	}
}
