package server

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"rnnserve/server/api"
	"rnnserve/server/internal/wire"
)

// send posts body with headers and returns status, body and headers; the
// client does not decompress (DisableCompression), so tests see what the
// server sent.
func send(t testing.TB, url string, body []byte, header ...string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// binaryBody is a body with Triton's binary tensor data: the JSON header
// and the raw parts after it, and the header length to send.
func binaryBody(header string, parts ...[]byte) ([]byte, string) {
	b := []byte(header)
	for _, p := range parts {
		b = append(b, p...)
	}
	return b, strconv.Itoa(len(header))
}

func int64sLE(v ...int64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

func bytesElems(v ...string) []byte {
	var b []byte
	for _, s := range v {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}

// outputsByName parses a response and indexes its outputs.
func outputsByName(t testing.TB, body []byte, hdr http.Header) map[string]parsedOutput {
	t.Helper()
	outs, err := splitResponse(body, hdr.Get(wire.HeaderLength))
	if err != nil {
		t.Fatalf("response %q: %v", body, err)
	}
	m := map[string]parsedOutput{}
	for _, o := range outs {
		m[o.Name] = o
	}
	return m
}

// sameBits fails unless two outputs hold bit-identical values.
func sameBits(t testing.TB, what string, a, b parsedOutput) {
	t.Helper()
	if fmt.Sprint(a.Shape) != fmt.Sprint(b.Shape) || a.Datatype != b.Datatype || len(a.Float32) != len(b.Float32) ||
		fmt.Sprint(a.Int64) != fmt.Sprint(b.Int64) || fmt.Sprintf("%q", a.Bytes) != fmt.Sprintf("%q", b.Bytes) {
		t.Fatalf("%s: %s %v %d floats vs %s %v %d floats", what, a.Datatype, a.Shape, len(a.Float32), b.Datatype, b.Shape, len(b.Float32))
	}
	for i := range a.Float32 {
		if math.Float32bits(a.Float32[i]) != math.Float32bits(b.Float32[i]) {
			t.Fatalf("%s[%d]: %v vs %v", what, i, a.Float32[i], b.Float32[i])
		}
	}
}

// TestBinaryMatchesJSON: the same request answered with JSON outputs,
// binary outputs, and a mix, from JSON or binary inputs, gives
// bit-identical values.
func TestBinaryMatchesJSON(t *testing.T) {
	_, hs := newTestServer(t, nil, true)
	url := hs.URL + "/v2/models/lm/infer"
	toks := []int64{72, 101, 108, 108, 111, 0, 255, 3, 9, 10}
	outputs := func(binary string) string {
		return `[{"name": "logits", "parameters": {` + binary + `}}, {"name": "hidden", "parameters": {` + binary + `}}, {"name": "top_k", "parameters": {"k": 4` + strings.Repeat(", ", min(1, len(binary))) + binary +
			`}}, {"name": "probs", "parameters": {"last_step": true` + strings.Repeat(", ", min(1, len(binary))) + binary + `}}, {"name": "cell", "parameters": {` + binary + `}}]`
	}
	jsonIn := `{"name": "tokens", "datatype": "INT64", "shape": [2, 5], "data": [[72, 101, 108, 108, 111], [0, 255, 3, 9, 10]]}`
	code, body, hdr := send(t, url, []byte(`{"inputs": [`+jsonIn+`], "outputs": `+outputs("")+`}`))
	if code != 200 || hdr.Get(wire.HeaderLength) != "" || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("JSON: %d %v %s", code, hdr, body)
	}
	want := outputsByName(t, body, hdr)

	cases := []struct {
		what   string
		body   []byte
		hdrLen string
		binary map[string]bool
	}{}
	add := func(what string, b []byte, l string, binary ...string) {
		m := map[string]bool{}
		for _, n := range binary {
			m[n] = true
		}
		cases = append(cases, struct {
			what   string
			body   []byte
			hdrLen string
			binary map[string]bool
		}{what, b, l, m})
	}
	all := []string{"logits", "hidden", "top_k", "probs", "cell"}
	add("binary_data_output", []byte(`{"parameters": {"binary_data_output": true}, "inputs": [`+jsonIn+`], "outputs": `+outputs("")+`}`), "", all...)
	add("binary_data per output", []byte(`{"inputs": [`+jsonIn+`], "outputs": `+outputs(`"binary_data": true`)+`}`), "", all...)
	add("mixed outputs", []byte(`{"parameters": {"binary_data_output": true}, "inputs": [`+jsonIn+`], "outputs": [{"name": "logits", "parameters": {"binary_data": false}}, {"name": "hidden"}, {"name": "top_k", "parameters": {"k": 4}}, {"name": "probs", "parameters": {"last_step": true, "binary_data": false}}, {"name": "cell"}]}`), "", "hidden", "top_k", "cell")
	b, l := binaryBody(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [2, 5], "parameters": {"binary_data_size": 80}}], "outputs": `+outputs("")+`}`, int64sLE(toks...))
	add("binary INT64 input, JSON outputs", b, l)
	var i32 []byte
	for _, x := range toks {
		i32 = binary.LittleEndian.AppendUint32(i32, uint32(x))
	}
	b, l = binaryBody(`{"parameters": {"binary_data_output": true}, "inputs": [{"name": "tokens", "datatype": "INT32", "shape": [2, 5], "parameters": {"binary_data_size": 40}}], "outputs": `+outputs("")+`}`, i32)
	add("binary INT32 input, binary outputs", b, l, all...)
	for _, c := range cases {
		h := []string{}
		if c.hdrLen != "" {
			h = append(h, wire.HeaderLength, c.hdrLen, "Content-Type", "application/octet-stream")
		}
		code, body, hdr := send(t, url, c.body, h...)
		if code != 200 {
			t.Fatalf("%s: %d %s", c.what, code, body)
		}
		got := outputsByName(t, body, hdr)
		if (hdr.Get(wire.HeaderLength) != "") != (len(c.binary) > 0) {
			t.Errorf("%s: %s %q", c.what, wire.HeaderLength, hdr.Get(wire.HeaderLength))
		}
		for _, name := range all {
			if got[name].Binary != c.binary[name] {
				t.Errorf("%s: output %s binary %v, want %v", c.what, name, got[name].Binary, c.binary[name])
			}
			sameBits(t, c.what+": "+name, got[name], want[name])
		}
	}
}

// TestBinaryTrees sends tree strings as binary BYTES elements with their
// 4-byte length prefixes, and asks for BYTES and INT64 outputs in binary.
func TestBinaryTrees(t *testing.T) {
	_, hs := newTreeServer(t, 0)
	url := hs.URL + "/v2/models/treelstm/infer"
	trees := []string{"(((3) (+ (4))) (* (5)))", "((7) (- (9)))"}
	raw := bytesElems(trees...)
	b, l := binaryBody(fmt.Sprintf(`{"inputs": [{"name": "trees", "datatype": "BYTES", "shape": [2], "parameters": {"binary_data_size": %d}}], "outputs": [{"name": "class", "parameters": {"binary_data": true}}, {"name": "probs", "parameters": {"classification": 2, "binary_data": true}}]}`, len(raw)), raw)
	code, body, hdr := send(t, url, b, wire.HeaderLength, l)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	got := outputsByName(t, body, hdr)
	if fmt.Sprint(got["class"].Int64) != "[5 8]" || !got["class"].Binary {
		t.Errorf("class %+v, want [5 8] in binary", got["class"])
	}
	cls := got["probs"]
	if cls.Datatype != "BYTES" || fmt.Sprint(cls.Shape) != "[2 2]" || len(cls.Bytes) != 4 || !strings.HasSuffix(string(cls.Bytes[0]), ":5") || !strings.HasSuffix(string(cls.Bytes[2]), ":8") {
		t.Errorf("classification %q %v %s", cls.Bytes, cls.Shape, cls.Datatype)
	}
}

// TestClassification checks the classification parameter against the
// JSON values it ranks: "value:index", largest first.
func TestClassification(t *testing.T) {
	_, hs := newTestServer(t, nil, true)
	url := hs.URL + "/v2/models/lm/infer"
	in := `"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 3], "data": [1, 2, 3]}]`
	_, body, hdr := send(t, url, []byte(`{`+in+`, "outputs": [{"name": "logits", "parameters": {"last_step": true}}]}`))
	logits := outputsByName(t, body, hdr)["logits"].Float32
	code, body, hdr := send(t, url, []byte(`{`+in+`, "outputs": [{"name": "logits", "parameters": {"last_step": true, "classification": 3}}]}`))
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	cls := outputsByName(t, body, hdr)["logits"]
	if cls.Datatype != "BYTES" || fmt.Sprint(cls.Shape) != "[1 1 3]" || len(cls.Bytes) != 3 {
		t.Fatalf("classification: %s %v %q", cls.Datatype, cls.Shape, cls.Bytes)
	}
	prev := float32(math.Inf(1))
	for _, e := range cls.Bytes {
		v, i, ok := strings.Cut(string(e), ":")
		f, err1 := strconv.ParseFloat(v, 32)
		idx, err2 := strconv.Atoi(i)
		if !ok || err1 != nil || err2 != nil || math.Abs(float64(logits[idx])-f) > 1e-6 || logits[idx] > prev {
			t.Fatalf("element %q: logits[%s] = %v", e, i, logits[idx])
		}
		prev = logits[idx]
		for j, l := range logits {
			if l > logits[idx] && !strings.Contains(fmt.Sprintf("%q", cls.Bytes), fmt.Sprintf(":%d\"", j)) {
				t.Fatalf("logit %d (%v) beats %q but is not listed", j, l, e)
			}
		}
	}
	for _, bad := range []string{`{"classification": -1}`, `{"classification": "3"}`, `{"classification": 1.5}`} {
		if code, body, _ := send(t, url, []byte(`{`+in+`, "outputs": [{"name": "logits", "parameters": `+bad+`}]}`)); code != 400 {
			t.Errorf("classification %s: %d %s", bad, code, body)
		}
	}
}

// TestRESTBadInput covers the binary data extension's bad input: every
// case gets a clear 4xx error and the server keeps serving.
func TestRESTBadInput(t *testing.T) {
	s, hs := newTestServer(t, func(o *Options) { o.MaxBodyBytes = 4096 }, true)
	url := hs.URL + "/v2/models/lm/infer"
	hdrOf := func(json string, parts ...[]byte) ([]byte, []string) {
		b, l := binaryBody(json, parts...)
		return b, []string{wire.HeaderLength, l}
	}
	tokHdr := func(size string) string {
		return `{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 2], "parameters": {"binary_data_size": ` + size + `}}]}`
	}
	type bad struct {
		what   string
		body   []byte
		header []string
		code   int
		want   string
	}
	var cases []bad
	b, h := hdrOf(tokHdr("15"), int64sLE(1, 2)[:15])
	cases = append(cases, bad{"size disagrees with the shape", b, h, 400, "binary_data_size 15, want 16"})
	b, h = hdrOf(tokHdr("16"), int64sLE(1))
	cases = append(cases, bad{"binary data shorter than its size", b, h, 400, "ends after 8 of its 16 bytes"})
	b, h = hdrOf(tokHdr("16"), int64sLE(1, 2, 3))
	cases = append(cases, bad{"bytes after the binary data", b, h, 400, "after the binary tensor data"})
	b, _ = hdrOf(tokHdr("16"), int64sLE(1, 2))
	cases = append(cases, bad{"header length beyond the JSON", b, []string{wire.HeaderLength, "3000"}, 400, "does not match the JSON object"})
	cases = append(cases, bad{"header length beyond the body", []byte(`{"inputs": [`), []string{wire.HeaderLength, "3000"}, 400, "longer than the body"})
	cases = append(cases, bad{"header length beyond the limit", b, []string{wire.HeaderLength, "100000"}, 413, "over the 4096-byte body limit"})
	cases = append(cases, bad{"negative header length", b, []string{wire.HeaderLength, "-5"}, 400, "not a byte count"})
	cases = append(cases, bad{"header length not a number", b, []string{wire.HeaderLength, "12abc"}, 400, "not a byte count"})
	b, h = hdrOf(tokHdr("-16"), int64sLE(1, 2))
	cases = append(cases, bad{"negative size", b, h, 400, "binary_data_size must be an integer"})
	b, h = hdrOf(tokHdr("1e30"), int64sLE(1, 2))
	cases = append(cases, bad{"non-integer size", b, h, 400, "binary_data_size must be an integer"})
	b, h = hdrOf(`{"inputs": [{"name": "trees", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 9000000000}}]}`)
	cases = append(cases, bad{"huge BYTES size", b, h, 413, "more than the"})
	b, h = hdrOf(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [100000000, 100000000], "parameters": {"binary_data_size": 16}}]}`, int64sLE(1, 2))
	cases = append(cases, bad{"huge shape", b, h, 400, "holds more than"})
	cases = append(cases, bad{"binary size without the header", []byte(tokHdr("16")), nil, 400, "has no " + wire.HeaderLength})
	b, h = hdrOf(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 2], "data": [1, 2], "parameters": {"binary_data_size": 16}}]}`, int64sLE(1, 2))
	cases = append(cases, bad{"data and binary size both", b, h, 400, "both data and binary_data_size"})
	b, h = hdrOf(`{"inputs": [{"name": "tokens", "datatype": "FP16", "shape": [1, 2], "parameters": {"binary_data_size": 4}}]}`, []byte{0, 0, 0, 0})
	cases = append(cases, bad{"unsupported datatype", b, h, 400, "not supported"})
	b, h = hdrOf(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 2], "parameters": {"shared_memory_region": "r"}}]}`)
	cases = append(cases, bad{"shared memory", b, h, 400, "shared memory is not supported"})
	cases = append(cases, bad{"trailing bracket", []byte(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 1], "data": [1]}]}]`), nil, 400, "data after the request object"})
	cases = append(cases, bad{"trailing braces", []byte(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 1], "data": [1]}]}}}}`), nil, 400, "data after the request object"})
	cases = append(cases, bad{"model name disagrees", []byte(`{"model_name": "feat", "inputs": []}`), nil, 400, "the URL names"})
	long := strings.Repeat("x", 3000)
	cases = append(cases, bad{"long unknown field", []byte(`{"` + long + `": 1}`), nil, 400, "unknown field"})
	for _, c := range cases {
		code, body, _ := send(t, url, c.body, c.header...)
		var e api.Error
		if code != c.code || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, c.want) || len(e.Error) > maxErrorBytes+3 {
			t.Errorf("%s: %d %s, want %d mentioning %q", c.what, code, body, c.code, c.want)
		}
	}
	// The header length on two field lines is refused, whichever one a
	// proxy in front would have read.
	b, hdrLen := binaryBody(tokHdr("16"), int64sLE(1, 2))
	twice, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	twice.Header.Add(wire.HeaderLength, hdrLen)
	twice.Header.Add(wire.HeaderLength, "3000")
	resp, err := http.DefaultClient.Do(twice)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(got), "given 2 times") {
		t.Errorf("%s on two lines: %d %.200s, want 400", wire.HeaderLength, resp.StatusCode, got)
	}
	// BYTES elements whose length prefix overruns go to a tree model.
	ts, ths := newTreeServer(t, 0)
	_ = ts
	for _, c := range []struct {
		what string
		raw  []byte
		want string
	}{
		{"length prefix overruns", append(binary.LittleEndian.AppendUint32(nil, 100), "(3)"...), "has length 100, but only 3 bytes follow"},
		{"cut inside a length", []byte{3, 0}, "cannot hold 1 BYTES elements"},
		{"bytes after the elements", append(bytesElems("(3)"), 'x', 'y', 'z', 'w'), "after its 1 BYTES elements"},
		{"huge length", append(binary.LittleEndian.AppendUint32(nil, math.MaxUint32), "(3)"...), "but only 3 bytes follow"},
	} {
		b, l := binaryBody(fmt.Sprintf(`{"inputs": [{"name": "trees", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": %d}}]}`, len(c.raw)), c.raw)
		code, body, _ := send(t, ths.URL+"/v2/models/treelstm/infer", b, wire.HeaderLength, l)
		if code != 400 || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s, want 400 mentioning %q", c.what, code, body, c.want)
		}
	}
	// A Content-Length over the limit is refused before the body is read.
	req := httptest.NewRequest(http.MethodPost, "/v2/models/lm/infer", strings.NewReader("{}"))
	req.ContentLength = 1 << 30
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	if w.Code != 413 {
		t.Errorf("Content-Length 1 GiB: %d %s", w.Code, w.Body)
	}
	if code, body, _ := send(t, url, []byte(`{"inputs": [`+tokensJSON([][]int64{{1, 2}})+`]}`)); code != 200 {
		t.Errorf("after bad input: %d %s", code, body)
	}
}

// TestCompression: gzip and deflate bodies are inflated within the body
// limit (a bomb gets 413), other encodings 415, and a client that accepts
// gzip gets gzip.
func TestCompression(t *testing.T) {
	_, hs := newTestServer(t, func(o *Options) { o.MaxBodyBytes = 4096 }, true)
	url := hs.URL + "/v2/models/lm/infer"
	body := []byte(`{"inputs": [` + tokensJSON([][]int64{{1, 2, 3}}) + `], "outputs": [{"name": "logits"}]}`)
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		w.Write(b)
		w.Close()
		return buf.Bytes()
	}
	zl := func(b []byte) []byte {
		var buf bytes.Buffer
		w := zlib.NewWriter(&buf)
		w.Write(b)
		w.Close()
		return buf.Bytes()
	}
	_, plain, hdr := send(t, url, body)
	want := outputsByName(t, plain, hdr)["logits"]
	for _, c := range []struct {
		enc  string
		body []byte
	}{{"gzip", gz(body)}, {"deflate", zl(body)}, {"identity", body}} {
		code, resp, hdr := send(t, url, c.body, "Content-Encoding", c.enc)
		if code != 200 {
			t.Fatalf("%s: %d %s", c.enc, code, resp)
		}
		sameBits(t, c.enc, outputsByName(t, resp, hdr)["logits"], want)
	}
	// A bomb: 16 MiB of white space after the object, 16 KiB compressed.
	bomb := gz(append(body[:len(body):len(body)], bytes.Repeat([]byte(" "), 16<<20)...))
	if len(bomb) > 4096*8 {
		t.Fatalf("bomb is %d bytes compressed", len(bomb))
	}
	for _, c := range []struct {
		enc  string
		body []byte
		code int
		want string
	}{
		{"gzip", bomb[:min(len(bomb), 4000)], 0, ""},
		{"gzip", []byte("not gzip at all"), 400, "gzip"},
		{"deflate", []byte("not zlib"), 400, "deflate"},
		{"br", body, 415, "unsupported content encoding"},
	} {
		code, resp, _ := send(t, url, c.body, "Content-Encoding", c.enc)
		if c.code == 0 {
			if code != 413 && code != 400 {
				t.Errorf("bomb: %d %s, want 413 (or 400 for the cut stream)", code, resp)
			}
			continue
		}
		if code != c.code || !strings.Contains(string(resp), c.want) {
			t.Errorf("%s %q: %d %s, want %d %q", c.enc, c.body[:min(10, len(c.body))], code, resp, c.code, c.want)
		}
	}
	// Codings on several field lines are one list (RFC 9110 section
	// 5.3), as on one line: stacked codings are refused, not cut to the
	// first.
	for _, c := range []struct {
		encs []string
		body []byte
	}{{[]string{"gzip", "gzip"}, gz(body)}, {[]string{"identity", "br"}, body}, {[]string{"gzip", "identity"}, gz(body)}} {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range c.encs {
			req.Header.Add("Content-Encoding", e)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 415 || !strings.Contains(string(b), "unsupported content encoding") {
			t.Errorf("Content-Encoding lines %q: %d %.200s, want 415", c.encs, resp.StatusCode, b)
		}
	}
	// The whole bomb, when its compressed size fits the limit.
	small := gz(append(body[:len(body):len(body)], bytes.Repeat([]byte(" "), 1<<20)...))
	if len(small) > 4096 {
		t.Fatalf("1 MiB of spaces is %d bytes compressed", len(small))
	}
	if code, resp, _ := send(t, url, small, "Content-Encoding", "gzip"); code != 413 || !strings.Contains(string(resp), "over 4096") {
		t.Errorf("gzip bomb: %d %s, want 413", code, resp)
	}
	// Responses are gzipped for a client that accepts gzip.
	code, resp, hdr := send(t, url, body, "Accept-Encoding", "gzip")
	if code != 200 || hdr.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Accept-Encoding gzip: %d %v", code, hdr)
	}
	zr, err := gzip.NewReader(bytes.NewReader(resp))
	if err != nil {
		t.Fatal(err)
	}
	inflated, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, "gzip response", outputsByName(t, inflated, hdr)["logits"], want)
}

// TestStatistics checks the statistics in Triton's schema after a few
// requests.
func TestStatistics(t *testing.T) {
	_, hs := newTestServer(t, nil, true)
	url := hs.URL + "/v2/models/lm/infer"
	for range 3 {
		if code, body, _ := post(t, url, `{"inputs": [`+tokensJSON([][]int64{{1, 2}, {3, 4}})+`]}`); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	post(t, url, `{"inputs": [`)
	// A generation counts as one more successful request, in every phase
	// (Triton's counts agree: success = queue = compute_*).
	if code, body, _ := post(t, hs.URL+"/v2/models/lm/generate", `{"prompt": "ab", "max_tokens": 3}`); code != 200 {
		t.Fatalf("generate: %d %s", code, body)
	}
	for _, path := range []string{"/v2/models/lm/stats", "/v2/models/lm/versions/1/stats", "/v2/models/stats"} {
		code, body := get(t, hs.URL+path)
		var st api.ModelStatsResponse
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if code != 200 || dec.Decode(&st) != nil {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		var lm *api.ModelStats
		for i := range st.ModelStats {
			if st.ModelStats[i].Name == "lm" {
				lm = &st.ModelStats[i]
			}
		}
		if lm == nil || path != "/v2/models/stats" && len(st.ModelStats) != 1 || path == "/v2/models/stats" && len(st.ModelStats) != 3 {
			t.Fatalf("%s: %s", path, body)
		}
		is := lm.InferenceStats
		if lm.Version != "1" || lm.InferenceCount != 7 || lm.ExecutionCount == 0 || lm.LastInference == 0 ||
			is.Success.Count != 4 || is.Success.Ns == 0 || is.Fail.Count != 1 || is.Queue.Count != 4 ||
			is.ComputeInput.Count != 4 || is.ComputeInfer.Count != 4 || is.ComputeInfer.Ns == 0 || is.ComputeOutput.Count != 4 ||
			lm.RNNServe.Requests != 5 || lm.RNNServe.Success != 4 || lm.RNNServe.Failed != 1 {
			t.Errorf("%s: %s", path, body)
		}
	}
}

// TestModelConfig checks GET config in Triton's model-configuration
// schema, with rnnserve's spec alongside.
func TestModelConfig(t *testing.T) {
	_, hs := newTestServer(t, nil, true)
	for _, c := range []struct {
		model, want string
	}{
		{"lm", `"input":[{"name":"tokens","data_type":"TYPE_INT64","dims":[-1]},{"name":"lengths","data_type":"TYPE_INT64","dims":[1],"reshape":{"shape":[]},"optional":true}]`},
		{"lm", `{"name":"hidden","data_type":"TYPE_FP32","dims":[2,16]}`},
		{"lm", `"sequence_batching":{"max_sequence_idle_microseconds":300000000}`},
		{"lm", `"rnnserve":{"kind":"sequence","spec":{`},
		{"lm", `"parameters":{"rnn":{"string_value":"{\"cell\":\"lstm\",`},
		{"feat", `"input":[{"name":"features","data_type":"TYPE_FP32","dims":[-1,3]},{"name":"lengths","data_type":"TYPE_INT64","dims":[1],"reshape":{"shape":[]},"optional":true}]`},
		{"bi", `"config":{"schedule":"A"}`},
	} {
		code, body := get(t, hs.URL+"/v2/models/"+c.model+"/config")
		var cfg api.ModelConfig
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if code != 200 || dec.Decode(&cfg) != nil || cfg.Name != c.model || cfg.Backend != "rnnserve" || cfg.MaxBatchSize != 64 ||
			!strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s, want %s", c.model, code, body, c.want)
		}
	}
	_, hts := newTreeServer(t, 0)
	code, body := get(t, hts.URL+"/v2/models/treelstm/versions/1/config")
	if code != 200 || !strings.Contains(string(body), `{"name":"trees","data_type":"TYPE_STRING","dims":[1],"reshape":{"shape":[]}}`) ||
		strings.Contains(string(body), "sequence_batching") || !strings.Contains(string(body), `"dynamic_batching":{"max_queue_delay_microseconds":0}`) {
		t.Errorf("tree config: %d %s", code, body)
	}
}
