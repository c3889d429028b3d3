package wire

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rnnserve/internal/fuzzbound"
	"rnnserve/server/api"
	"rnnserve/server/internal/infer"
	"rnnserve/server/internal/limits"
)

// decode runs DecodeInfer on body (with hdrLen, -1 for none) for a
// request to model m.
func decode(body string, hdrLen int64) (*infer.Request, error) {
	r := &infer.Request{Model: "m"}
	return r, DecodeInfer(strings.NewReader(body), hdrLen, 1<<20, nil, r)
}

// TestDecodeInfer: a JSON body becomes the Request it describes: typed
// tensors, the sequence controls and binary_data_output taken out of the
// parameters, the outputs' binary and classification choices.
func TestDecodeInfer(t *testing.T) {
	r, err := decode(`{"id": "7", "model_name": "m", "model_version": "1",
		"parameters": {"binary_data_output": true, "sequence_id": 3, "sequence_start": true, "executor": "batched"},
		"inputs": [
			{"name": "a", "datatype": "INT32", "shape": [2, 2], "data": [[1, -2], [3, 4]]},
			{"name": "b", "datatype": "FP32", "shape": [3], "data": [0.5, -1e-3, 3]},
			{"name": "c", "datatype": "BYTES", "shape": [2], "data": ["x", "\u00e9"]},
			{"name": "d", "datatype": "UINT8", "shape": [1], "data": [255]}],
		"outputs": [{"name": "y", "parameters": {"binary_data": false, "classification": 3, "k": 2}}, {"name": "z"}]}`, -1)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != "7" || r.Version != "1" || !r.BinaryOutput || r.Sequence != (infer.SequenceControl{ID: "3", Start: true}) ||
		len(r.Parameters) != 1 || r.Parameters["executor"] != "batched" {
		t.Errorf("request: %+v", r)
	}
	if len(r.Inputs) != 4 {
		t.Fatalf("%d inputs", len(r.Inputs))
	}
	a, b, c, d := r.Inputs[0], r.Inputs[1], r.Inputs[2], r.Inputs[3]
	if a.Name != "a" || a.Datatype != "INT32" || len(a.Shape) != 2 || !slices.Equal(a.Int64, []int64{1, -2, 3, 4}) {
		t.Errorf("input a: %+v", a)
	}
	if !slices.Equal(b.Float32, []float32{0.5, -1e-3, 3}) {
		t.Errorf("input b: %v", b.Float32)
	}
	if len(c.Bytes) != 2 || string(c.Bytes[0]) != "x" || string(c.Bytes[1]) != "é" {
		t.Errorf("input c: %q", c.Bytes)
	}
	if !slices.Equal(d.Int64, []int64{255}) {
		t.Errorf("input d: %v", d.Int64)
	}
	for i := range r.Inputs {
		if err := r.Inputs[i].Check(); err != nil {
			t.Error(err)
		}
	}
	if len(r.Outputs) != 2 {
		t.Fatalf("%d outputs", len(r.Outputs))
	}
	y, z := r.Outputs[0], r.Outputs[1]
	if y.Name != "y" || y.Binary == nil || *y.Binary || y.Classification != 3 || len(y.Parameters) != 1 || y.Parameters["k"] != int64(2) {
		t.Errorf("output y: %+v", y)
	}
	if z.Name != "z" || z.Binary != nil || z.Classification != 0 || len(z.Parameters) != 0 {
		t.Errorf("output z: %+v", z)
	}
}

// TestDecodeBinary: with Inference-Header-Content-Length, the inputs
// that have binary_data_size read their data after the JSON, in order.
func TestDecodeBinary(t *testing.T) {
	js := `{"inputs": [
		{"name": "t", "datatype": "INT64", "shape": [2], "parameters": {"binary_data_size": 16}},
		{"name": "j", "datatype": "FP32", "shape": [1], "data": [2]},
		{"name": "s", "datatype": "BYTES", "shape": [2], "parameters": {"binary_data_size": 11}}]}`
	raw := binary.LittleEndian.AppendUint64(nil, 5)
	raw = binary.LittleEndian.AppendUint64(raw, math.MaxUint64) // -1
	raw = binary.LittleEndian.AppendUint32(raw, 3)
	raw = append(raw, "abc"...)
	raw = binary.LittleEndian.AppendUint32(raw, 0)
	body := js + string(raw)
	r, err := decode(body, int64(len(js)))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Inputs[0].Int64, []int64{5, -1}) || !slices.Equal(r.Inputs[1].Float32, []float32{2}) ||
		len(r.Inputs[2].Bytes) != 2 || string(r.Inputs[2].Bytes[0]) != "abc" || len(r.Inputs[2].Bytes[1]) != 0 {
		t.Errorf("inputs: %+v", r.Inputs)
	}
	for _, c := range []struct {
		what   string
		body   string
		hdrLen int64
		want   string
		status int
	}{
		{"no header", js, -1, "has binary_data_size but the request has no Inference-Header-Content-Length header", 400},
		{"header short of the JSON", body, int64(len(js)) - 1, "longer than the body, or the JSON object is cut short", 400},
		{"header past the JSON", body, int64(len(js)) + 2, "other data follows it within those bytes", 400},
		{"header past the body", js[:20], 1000, "longer than the body", 400},
		{"header past a whole JSON body", `{"inputs": [{"name": "j", "datatype": "FP32", "shape": [1], "data": [2]}]}`, 1000, "longer than the body", 400},
		{"header over the limit", body, 2 << 20, "over the 1048576-byte body limit", 413},
		{"data cut short", body[:len(body)-3], int64(len(js)), "the body ends after", 400},
		{"data after the tensors", body + "x", int64(len(js)), "data after the binary tensor data", 400},
	} {
		_, err := decode(c.body, c.hdrLen)
		if err == nil || infer.StatusOf(err) != c.status || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (%d), want %d with %q", c.what, err, infer.StatusOf(err), c.status, c.want)
		}
	}
}

// TestDecodeInferRefuses: what a JSON body may not be, each with its
// status and message.
func TestDecodeInferRefuses(t *testing.T) {
	in := func(s string) string { return `{"inputs": [` + s + `]}` }
	for _, c := range []struct {
		body, want string
		status     int
	}{
		{``, "empty body", 400},
		{`{"inputs": [`, "the body ended inside the JSON object", 400},
		{`{} {}`, "data after the request object", 400},
		{`{"inputz": []}`, "unknown field", 400},
		{`{"id": "a", "id": "b"}`, `the key "id" appears twice`, 400},
		{"{\"id\": \"\xff\"}", "not valid UTF-8", 400},
		{`{"model_name": "other"}`, `model_name "other" in the body, but the URL names "m"`, 400},
		{`{"parameters": {"p": null}}`, `parameter "p"`, 400},
		{`{"parameters": {"sequence_end": true}}`, "without sequence_id", 400},
		{in(`{"name": "x", "datatype": "INT64", "shape": [1]}`), "missing data", 400},
		{in(`{"name": "x", "datatype": "INT64", "shape": [1], "data": [1], "parameters": {"binary_data_size": 8}}`), "both data and binary_data_size", 400},
		{in(`{"name": "x", "datatype": "INT64", "shape": [1], "data": [1], "parameters": {"shared_memory_region": "r"}}`), "shared memory is not supported", 400},
		{in(`{"name": "x", "datatype": "INT64", "shape": [1], "data": [1], "parameters": {"other": 1}}`), `unknown parameter "other"`, 400},
		{in(`{"name": "x", "datatype": "INT8", "shape": [1], "data": [128]}`), "not a 8-bit integer", 400},
		{in(`{"name": "x", "datatype": "UINT64", "shape": [1], "data": [9223372036854775808]}`), "not a 64-bit unsigned integer", 400},
		{in(`{"name": "x", "datatype": "FP32", "shape": [1], "data": [1e39]}`), "not a finite float32", 400},
		{in(`{"name": "x", "datatype": "FP32", "shape": [2], "data": [1]}`), "1 values, want 2", 400},
		{in(`{"name": "x", "datatype": "FP32", "shape": [1], "data": [1, 2]}`), "more than 1 values", 400},
		{in(`{"name": "x", "datatype": "FP32", "shape": [1], "data": ["1"]}`), "only numbers", 400},
		{in(`{"name": "x", "datatype": "BYTES", "shape": [1], "data": [1]}`), "only strings", 400},
		{in(`{"name": "x", "datatype": "FP64", "shape": [1], "data": [1]}`), "not supported", 400},
		{in(`{"name": "x", "datatype": "INT64", "shape": [1], "data": [[[[[[[[[1]]]]]]]]]}`), "nested deeper", 400},
		{`{"outputs": [{"name": "y", "parameters": {"classification": -1}}]}`, "classification must be an integer", 400},
		{`{"outputs": [{"name": "y", "parameters": {"binary_data": 1}}]}`, "binary_data must be a boolean", 400},
		{`{"outputs": [{"name": "y", "parameters": {"shared_memory_region": "r"}}]}`, "shared memory is not supported", 400},
	} {
		_, err := decode(c.body, -1)
		if err == nil || infer.StatusOf(err) != c.status || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (%d), want %d with %q", c.body, err, infer.StatusOf(err), c.status, c.want)
		}
	}
}

// TestTensorMemory: a request's decoded tensors are bounded and charged
// as they are decoded, however small the text that asks for them.
func TestTensorMemory(t *testing.T) {
	var charged int64
	m := &TensorMemory{Limit: 1000, Charge: func(n int64) error { charged += n; return nil }}
	if err := m.take("x", 600); err != nil || charged != 600 {
		t.Fatalf("take 600: %v, charged %d", err, charged)
	}
	if err := m.take("x", 401); !errors.Is(err, infer.ErrTooLarge) || charged != 600 {
		t.Errorf("take 401 more: %v, charged %d", err, charged)
	}
	over := errors.New("no room")
	m = &TensorMemory{Limit: 1000, Charge: func(int64) error { return over }}
	if err := m.take("x", 1); err != over {
		t.Errorf("a refused charge: %v", err)
	}
	// 50,000 empty strings in 200 KB of text take 1.2 MB as slices.
	body := `{"inputs": [{"name": "s", "datatype": "BYTES", "shape": [50000], "data": [` + strings.Repeat(`"",`, 49999) + `""]}]}`
	r := &infer.Request{Model: "m"}
	err := DecodeInfer(strings.NewReader(body), -1, int64(len(body)), nil, r)
	if !errors.Is(err, infer.ErrTooLarge) || !strings.Contains(err.Error(), "decoded tensors") {
		t.Errorf("empty strings: %v, want 413 for the decoded tensors", err)
	}
}

// TestDataNesting: JSON tensor data is one flat array or arrays nested
// exactly as the shape says, for numbers and strings alike; anything in
// between is a 400, not read as flat.
func TestDataNesting(t *testing.T) {
	for _, c := range []struct {
		datatype string
		shape    []int64
		data     string
		want     string // "" if accepted
	}{
		{"INT64", []int64{2, 2}, `[1, 2, 3, 4]`, ""},
		{"INT64", []int64{2, 2}, `[[1, 2], [3, 4]]`, ""},
		{"INT64", []int64{2}, `[1, 2]`, ""},
		{"INT64", []int64{}, `[7]`, ""},
		{"INT64", []int64{2, 0}, `[]`, ""},
		{"INT64", []int64{2, 0}, `[[], []]`, ""},
		{"FP32", []int64{1, 2, 2}, `[[[1, 2], [3, 4]]]`, ""},
		{"INT64", []int64{2, 2}, `[[1, 2, 3], [4]]`, "holds 3 elements"},
		{"INT64", []int64{2, 2}, `[[1, 2], [3, 4], []]`, "holds 0 elements"},
		{"INT64", []int64{2, 2}, `[[1, 2], 3, 4]`, "nested as shape"},
		{"INT64", []int64{2, 2}, `[1, 2, [3, 4]]`, "nested as shape"},
		{"INT64", []int64{2, 2}, `[[[1, 2]], [[3, 4]]]`, "nested deeper"},
		{"FP32", []int64{1, 2, 2}, `[[1, 2], [3, 4]]`, "nested as shape"},
		{"FP32", []int64{2, 0}, `[[], [], []]`, "holds 3 elements"},
		{"BYTES", []int64{2, 1}, `["a", "b"]`, ""},
		{"BYTES", []int64{2, 1}, `[["a"], ["b"]]`, ""},
		{"BYTES", []int64{2, 1}, `[["a", "b"]]`, "holds 2 elements"},
		{"BYTES", []int64{2, 1}, `[["a"], "b"]`, "nested as shape"},
		{"BYTES", []int64{2}, `[["a"], ["b"]]`, "nested deeper"},
	} {
		tn := &infer.Tensor{Name: "x", Datatype: c.datatype, Shape: c.shape}
		err := jsonData(tn, api.RawData(c.data), &TensorMemory{Limit: 1 << 20})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %v %s: %v, want it read", c.datatype, c.shape, c.data, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %v %s: %v, want an error with %q", c.datatype, c.shape, c.data, err, c.want)
		}
	}
}

// TestAppendResponse: the hand-written JSON reads back with encoding/json
// as the response it was written from; NaN and infinities are null,
// strings are escaped and invalid UTF-8 becomes U+FFFD; binary outputs
// carry binary_data_size instead of data.
func TestAppendResponse(t *testing.T) {
	resp := &infer.Response{Model: "m\"", Version: "1", ID: "i\n", Outputs: []infer.OutputTensor{
		{Name: "f", Datatype: "FP32", Shape: []int64{5}, Float32: []float32{1.5, -3.4028235e38, 1e-45, float32(math.NaN()), float32(math.Inf(1))}},
		{Name: "i", Datatype: "INT64", Shape: []int64{2, 1}, Int64: []int64{math.MinInt64, 7}},
		{Name: "s", Datatype: "BYTES", Shape: []int64{3}, Bytes: [][]byte{[]byte("a\"\\\x01"), []byte("\xffé"), {}}},
		{Name: "b", Datatype: "FP32", Shape: []int64{2}, Float32: []float32{1, 2}, Binary: true},
	}}
	var got api.InferResponse
	out := appendResponse(nil, resp)
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if got.ModelName != `m"` || got.ModelVersion != "1" || got.ID != "i\n" || len(got.Outputs) != 4 {
		t.Fatalf("%s", out)
	}
	want := [][]any{{1.5, float64(-math.MaxFloat32), float64(math.SmallestNonzeroFloat32), nil, nil},
		{float64(math.MinInt64), 7.0}, {"a\"\\\x01", "\ufffdé", ""}}
	for k, w := range want {
		o, data := got.Outputs[k], got.Outputs[k].Data.([]any)
		if o.Name != resp.Outputs[k].Name || o.Datatype != resp.Outputs[k].Datatype || !slices.Equal(o.Shape, resp.Outputs[k].Shape) || len(data) != len(w) {
			t.Errorf("output %d: %+v", k, o)
			continue
		}
		for i := range w {
			if f, ok := data[i].(float64); ok && k == 0 {
				data[i] = float64(float32(f)) // as a client reads an FP32
			}
			if data[i] != w[i] {
				t.Errorf("output %s element %d: %#v, want %#v", o.Name, i, data[i], w[i])
			}
		}
	}
	if b := got.Outputs[3]; b.Data != nil || b.Parameters["binary_data_size"] != 8.0 {
		t.Errorf("binary output: %+v", b)
	}
	// Every float32 reads back as itself.
	for _, f := range []float32{0, -0.1, 1 / 3.0, math.MaxFloat32, math.SmallestNonzeroFloat32, 16777217} {
		back, err := strconv.ParseFloat(string(appendFloat(nil, f)), 32)
		if err != nil || float32(back) != f {
			t.Errorf("%v writes as %s", f, appendFloat(nil, f))
		}
	}
}

// TestWriteInfer: a response with binary outputs is the JSON header and
// the raw data after it, with Inference-Header-Content-Length; one
// without is JSON; a body of 1 KiB or more is gzip-compressed for a
// client that accepts it, with Vary, and never for one that does not.
func TestWriteInfer(t *testing.T) {
	var rs Responses
	resp := &infer.Response{Model: "m", Version: "1", Outputs: []infer.OutputTensor{
		{Name: "j", Datatype: "INT64", Shape: []int64{1}, Int64: []int64{4}},
		{Name: "b", Datatype: "FP32", Shape: []int64{2}, Float32: []float32{1, 2}, Binary: true},
	}}
	req := httptest.NewRequest("POST", "/", nil)
	w := httptest.NewRecorder()
	rs.WriteInfer(w, req, resp)
	hdr, err := strconv.Atoi(w.Header().Get(HeaderLength))
	body := w.Body.Bytes()
	if err != nil || hdr > len(body) || w.Header().Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("%v %q", w.Header(), body)
	}
	if !bytes.Equal(body[:hdr], appendResponse(nil, resp)) || !bytes.Equal(body[hdr:], resp.Outputs[1].AppendRaw(nil)) {
		t.Errorf("body %q", body)
	}
	if w.Header().Get("Content-Length") != strconv.Itoa(len(body)) || w.Header().Get("Content-Encoding") != "" {
		t.Errorf("headers %v", w.Header())
	}

	big := &infer.Response{Model: "m", Version: "1", Outputs: []infer.OutputTensor{{Name: "y", Datatype: "INT64", Shape: []int64{1000}, Int64: make([]int64, 1000)}}}
	for _, accept := range []string{"gzip", ""} {
		req := httptest.NewRequest("POST", "/", nil)
		if accept != "" {
			req.Header.Set("Accept-Encoding", accept)
		}
		w := httptest.NewRecorder()
		rs.WriteInfer(w, req, big)
		if w.Header().Get(HeaderLength) != "" || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("JSON response headers %v", w.Header())
		}
		got := w.Body.Bytes()
		if accept != "" {
			if w.Header().Get("Content-Encoding") != "gzip" || w.Header().Get("Vary") != "Accept-Encoding" {
				t.Fatalf("accepting gzip: headers %v", w.Header())
			}
			zr, err := gzip.NewReader(bytes.NewReader(got))
			if err != nil {
				t.Fatal(err)
			}
			if got, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		} else if w.Header().Get("Content-Encoding") != "" {
			t.Errorf("not accepting gzip: headers %v", w.Header())
		}
		if !bytes.Equal(got, appendResponse(nil, big)) {
			t.Errorf("Accept-Encoding %q: the body differs from the response", accept)
		}
	}
}

// testBudget is a memory budget of size bytes for bodies up to maxBody.
func testBudget(size, maxBody int64) *limits.Budget {
	return limits.New(size, maxBody, 10*time.Millisecond, prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}), prometheus.NewCounter(prometheus.CounterOpts{Name: "c"}))
}

// TestBody: a body is refused over the limit by its Content-Length
// before it is read, and by its inflated bytes when compressed (a
// compression bomb is not inflated past the limit); an unknown coding is
// 415; what was read (and an inflater's state) is charged to the budget
// until the release.
func TestBody(t *testing.T) {
	const limit = 4096
	budget := testBudget(1<<20, limit)
	read := func(body []byte, enc string, length int64) ([]byte, int64, error) {
		r := httptest.NewRequest("POST", "/", bytes.NewReader(body))
		r.ContentLength = length
		if enc != "" {
			r.Header.Set("Content-Encoding", enc)
		}
		rd, res, err := Body(httptest.NewRecorder(), r, budget, limit, 0)
		defer res.Release()
		if err != nil {
			return nil, 0, err
		}
		got, err := io.ReadAll(rd)
		return got, budget.InUse(), err
	}
	plain := bytes.Repeat([]byte("a"), 3000)
	if got, held, err := read(plain, "", int64(len(plain))); err != nil || !bytes.Equal(got, plain) || held < int64(len(plain)) {
		t.Errorf("plain: %d bytes, %d held, %v", len(got), held, err)
	}
	if budget.InUse() != 0 {
		t.Errorf("%d bytes held after the release", budget.InUse())
	}
	if _, _, err := read(plain, "", limit+1); !errors.Is(err, infer.ErrTooLarge) {
		t.Errorf("Content-Length over the limit: %v", err)
	}
	if _, _, err := read(bytes.Repeat([]byte("a"), limit+1), "", -1); !errors.Is(err, infer.ErrTooLarge) {
		t.Errorf("chunked body over the limit: %v", err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(plain)
	zw.Close()
	got, held, err := read(z.Bytes(), "gzip", int64(z.Len()))
	if err != nil || !bytes.Equal(got, plain) || held < inflaterBytes {
		t.Errorf("gzip: %d bytes, %d held, %v", len(got), held, err)
	}
	z.Reset()
	zw = gzip.NewWriter(&z)
	zw.Write(make([]byte, 10<<20))
	zw.Close()
	if _, _, err := read(z.Bytes(), "gzip", int64(z.Len())); !errors.Is(err, infer.ErrTooLarge) {
		t.Errorf("gzip bomb: %v", err)
	}
	if _, _, err := read([]byte("not gzip"), "gzip", 8); infer.StatusOf(err) != http.StatusBadRequest {
		t.Errorf("bad gzip: %v", err)
	}
	if _, _, err := read(plain, "br", int64(len(plain))); !errors.Is(err, infer.ErrUnsupportedMedia) {
		t.Errorf("br: %v", err)
	}
	if budget.InUse() != 0 {
		t.Errorf("%d bytes held after the releases", budget.InUse())
	}
}

// TestParamsOf: parameters are strings, booleans and numbers; integral
// numbers are int64, or uint64 above its range, others float64.
func TestParamsOf(t *testing.T) {
	p, err := ParamsOf(api.Parameters{"s": json.RawMessage(`"x"`), "b": json.RawMessage(`false`), "i": json.RawMessage(`-3`),
		"u": json.RawMessage(`18446744073709551615`), "f": json.RawMessage(`2.5`), "e": json.RawMessage(`1e3`)})
	if err != nil || p["s"] != "x" || p["b"] != false || p["i"] != int64(-3) || p["u"] != uint64(math.MaxUint64) || p["f"] != 2.5 || p["e"] != 1000.0 {
		t.Errorf("%#v %v", p, err)
	}
	for _, raw := range []string{`null`, `[1]`, `{}`, `1e999`, ``} {
		if _, err := ParamsOf(api.Parameters{"p": json.RawMessage(raw)}); !errors.Is(err, infer.ErrBadRequest) {
			t.Errorf("%q: %v", raw, err)
		}
	}
}

// FuzzDecodeInfer feeds arbitrary bodies, with or without a header
// length, to the REST request decoder: each either fails with a 400 or a
// 413, or yields inputs whose data matches their datatype and shape;
// nothing panics, and the decoded tensors stay within their bound.
func FuzzDecodeInfer(f *testing.F) {
	f.Add([]byte(`{"inputs": [{"name": "a", "datatype": "INT32", "shape": [2, 2], "data": [[1, -2], [3, 4]]}], "outputs": [{"name": "y", "parameters": {"classification": 2}}]}`), int64(-1))
	f.Add([]byte(`{"inputs": [{"name": "s", "datatype": "BYTES", "shape": [1], "data": ["x"]}], "parameters": {"sequence_id": "q", "sequence_start": true}}`), int64(-1))
	f.Add([]byte(`{"inputs": [{"name": "t", "datatype": "FP32", "shape": [1], "parameters": {"binary_data_size": 4}}]}`+"\x00\x00\x80\x3f"), int64(86))
	f.Add([]byte(`{"inputs": [{"name": "t", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 5}}]}`+"\x01\x00\x00\x00z"), int64(87))
	f.Fuzz(func(t *testing.T, body []byte, hdrLen int64) {
		fuzzbound.Run(t, len(body), func() {
			const limit = 1 << 16
			var charged int64
			r := &infer.Request{Model: "m"}
			err := DecodeInfer(bytes.NewReader(body), hdrLen, limit, func(n int64) error { charged += n; return nil }, r)
			if charged > 2*limit {
				t.Fatalf("%d bytes of tensors charged, over %d", charged, 2*limit)
			}
			if err != nil {
				if s := infer.StatusOf(err); s != http.StatusBadRequest && s != http.StatusRequestEntityTooLarge {
					t.Fatalf("%v maps to %d", err, s)
				}
				return
			}
			for i := range r.Inputs {
				if err := r.Inputs[i].Check(); err != nil {
					t.Fatalf("decoded input fails its check: %v", err)
				}
			}
		})
	})
}
