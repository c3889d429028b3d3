package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	triton "github.com/sunhailin-Leo/triton-service-go/v2/nvidia_inferenceserver"
	sse "github.com/tmaxmax/go-sse"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The conformance suite drives the real server binary with a third-party
// Triton client, github.com/sunhailin-Leo/triton-service-go/v2 (from the Go
// module proxy; go.mod pins it), the way its users call Triton. Every case
// runs over every transport that transports() returns: HTTP here; a gRPC
// transport (the same client built on a grpc.ClientConn, whose methods
// then speak gRPC) implements the transport interface and is added to
// that list, and the cases run over it unchanged.

// transport is one way to reach the server through the third-party
// client.
type transport interface {
	name() string
	// client is the Triton client; its health, metadata, statistics,
	// index and config calls use this transport.
	client() *triton.TritonClientService
	// infer runs one inference; params are request parameters.
	infer(ctx context.Context, model string, in []tensorIn, outs []outputReq, params map[string]any) ([]tensorOut, error)
	// load and unload a model of the server's repository.
	load(ctx context.Context, model string) error
	unload(ctx context.Context, model string) error
	// stream generates maxTokens tokens greedily from prompt, streamed,
	// and returns their ids and the finish reason.
	stream(ctx context.Context, model, prompt string, maxTokens int) ([]int64, string, error)
	// rawJSON fetches a JSON document of the REST API (config,
	// statistics) for schema checks; a transport without REST returns
	// nil, and the case skips the check.
	rawJSON(ctx context.Context, path string) ([]byte, error)
}

// tensorIn is an input tensor; binary asks for Triton's binary tensor
// data where the transport has the choice.
type tensorIn struct {
	name, datatype string
	shape          []int64
	ints           []int64
	bytes          [][]byte
	binary         bool
}

// outputReq is a requested output.
type outputReq struct {
	name   string
	binary bool
	params map[string]any
}

// tensorOut is an output as the client decoded it.
type tensorOut struct {
	name, datatype string
	shape          []int64
	floats         []float32
	ints           []int64
	bytes          [][]byte
}

// conformanceEnv is the server under test.
type conformanceEnv struct {
	base string // http://ADDR
	grpc string // its gRPC address
	repo string // its model repository directory
}

// transports are the transports every case runs over.
func (e *conformanceEnv) transports(t *testing.T) []transport {
	return []transport{newHTTPTransport(e.base), newGRPCTransport(t, e.grpc)}
}

// TestConformance builds cmd/serve, serves a repository (the bundled
// byte LM and TreeLSTM and a small spare LSTM) and runs every case over
// every transport.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test builds and runs the server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout+runTimeout) // serveRepository builds first
	defer cancel()
	var repo string
	addr, grpcAddr := serveRepository(ctx, t, func(root, dir, r string) []string {
		for _, m := range []string{"bytelm", "treelstm"} {
			copyDir(t, filepath.Join(root, "models", "bundled", m), filepath.Join(r, m))
		}
		repo = r
		return nil
	})
	env := &conformanceEnv{base: "http://" + addr, grpc: grpcAddr, repo: repo}
	for _, tr := range env.transports(t) {
		for _, c := range conformanceCases {
			t.Run(tr.name()+"/"+c.name, func(t *testing.T) { c.run(ctx, t, tr, env) })
		}
	}
}

// conformanceCases run over every transport.
var conformanceCases = []struct {
	name string
	run  func(ctx context.Context, t *testing.T, tr transport, env *conformanceEnv)
}{
	{"health", caseHealth},
	{"metadata", caseMetadata},
	{"infer", caseInfer},
	{"infer_bytes", caseInferBytes},
	{"sequence", caseSequence},
	{"statistics", caseStatistics},
	{"config", caseConfig},
	{"repository", caseRepository},
	{"generate_stream", caseStream},
}

func caseHealth(ctx context.Context, t *testing.T, tr transport, _ *conformanceEnv) {
	c := tr.client()
	if ok, err := c.CheckServerAlive(ctx); !ok || err != nil {
		t.Errorf("live: %v %v", ok, err)
	}
	if ok, err := c.CheckServerReady(ctx); !ok || err != nil {
		t.Errorf("ready: %v %v", ok, err)
	}
	if ok, err := c.CheckModelReady(ctx, "bytelm", "1"); !ok || err != nil {
		t.Errorf("bytelm ready: %v %v", ok, err)
	}
	if ok, err := c.CheckModelReady(ctx, "bytelm", "2"); ok || err == nil {
		t.Errorf("bytelm version 2 ready: %v %v", ok, err)
	}
	if ok, err := c.CheckModelReady(ctx, "nope", "1"); ok || err == nil {
		t.Errorf("unknown model ready: %v %v", ok, err)
	}
}

func caseMetadata(ctx context.Context, t *testing.T, tr transport, _ *conformanceEnv) {
	c := tr.client()
	md, err := c.ServerMetadata(ctx)
	if err != nil || md.Name != "rnnserve" || !slices.Contains(md.Extensions, "binary_tensor_data") ||
		!slices.Contains(md.Extensions, "model_repository") || !slices.Contains(md.Extensions, "statistics") {
		t.Errorf("server metadata: %+v %v", md, err)
	}
	mm, err := c.ModelMetadataRequest(ctx, "bytelm", "1")
	if err != nil || mm.Name != "bytelm" || !slices.Contains(mm.Versions, "1") || len(mm.Inputs) != 2 ||
		mm.Inputs[0].Name != "tokens" || mm.Inputs[0].Datatype != "INT64" || fmt.Sprint(mm.Inputs[0].Shape) != "[-1 -1]" ||
		mm.Inputs[1].Name != "lengths" || fmt.Sprint(mm.Inputs[1].Shape) != "[-1]" {
		t.Fatalf("model metadata: %+v %v", mm, err)
	}
	outs := map[string]string{}
	for _, o := range mm.Outputs {
		outs[o.Name] = fmt.Sprint(o.Datatype, o.Shape)
	}
	if outs["hidden"] != "FP32[-1 2 192]" || outs["logits"] != "FP32[-1 -1 256]" {
		t.Errorf("outputs %v", outs)
	}
}

// prompt are the tokens of a byte-level prompt.
func prompt(s string) []int64 {
	ids := make([]int64, len(s))
	for i := range len(s) {
		ids[i] = int64(s[i])
	}
	return ids
}

func caseInfer(ctx context.Context, t *testing.T, tr transport, _ *conformanceEnv) {
	toks := append(prompt("The license"), prompt("Permission!")...)
	outs := func(binary bool) []outputReq {
		return []outputReq{{name: "hidden", binary: binary}, {name: "logits", binary: binary, params: map[string]any{"last_step": true}},
			{name: "top_k", binary: binary, params: map[string]any{"k": 3, "last_step": true}},
			{name: "probs", binary: binary, params: map[string]any{"last_step": true, "classification": 2}}}
	}
	in := func(binary bool) []tensorIn {
		return []tensorIn{{name: "tokens", datatype: "INT64", shape: []int64{2, 11}, ints: toks, binary: binary}}
	}
	jsonOut, err := tr.infer(ctx, "bytelm", in(false), outs(false), nil)
	if err != nil {
		t.Fatalf("JSON: %v", err)
	}
	byName := map[string]tensorOut{}
	for _, o := range jsonOut {
		byName[o.name] = o
	}
	if h := byName["hidden"]; fmt.Sprint(h.shape) != "[2 2 192]" || len(h.floats) != 2*2*192 {
		t.Fatalf("hidden %v with %d values", h.shape, len(h.floats))
	}
	if k := byName["top_k"]; fmt.Sprint(k.shape) != "[2 1 3]" || len(k.ints) != 6 {
		t.Fatalf("top_k %v %v", k.shape, k.ints)
	}
	// classification: "probability:index" of the two likeliest tokens, the
	// first of which is top_k's first.
	cls := byName["probs"]
	if cls.datatype != "BYTES" || fmt.Sprint(cls.shape) != "[2 1 2]" || len(cls.bytes) != 4 ||
		!strings.HasSuffix(string(cls.bytes[0]), ":"+strconv.FormatInt(byName["top_k"].ints[0], 10)) {
		t.Errorf("classification %s %v %q, top_k %v", cls.datatype, cls.shape, cls.bytes, byName["top_k"].ints)
	}
	for _, mode := range []struct {
		what          string
		inBin, outBin bool
	}{{"binary outputs", false, true}, {"binary input", true, false}, {"binary both", true, true}} {
		got, err := tr.infer(ctx, "bytelm", in(mode.inBin), outs(mode.outBin), nil)
		if err != nil {
			t.Fatalf("%s: %v", mode.what, err)
		}
		sameOutputs(t, mode.what, got, jsonOut)
	}
	if _, err := tr.infer(ctx, "bytelm", []tensorIn{{name: "tokens", datatype: "INT64", shape: []int64{1, 2}, ints: []int64{1, 256}}}, nil, nil); err == nil {
		t.Error("a token outside the vocabulary was accepted")
	}
}

// sameOutputs fails unless two sets of outputs are bit-identical: the
// same request answered over different transports or encodings.
func sameOutputs(t *testing.T, what string, got, want []tensorOut) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d outputs, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.name != w.name || g.datatype != w.datatype || fmt.Sprint(g.shape) != fmt.Sprint(w.shape) || len(g.floats) != len(w.floats) ||
			fmt.Sprint(g.ints) != fmt.Sprint(w.ints) || fmt.Sprintf("%q", g.bytes) != fmt.Sprintf("%q", w.bytes) {
			t.Fatalf("%s: output %s %s %v differs from %s %s %v", what, g.name, g.datatype, g.shape, w.name, w.datatype, w.shape)
		}
		for k := range g.floats {
			if math.Float32bits(g.floats[k]) != math.Float32bits(w.floats[k]) {
				t.Fatalf("%s: %s[%d] = %v, want %v", what, g.name, k, g.floats[k], w.floats[k])
			}
		}
	}
}

func caseInferBytes(ctx context.Context, t *testing.T, tr transport, _ *conformanceEnv) {
	// (3 + 4) * 5 = 35 and 7 - 9 = -2: classes 5 and 8 (mod 10).
	trees := [][]byte{[]byte("(((3) (+ (4))) (* (5)))"), []byte("((7) (- (9)))")}
	for _, binary := range []bool{false, true} {
		out, err := tr.infer(ctx, "treelstm", []tensorIn{{name: "trees", datatype: "BYTES", shape: []int64{2}, bytes: trees, binary: binary}},
			[]outputReq{{name: "class", binary: binary}}, nil)
		if err != nil {
			t.Fatalf("binary %v: %v", binary, err)
		}
		if len(out) != 1 || fmt.Sprint(out[0].ints) != "[5 8]" {
			t.Errorf("binary %v: %+v, want classes [5 8]", binary, out)
		}
	}
}

func caseSequence(ctx context.Context, t *testing.T, tr transport, _ *conformanceEnv) {
	text := prompt("Copyright (C) the authors of this software")
	id := "conformance-" + tr.name()
	parts := [][]int64{text[:10], text[10:25], text[25:]}
	var last []tensorOut
	for i, p := range parts {
		params := map[string]any{"sequence_id": id, "sequence_start": i == 0, "sequence_end": i == len(parts)-1}
		out, err := tr.infer(ctx, "bytelm", []tensorIn{{name: "tokens", datatype: "INT64", shape: []int64{1, int64(len(p))}, ints: p}},
			[]outputReq{{name: "hidden"}}, params)
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		last = out
	}
	whole, err := tr.infer(ctx, "bytelm", []tensorIn{{name: "tokens", datatype: "INT64", shape: []int64{1, int64(len(text))}, ints: text}},
		[]outputReq{{name: "hidden"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range last[0].floats {
		if math.Abs(float64(v-whole[0].floats[k])) > 1e-5 {
			t.Fatalf("hidden[%d]: %v in pieces, %v whole", k, v, whole[0].floats[k])
		}
	}
	_, err = tr.infer(ctx, "bytelm", []tensorIn{{name: "tokens", datatype: "INT64", shape: []int64{1, 1}, ints: []int64{1}}},
		nil, map[string]any{"sequence_id": id})
	if err == nil || !strings.Contains(err.Error(), "sequence ended") {
		t.Errorf("a request for the ended sequence: %v", err)
	}
}

func caseStatistics(ctx context.Context, t *testing.T, tr transport, _ *conformanceEnv) {
	if _, err := tr.infer(ctx, "bytelm", []tensorIn{{name: "tokens", datatype: "INT64", shape: []int64{3, 2}, ints: []int64{1, 2, 3, 4, 5, 6}}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	st, err := tr.client().ModelInferStats(ctx, "bytelm", "1")
	if err != nil || len(st.ModelStats) != 1 {
		t.Fatalf("stats: %+v %v", st, err)
	}
	ms := st.ModelStats[0]
	is := ms.InferenceStats
	if ms.Name != "bytelm" || ms.Version != "1" || ms.InferenceCount < 3 || ms.ExecutionCount == 0 || ms.LastInference == 0 ||
		is == nil || is.Success.Count == 0 || is.Success.Ns == 0 || is.ComputeInfer.Count == 0 || is.Queue.Count == 0 {
		t.Errorf("stats %+v", ms)
	}
	// Every successful request, generations included, in every phase.
	if n := is.Success.Count; is.Queue.Count != n || is.ComputeInput.Count != n || is.ComputeInfer.Count != n || is.ComputeOutput.Count != n {
		t.Errorf("success %d, queue %d, compute_input %d, compute_infer %d, compute_output %d: Triton's counts agree",
			n, is.Queue.Count, is.ComputeInput.Count, is.ComputeInfer.Count, is.ComputeOutput.Count)
	}
	var all triton.ModelStatisticsResponse
	if !inTritonSchema(ctx, t, tr, "/v2/models/stats", &all, func(doc map[string]any) {
		for _, m := range doc["model_stats"].([]any) {
			delete(m.(map[string]any), "rnnserve")
		}
	}) {
		return
	}
	if len(all.ModelStats) != 3 {
		t.Errorf("statistics of %d models, want 3", len(all.ModelStats))
	}
}

// inTritonSchema fetches a REST JSON document, takes rnnserve's own keys
// out of it (strip), and parses the rest into a Triton protobuf message
// with protojson, which refuses unknown fields: every other field name
// must be one of Triton's. It reports false when the transport has no
// REST documents.
func inTritonSchema(ctx context.Context, t *testing.T, tr transport, path string, msg proto.Message, strip func(map[string]any)) bool {
	t.Helper()
	raw, err := tr.rawJSON(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if raw == nil {
		return false
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	strip(doc)
	stripped, _ := json.Marshal(doc)
	if err := protojson.Unmarshal(stripped, msg); err != nil {
		t.Fatalf("%s in Triton's schema: %v\n%s", path, err, raw)
	}
	return true
}

// checkFacts reads rnnserve's model facts from a configuration's
// parameters, a field of Triton's own ModelConfig: "rnn" (the metadata's
// rnn object) and "rnnserve", each JSON.
func checkFacts(t *testing.T, where string, cfg *triton.ModelConfig) {
	t.Helper()
	var rnn struct {
		Cell   string `json:"cell"`
		Hidden int    `json:"hidden_size"`
		Sched  string `json:"schedule"`
	}
	var own struct {
		Kind string `json:"kind"`
	}
	p := cfg.GetParameters()
	if err := json.Unmarshal([]byte(p["rnn"].GetStringValue()), &rnn); err != nil || rnn.Cell != "lstm" || rnn.Hidden < 1 || rnn.Sched == "" {
		t.Errorf("%s: parameters[\"rnn\"] %q (%v): want the model's facts", where, p["rnn"].GetStringValue(), err)
	}
	if err := json.Unmarshal([]byte(p["rnnserve"].GetStringValue()), &own); err != nil || own.Kind != "sequence" {
		t.Errorf("%s: parameters[\"rnnserve\"] %q (%v)", where, p["rnnserve"].GetStringValue(), err)
	}
}

func caseConfig(ctx context.Context, t *testing.T, tr transport, _ *conformanceEnv) {
	resp, err := tr.client().ModelConfiguration(ctx, "bytelm", "1")
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	if tr.name() == "grpc" {
		checkFacts(t, "gRPC ModelConfig", resp.GetConfig())
	}
	for _, c := range []struct{ model, input, dtype string }{{"bytelm", "tokens", "TYPE_INT64"}, {"treelstm", "trees", "TYPE_STRING"}} {
		var cfg triton.ModelConfig
		if !inTritonSchema(ctx, t, tr, "/v2/models/"+c.model+"/config", &cfg, func(doc map[string]any) {
			if _, ok := doc["rnnserve"].(map[string]any)["spec"]; !ok {
				t.Errorf("%s: no rnnserve spec", c.model)
			}
			delete(doc, "rnnserve")
		}) {
			return
		}
		inputs := 1
		if c.model == "bytelm" {
			inputs = 2 // and the optional lengths
		}
		if cfg.Name != c.model || cfg.Backend != "rnnserve" || cfg.MaxBatchSize < 1 || len(cfg.Input) != inputs ||
			cfg.Input[0].Name != c.input || cfg.Input[0].DataType.String() != c.dtype ||
			inputs == 2 && (cfg.Input[1].Name != "lengths" || !cfg.Input[1].Optional) {
			t.Errorf("%s: config %v", c.model, &cfg)
		}
		if c.model == "bytelm" && cfg.GetSequenceBatching() == nil {
			t.Errorf("bytelm keeps sequences but its config has no sequence_batching")
		}
		if c.model == "bytelm" {
			checkFacts(t, "REST config", &cfg)
		}
	}
}

func caseRepository(ctx context.Context, t *testing.T, tr transport, _ *conformanceEnv) {
	c := tr.client()
	state := func() map[string]string {
		idx, err := c.ModelIndex(ctx, "", false)
		if err != nil {
			t.Fatalf("index: %v", err)
		}
		m := map[string]string{}
		for _, e := range idx.Models {
			m[e.Name] = e.State
		}
		return m
	}
	if s := state(); s["bytelm"] != "READY" || s["treelstm"] != "READY" || s["spare"] != "READY" {
		t.Fatalf("index %v", s)
	}
	spare := []tensorIn{{name: "tokens", datatype: "INT64", shape: []int64{1, 3}, ints: []int64{1, 2, 3}}}
	if _, err := tr.infer(ctx, "spare", spare, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := tr.unload(ctx, "spare"); err != nil {
		t.Fatalf("unload: %v", err)
	}
	if s := state(); s["spare"] != "UNAVAILABLE" {
		t.Errorf("after unload: %v", s)
	}
	if ok, _ := c.CheckModelReady(ctx, "spare", "1"); ok {
		t.Error("an unloaded model is ready")
	}
	if _, err := tr.infer(ctx, "spare", spare, nil, nil); err == nil {
		t.Error("an unloaded model answered")
	}
	if err := tr.load(ctx, "spare"); err != nil {
		t.Fatalf("load: %v", err)
	}
	if ok, err := c.CheckModelReady(ctx, "spare", "1"); !ok || err != nil {
		t.Errorf("after load: ready %v %v", ok, err)
	}
	if _, err := tr.infer(ctx, "spare", spare, nil, nil); err != nil {
		t.Errorf("after load: %v", err)
	}
	if err := tr.load(ctx, "../bytelm"); err == nil {
		t.Error("a load of ../bytelm succeeded")
	}
	if err := tr.load(ctx, "missing"); err == nil {
		t.Error("a load of a model the repository lacks succeeded")
	}
}

func caseStream(ctx context.Context, t *testing.T, tr transport, _ *conformanceEnv) {
	toks, reason, err := tr.stream(ctx, "bytelm", "This program is free software", 12)
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 12 || reason != "length" {
		t.Fatalf("%d tokens, finish reason %q", len(toks), reason)
	}
	// Greedy: each token is the argmax after the text so far.
	text := prompt("This program is free software")
	for i, tok := range toks {
		out, err := tr.infer(ctx, "bytelm", []tensorIn{{name: "tokens", datatype: "INT64", shape: []int64{1, int64(len(text))}, ints: text}},
			[]outputReq{{name: "top_k", params: map[string]any{"k": 1, "last_step": true}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out[0].ints[0] != tok {
			t.Fatalf("token %d: streamed %d, argmax %d", i, tok, out[0].ints[0])
		}
		text = append(text, tok)
	}
}

// httpTransport is the third-party client over HTTP.
type httpTransport struct {
	base string
	c    *triton.TritonClientService
}

// newHTTPTransport builds the client as a user would, with one addition:
// the client takes an infer body as bytes and cannot set headers, so for
// binary tensor inputs the fasthttp client it runs on gets a transport
// (fasthttp's RoundTripper hook) that adds Triton's
// Inference-Header-Content-Length, the length of the JSON object that
// starts the body.
func newHTTPTransport(base string) *httpTransport {
	hc := &fasthttp.Client{Transport: headerLengthTransport{}, ReadTimeout: 20 * time.Second, WriteTimeout: 20 * time.Second}
	return &httpTransport{base: base, c: triton.NewTritonClientWithOnlyHTTP(base, hc, triton.WithTimeout(20*time.Second))}
}

func (h *httpTransport) name() string                        { return "http" }
func (h *httpTransport) client() *triton.TritonClientService { return h.c }

// headerLengthTransport sets Inference-Header-Content-Length on infer
// requests whose body has data after its JSON object.
type headerLengthTransport struct{}

func (headerLengthTransport) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	if body := req.Body(); bytes.HasSuffix(req.URI().Path(), []byte("/infer")) {
		if n := jsonLength(body); n < len(body) {
			req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(n))
		}
	}
	return fasthttp.DefaultTransport.RoundTrip(hc, req, resp)
}

// jsonLength is the length of the JSON value body starts with.
func jsonLength(body []byte) int {
	dec := json.NewDecoder(bytes.NewReader(body))
	var v json.RawMessage
	if dec.Decode(&v) != nil {
		return len(body)
	}
	return int(dec.InputOffset())
}

func (h *httpTransport) infer(ctx context.Context, model string, in []tensorIn, outs []outputReq, params map[string]any) ([]tensorOut, error) {
	var raw []byte
	req := map[string]any{}
	var inputs []any
	for _, t := range in {
		ti := map[string]any{"name": t.name, "datatype": t.datatype, "shape": t.shape}
		var data []byte
		switch {
		case t.binary:
			data = rawTensor(t)
		case t.bytes != nil:
			s := make([]string, len(t.bytes))
			for i, b := range t.bytes {
				s[i] = string(b)
			}
			ti["data"] = s
		default:
			ti["data"] = t.ints
		}
		if t.binary {
			ti["parameters"] = map[string]any{"binary_data_size": len(data)}
			raw = append(raw, data...)
		}
		inputs = append(inputs, ti)
	}
	req["inputs"] = inputs
	var outputs []any
	for _, o := range outs {
		p := map[string]any{}
		for k, v := range o.params {
			p[k] = v
		}
		if o.binary {
			p["binary_data"] = true
		}
		outputs = append(outputs, map[string]any{"name": o.name, "parameters": p})
	}
	if outputs != nil {
		req["outputs"] = outputs
	}
	if params != nil {
		req["parameters"] = params
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	res, err := h.c.ModelHTTPInfer(ctx, append(body, raw...), model, "1", decodeHTTPResponse)
	if err != nil {
		return nil, err
	}
	out := make([]tensorOut, len(res))
	for i, r := range res {
		out[i] = r.(tensorOut)
	}
	return out, nil
}

// decodeHTTPResponse is the client's decoder callback: it gets the
// response body only, so it finds the JSON object's end itself and reads
// binary outputs after it.
func decodeHTTPResponse(response any, _ ...any) ([]any, error) {
	body := response.([]byte)
	n := jsonLength(body)
	var resp struct {
		Outputs []struct {
			Name       string          `json:"name"`
			Datatype   string          `json:"datatype"`
			Shape      []int64         `json:"shape"`
			Parameters map[string]int  `json:"parameters"`
			Data       json.RawMessage `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(body[:n], &resp); err != nil {
		return nil, err
	}
	rest := body[n:]
	var out []any
	for _, o := range resp.Outputs {
		t := tensorOut{name: o.Name, datatype: o.Datatype, shape: o.Shape}
		if size, ok := o.Parameters["binary_data_size"]; ok {
			if size > len(rest) {
				return nil, fmt.Errorf("output %s: %d bytes of binary data, %d left", o.Name, size, len(rest))
			}
			raw := rest[:size]
			rest = rest[size:]
			if err := fromRaw(&t, raw); err != nil {
				return nil, err
			}
			out = append(out, t)
			continue
		}
		switch o.Datatype {
		case "FP32":
			var nums []json.Number
			if err := json.Unmarshal(o.Data, &nums); err != nil {
				return nil, err
			}
			for _, x := range nums {
				f, err := strconv.ParseFloat(string(x), 32)
				if err != nil {
					return nil, err
				}
				t.floats = append(t.floats, float32(f))
			}
		case "INT64":
			if err := json.Unmarshal(o.Data, &t.ints); err != nil {
				return nil, err
			}
		case "BYTES":
			var s []string
			if err := json.Unmarshal(o.Data, &s); err != nil {
				return nil, err
			}
			for _, x := range s {
				t.bytes = append(t.bytes, []byte(x))
			}
		}
		out = append(out, t)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%d bytes after the outputs", len(rest))
	}
	return out, nil
}

func (h *httpTransport) load(ctx context.Context, model string) error {
	_, err := h.c.ModelLoadWithHTTP(ctx, model, nil)
	return err
}

func (h *httpTransport) unload(ctx context.Context, model string) error {
	_, err := h.c.ModelUnloadWithHTTP(ctx, model, nil)
	return err
}

// stream posts to generate_stream and reads the Server-Sent Events with
// a third-party SSE parser (github.com/tmaxmax/go-sse).
func (h *httpTransport) stream(ctx context.Context, model, text string, maxTokens int) ([]int64, string, error) {
	body, _ := json.Marshal(map[string]any{"text_input": text, "parameters": map[string]any{"max_tokens": maxTokens, "temperature": 0}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/v2/models/"+model+"/generate_stream", bytes.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		return nil, "", fmt.Errorf("generate_stream: %s %s", resp.Status, b)
	}
	var toks []int64
	reason := ""
	for ev, err := range sse.Read(resp.Body, nil) {
		if err != nil {
			return nil, "", err
		}
		var g struct {
			ModelName  string `json:"model_name"`
			TextOutput string `json:"text_output"`
			Error      string `json:"error"`
			RNNServe   struct {
				Tokens       []int64 `json:"tokens"`
				FinishReason string  `json:"finish_reason"`
			} `json:"rnnserve"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &g); err != nil {
			return nil, "", fmt.Errorf("event %q: %w", ev.Data, err)
		}
		if g.Error != "" {
			return nil, "", fmt.Errorf("stream error: %s", g.Error)
		}
		if g.ModelName != model {
			return nil, "", fmt.Errorf("event for model %q", g.ModelName)
		}
		toks = append(toks, g.RNNServe.Tokens...)
		reason = g.RNNServe.FinishReason
	}
	return toks, reason, nil
}

func (h *httpTransport) rawJSON(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s %s", path, resp.Status, b)
	}
	return b, err
}

// copyDir copies a directory's files (not sub-directories).
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(to, e.Name()), string(data))
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
