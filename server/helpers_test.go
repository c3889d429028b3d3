package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strconv"
	"testing"

	"rnnserve/schedule"
)

// testDeps makes the worker pools a server with options o needs, closed
// when the test ends.
func testDeps(t testing.TB, o Options) Deps {
	t.Helper()
	pools := Pools{}
	for _, n := range PoolSizes(o) {
		p, err := schedule.NewPool(schedule.PoolOptions{Workers: n})
		if err != nil {
			t.Fatal(err)
		}
		pools[n] = p
		t.Cleanup(p.Close)
	}
	return Deps{Log: quietLog, Pools: pools}
}

// newServer builds a server of entries with options o and deps, or
// fails the test.
func newServer(t testing.TB, entries []Entry, o Options, deps Deps) *Server {
	t.Helper()
	s, err := New(entries, o, deps)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serveHTTP serves s's handler on a test HTTP server, starting s first
// when start is set; both stop when the test ends.
func serveHTTP(t testing.TB, s *Server, start bool) *httptest.Server {
	if start {
		s.Start()
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		s.Stop(context.Background())
	})
	return hs
}

// stepAlways makes every sequence model of s run each request step by
// step in its batcher, never alone as a whole plan.
func stepAlways(s *Server) {
	for _, m := range s.table() {
		if sm, ok := m.(*seqModel); ok {
			sm.alwaysStep = true
		}
	}
}

// seqOf is the loaded sequence model name.
func seqOf(t testing.TB, s *Server, name string) *seqModel {
	t.Helper()
	m, ok := s.table()[name].(*seqModel)
	if !ok {
		t.Fatalf("no sequence model %q", name)
	}
	return m
}

// reasonOf is m's schedule_reason as its metadata says it now.
func reasonOf(m *seqModel) string {
	md, _ := m.description()
	return md.RNN.ScheduleReason
}

// parsedOutput is one output of an infer response as a client reads it.
type parsedOutput struct {
	Name, Datatype string
	Shape          []int64
	Float32        []float32
	Int64          []int64
	Bytes          [][]byte
	Binary         bool
}

// splitResponse parses an infer response body: JSON, or, with hdr (the
// Inference-Header-Content-Length header) set, the JSON header and the
// binary outputs after it. JSON numbers are read as float32 exactly as a
// float32 client would (strconv.ParseFloat with bitSize 32).
func splitResponse(body []byte, hdr string) ([]parsedOutput, error) {
	jsonPart, rest := body, []byte(nil)
	if hdr != "" {
		n, err := strconv.Atoi(hdr)
		if err != nil || n < 0 || n > len(body) {
			return nil, fmt.Errorf("header length %q for a %d-byte body", hdr, len(body))
		}
		jsonPart, rest = body[:n], body[n:]
	}
	var resp struct {
		ModelName    string `json:"model_name"`
		ModelVersion string `json:"model_version"`
		ID           string `json:"id"`
		Outputs      []struct {
			Name       string          `json:"name"`
			Datatype   string          `json:"datatype"`
			Shape      []int64         `json:"shape"`
			Parameters map[string]int  `json:"parameters"`
			Data       json.RawMessage `json:"data"`
		} `json:"outputs"`
	}
	dec := json.NewDecoder(bytes.NewReader(jsonPart))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&resp); err != nil {
		return nil, err
	}
	var out []parsedOutput
	for _, o := range resp.Outputs {
		p := parsedOutput{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape}
		t := Tensor{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape}
		if size, ok := o.Parameters["binary_data_size"]; ok {
			if size > len(rest) {
				return nil, fmt.Errorf("output %s: %d bytes, %d left", o.Name, size, len(rest))
			}
			if err := t.DecodeRaw(rest[:size]); err != nil {
				return nil, err
			}
			rest, p.Binary = rest[size:], true
		} else if err := readData(&t, o.Data); err != nil {
			return nil, err
		}
		p.Float32, p.Int64, p.Bytes = t.Float32, t.Int64, t.Bytes
		out = append(out, p)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%d bytes after the outputs", len(rest))
	}
	return out, nil
}

// readData reads a response's flat JSON data into t by its datatype with
// encoding/json (not the server's own reader), and checks its count.
func readData(t *Tensor, data json.RawMessage) error {
	var err error
	switch kind, _ := DatatypeKind(t.Datatype); kind {
	case KindFloat:
		err = json.Unmarshal(data, &t.Float32)
	case KindInt:
		err = json.Unmarshal(data, &t.Int64)
	case KindBytes:
		var s []string
		err = json.Unmarshal(data, &s)
		t.Bytes = make([][]byte, len(s))
		for i := range s {
			t.Bytes[i] = []byte(s[i])
		}
	default:
		return fmt.Errorf("output %s: datatype %s", t.Name, t.Datatype)
	}
	if err != nil {
		return fmt.Errorf("output %s: %w", t.Name, err)
	}
	return t.Check()
}

// testOptions are the server's defaults without the schedule timing at
// load, which would make every test that starts a server slower and its
// choice depend on the machine's load (TestScheduleTiming covers it).
func testOptions() Options {
	o := DefaultOptions()
	o.ScheduleTiming = 0
	return o
}
