package server

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"rnnserve/internal/fuzzbound"
	"rnnserve/models"
	"rnnserve/server/internal/wire"
)

// FuzzInferBody drives the whole REST infer path, body reading to
// response, through the real handler: a JSON body, optionally with a
// binary part after a header length. Every answer is a JSON error with a
// 4xx status, or a 200 whose outputs parse; the server keeps serving.
func FuzzInferBody(f *testing.F) {
	entries, err := LoadRepository(testRepo)
	if err != nil {
		f.Fatal(err)
	}
	o := testOptions()
	o.MaxSteps, o.MaxBodyBytes, o.TrafficSteps, o.CacheBytes = 64, 1<<16, 4, 1<<20
	s, err := New(entries, o, testDeps(f, o))
	if err != nil {
		f.Fatal(err)
	}
	s.Start()
	f.Cleanup(func() { s.Stop(f.Context()) })
	h := s.Handler()
	tok := []byte(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 2], "parameters": {"binary_data_size": 16}}], "outputs": [{"name": "hidden", "parameters": {"binary_data": true}}]}`)
	bin := append(append([]byte{}, tok...), []byte{1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}...)
	f.Add("lm", []byte(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 2], "data": [1, 2]}], "outputs": [{"name": "top_k", "parameters": {"k": 2, "classification": 2}}]}`), int64(-1))
	f.Add("lm", bin, int64(len(tok)))
	f.Add("lm", bin, int64(len(tok)+3))
	f.Add("feat", []byte(`{"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 1, 3], "data": [[[1, 2, 3]]]}], "parameters": {"binary_data_output": true, "sequence_id": 9, "sequence_start": true}}`), int64(-1))
	f.Add("lm", []byte(`{"inputs": [{"name": "tokens", "datatype": "INT32", "shape": [1, 1], "data": [1]}]} ]`), int64(-1))
	f.Fuzz(func(t *testing.T, name string, body []byte, hdr int64) {
		fuzzbound.Run(t, len(name)+len(body), func() {
			if name != "lm" && name != "feat" && name != "bi" {
				return
			}
			req := httptest.NewRequest(http.MethodPost, "/v2/models/"+name+"/infer", bytes.NewReader(body))
			if hdr >= 0 {
				req.Header.Set(wire.HeaderLength, strconv.FormatInt(hdr, 10))
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			switch {
			case w.Code == http.StatusOK:
				if _, err := splitResponse(w.Body.Bytes(), w.Header().Get(wire.HeaderLength)); err != nil {
					t.Fatalf("200 with a response that does not parse: %v\n%q", err, w.Body.Bytes())
				}
			case w.Code >= 400 && w.Code < 500 || w.Code == http.StatusServiceUnavailable:
				if !bytes.HasPrefix(w.Body.Bytes(), []byte(`{"error":`)) || w.Body.Len() > 2*maxErrorBytes {
					t.Fatalf("%d with body %q", w.Code, w.Body.Bytes())
				}
			default:
				t.Fatalf("status %d: %s", w.Code, w.Body.Bytes())
			}
		})
	})
}

// FuzzSeqDecode checks the sequence model's request validation on
// arbitrary token tensors: whatever it accepts is within the limits.
func FuzzSeqDecode(f *testing.F) {
	entries, err := LoadRepository(testRepo)
	if err != nil {
		f.Fatal(err)
	}
	var lm *models.Model
	for _, e := range entries {
		if e.Name == "lm" {
			lm = e.Model
		}
	}
	o := testOptions()
	o.MaxSteps = 64
	names := newSeqNames(lm.Net, nil)
	f.Add(int64(1), int64(2), []byte{1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}, "top_k", "INT64")
	f.Add(int64(2), int64(1), []byte{1, 0, 0, 0, 7, 0, 0, 0}, "logits", "INT32")
	f.Fuzz(func(t *testing.T, b, tt int64, raw []byte, out, dt string) {
		fuzzbound.Run(t, len(raw)+len(out)+len(dt), func() {
			r := &Request{Received: time.Now(), Inputs: []Tensor{{Name: "tokens", Datatype: dt, Shape: []int64{b, tt}}},
				Outputs: []RequestedOutput{{Name: out}}}
			if err := r.Inputs[0].DecodeRaw(raw); err != nil {
				return
			}
			in, err := decodeSeq(r, lm.Net, names, &o)
			if err != nil {
				if StatusOf(err) != http.StatusBadRequest {
					t.Fatalf("decode error %v maps to %d", err, StatusOf(err))
				}
				return
			}
			if in.B < 1 || in.T < 1 || in.T > o.MaxSteps || len(in.tokens) != in.B*in.T {
				t.Fatalf("accepted request B=%d T=%d with %d tokens", in.B, in.T, len(in.tokens))
			}
			for _, id := range in.tokens {
				if id < 0 || id >= 256 {
					t.Fatalf("accepted token %d", id)
				}
			}
		})
	})
}
