package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"rnnserve/internal/invariants"
	pb "rnnserve/server/inferencepb"
	"rnnserve/server/internal/infer"
	"rnnserve/server/internal/wire"
)

// TestPlannedOutputs: the outputs a model plans before it runs are the
// ones it returns: the same names, datatypes and element counts, for
// every output kind of sequence and tree models (a second description of
// the shapes, checked against the first).
func TestPlannedOutputs(t *testing.T) {
	s, _ := newTestServer(t, nil, true)
	ts, _ := newTreeServer(t, 0)
	ctx := context.Background()
	check := func(what string, m model, r *Request) {
		t.Helper()
		var planned []infer.PlannedOutput
		r.Plan = func(p []infer.PlannedOutput) error { planned = p; return nil }
		outs, _, err := m.infer(ctx, r, &timing{})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(planned) != len(outs) {
			t.Fatalf("%s: planned %d outputs, got %d", what, len(planned), len(outs))
		}
		for i, o := range outs {
			p := planned[i]
			n := int64(1)
			for _, d := range p.Shape {
				n *= d
			}
			got := int64(len(o.Float32) + len(o.Int64))
			if p.Name != o.Name || p.Datatype != o.Datatype || n != got {
				t.Errorf("%s: planned %s %s %v (%d elements), got %s %s %v (%d)", what, p.Name, p.Datatype, p.Shape, n, o.Name, o.Datatype, o.Shape, got)
			}
		}
	}
	tokens := func(rows, steps int) []Tensor {
		ids := make([]int64, rows*steps)
		for i := range ids {
			ids[i] = int64(i % 250)
		}
		return []Tensor{{Name: "tokens", Datatype: "INT64", Shape: []int64{int64(rows), int64(steps)}, Int64: ids}}
	}
	last := Params{"last_step": true}
	for _, outs := range [][]RequestedOutput{
		{{Name: "logits"}, {Name: "probs"}, {Name: "output"}, {Name: "hidden"}, {Name: "cell"}},
		{{Name: "top_k", Parameters: Params{"k": int64(3)}}, {Name: "top_k_probs", Parameters: Params{"k": int64(7)}}},
		{{Name: "logits", Parameters: last}, {Name: "output", Parameters: last}, {Name: "top_k", Parameters: last}},
	} {
		check(fmt.Sprintf("lm %v", outs), s.table()["lm"], &Request{Model: "lm", Inputs: tokens(3, 11), Outputs: outs})
	}
	bi := []Tensor{{Name: "features", Datatype: "FP32", Shape: []int64{2, 5, 3}, Float32: make([]float32, 30)}}
	check("bi", s.table()["bi"], &Request{Model: "bi", Inputs: bi, Outputs: []RequestedOutput{{Name: "output"}, {Name: "hidden"}, {Name: "cell"}}})
	for name, m := range ts.table() {
		if _, ok := m.(*treeModel); !ok {
			continue
		}
		trees := [][]byte{[]byte("((3) ((4) (5)))"), []byte("((1) (2))")}
		r := &Request{Model: name, Inputs: []Tensor{{Name: "trees", Datatype: "BYTES", Shape: []int64{2}, Bytes: trees}},
			Outputs: []RequestedOutput{{Name: "probs"}, {Name: "class"}, {Name: "node_probs"}, {Name: "nodes"}}}
		check("tree model "+name, m, r)
	}
}

// TestResponseLimit: a request whose response would pass
// max_response_bytes in its encoding is refused before it runs, naming
// the setting and the size (REST 400, gRPC RESOURCE_EXHAUSTED); the
// estimate is an upper bound of what is written.
func TestResponseLimit(t *testing.T) {
	const limit = 64 << 10
	g := newGRPCTest(t, func(o *Options) { o.MaxResponseBytes = limit })
	url := g.rest + "/v2/models/lm/infer"
	body := func(steps int, outputs string) []byte {
		ids := make([]int64, steps)
		return []byte(`{"inputs": [` + tokensJSON([][]int64{ids}) + `], "outputs": [` + outputs + `]}`)
	}
	// 100 steps of 256 logits: 25600 floats, about 300 KB of JSON.
	code, b, _ := send(t, url, body(100, `{"name": "logits"}`))
	if code != http.StatusBadRequest || !strings.Contains(string(b), "max_response_bytes") || !strings.Contains(string(b), "as JSON") {
		t.Errorf("logits of 100 steps as JSON: %d %s, want 400 naming max_response_bytes", code, b)
	}
	// As binary data, 100 KB: over too; 10 steps fit.
	if code, b, _ = send(t, url, body(100, `{"name": "logits", "parameters": {"binary_data": true}}`)); code != http.StatusBadRequest {
		t.Errorf("logits of 100 steps as binary data: %d %s, want 400", code, b)
	}
	for _, c := range []struct {
		steps  int
		output string
	}{{10, `{"name": "logits"}`}, {10, `{"name": "logits", "parameters": {"binary_data": true}}`}, {100, `{"name": "top_k", "parameters": {"k": 5}}`},
		{100, `{"name": "logits", "parameters": {"last_step": true}}`}, {100, `{"name": "output"}`},
		// A classification count past the last dimension gives that dimension's entries.
		{100, `{"name": "top_k", "parameters": {"k": 5, "classification": 65536}}`}} {
		code, b, h := send(t, url, body(c.steps, c.output))
		if code != http.StatusOK {
			t.Errorf("%d steps of %s: %d %s", c.steps, c.output, code, b)
			continue
		}
		// The estimate bounds what was written.
		var r Request
		r.Protocol = protocolREST
		if err := wire.DecodeInfer(strings.NewReader(string(body(c.steps, c.output))), -1, 1<<20, nil, &r); err != nil {
			t.Fatal(err)
		}
		in, err := decodeSeq(&r, g.s.table()["lm"].(*seqModel).net, g.s.table()["lm"].(*seqModel).names, &g.s.opts)
		if err != nil {
			t.Fatal(err)
		}
		est, _ := responseBytes(&r, g.s.table()["lm"].(*seqModel).plannedOutputs(in))
		if int64(len(b)) > est {
			t.Errorf("%d steps of %s: %d bytes written (%s), over the estimate %d", c.steps, c.output, len(b), h.Get("Content-Type"), est)
		}
	}
	// gRPC: raw contents of 100 steps are 100 KB.
	req := &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{make([]int64, 100)})},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits"}}}
	_, err := g.c.ModelInfer(t.Context(), req)
	if codeOf(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "max_response_bytes") {
		t.Errorf("gRPC logits of 100 steps: %v, want RESOURCE_EXHAUSTED naming max_response_bytes", err)
	}
}

// TestWriteDeadline: a client that asks for a large response and does
// not read it loses its connection after the write timeout, and the
// request's share of the budget (its response counted in) comes back.
func TestWriteDeadline(t *testing.T) {
	if invariants.Enabled {
		t.Skip("under the invariants build tag 64 rows of 200 steps run through the region checker for longer than the deadlines this test times")
	}
	s, hs := newTestServer(t, func(o *Options) { o.WriteTimeout = 300 * time.Millisecond }, true)
	conn, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rows := make([][]int64, 64)
	for i := range rows {
		rows[i] = make([]int64, 200)
	}
	body := `{"inputs": [` + tokensJSON(rows) + `], "outputs": [{"name": "logits", "parameters": {"binary_data": true}}]}`
	fmt.Fprintf(conn, "POST /v2/models/lm/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// 13 MB of logits, unread: the budget holds the request and its
	// response until the write gives up.
	waitFor(t, "the response to be charged", func() bool { return s.budget.InUse() > 13<<20 })
	// The response is charged before the model runs, and the write
	// deadline is set once it has run, before the response is encoded
	// and written: the time is taken from the first byte's arrival (or
	// the connection's end), since the run alone can take seconds under
	// -race on a loaded machine. There, encoding 13 MB can outlast the
	// 300 ms itself, and the connection ends before its first byte: cut
	// short too, and the budget must come back all the same.
	br := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	_, err = br.Peek(1)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("no response and no end of the connection in 60s: %v", err)
	}
	began := err == nil
	start := time.Now()
	// Nothing but the write deadline gives the budget back while the
	// client holds the connection unread (the test server has no other
	// timeout), so any bound well short of forever proves it; 5s is
	// about 16 write timeouts, room for a loaded machine under -race.
	for s.budget.InUse() != 0 {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("the budget still holds %d bytes 5s after the response began, want it back about the 300ms write timeout after", s.budget.InUse())
		}
		time.Sleep(2 * time.Millisecond)
	}
	if !began {
		return // the connection ended before the response's first byte
	}
	// What the client reads is cut short.
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err == nil {
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && n == resp.ContentLength {
			t.Errorf("the whole %d-byte response arrived after the write timeout", n)
		}
	}
}
