package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	pb "rnnserve/server/inferencepb"
)

// logLines collects JSON log lines written from any goroutine.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor returns the first line whose request_id is id, waiting a while
// for it: the line is written after the response may have reached the
// client.
func (l *logLines) waitFor(t *testing.T, id string) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		l.mu.Lock()
		sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
		l.mu.Unlock()
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("log line %q: %v", sc.Text(), err)
			}
			if m["request_id"] == id {
				return m
			}
		}
	}
	t.Fatalf("no log line for request %s in:\n%s", id, l.buf.String())
	return nil
}

var generatedID = regexp.MustCompile(`^[a-z2-7]{16}-[0-9]+$`)

// TestAccessLogREST: every request gets an id (the client's when usable),
// echoed in X-Request-Id, and one log line with its outcome, streamed
// responses included.
func TestAccessLogREST(t *testing.T) {
	s, _ := newTestServer(t, nil, true)
	var logs logLines
	hs := httptest.NewServer(NewAccessLog(slog.New(slog.NewJSONHandler(&logs, nil))).Handler(s.Handler()))
	defer hs.Close()
	do := func(method, path, body string, header ...string) (*http.Response, string) {
		t.Helper()
		return sendWith(t, method, hs.URL+path, body, header...)
	}
	infer := `{"inputs": [` + tokensJSON([][]int64{{1, 2}}) + `]}`

	resp, _ := do(http.MethodPost, "/v2/models/lm/infer", infer, RequestIDHeader, "client-7")
	if got := resp.Header.Get(RequestIDHeader); got != "client-7" {
		t.Errorf("X-Request-Id %q, want the client's", got)
	}
	line := logs.waitFor(t, "client-7")
	for k, v := range map[string]any{"msg": "request", "level": "INFO", "protocol": "rest", "method": "POST", "path": "/v2/models/lm/infer", "status": 200.0} {
		if line[k] != v {
			t.Errorf("log %s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
	if b, _ := line["bytes"].(float64); b <= 0 {
		t.Errorf("log bytes %v", line["bytes"])
	}
	if d, ok := line["duration_ms"].(float64); !ok || d <= 0 {
		t.Errorf("log duration_ms %v", line["duration_ms"])
	}

	// No id, or one that is not usable: a new one, different each time.
	seen := map[string]bool{}
	for _, h := range [][]string{nil, {RequestIDHeader, "has space"}, {RequestIDHeader, strings.Repeat("x", maxRequestID+1)},
		{RequestIDHeader, "a", RequestIDHeader, "b"}, {RequestIDHeader, "tab\there"}} {
		resp, _ := do(http.MethodGet, "/v2", "", h...)
		id := resp.Header.Get(RequestIDHeader)
		if !generatedID.MatchString(id) || seen[id] {
			t.Errorf("client id %q: X-Request-Id %q, want a new generated id", h, id)
		}
		seen[id] = true
		logs.waitFor(t, id)
	}

	// Failures are logged with their status, and a sequence header with
	// the request.
	resp, _ = do(http.MethodPost, "/v2/models/nope/infer", infer, SequenceHeader, "seq-9")
	line = logs.waitFor(t, resp.Header.Get(RequestIDHeader))
	if line["status"] != 404.0 || line["sequence_id"] != "seq-9" {
		t.Errorf("unknown model: logged %v", line)
	}

	// A streamed generation flushes through the wrapper.
	resp, body := do(http.MethodPost, "/v2/models/lm/generate_stream", `{"prompt": "ab", "max_tokens": 3, "temperature": 0}`)
	if resp.StatusCode != 200 || strings.Count(body, "data: ") != 4 {
		t.Fatalf("stream: %d %q", resp.StatusCode, body)
	}
	line = logs.waitFor(t, resp.Header.Get(RequestIDHeader))
	if line["status"] != 200.0 || line["bytes"] != float64(len(body)) {
		t.Errorf("stream logged %v, want status 200 and %d bytes", line, len(body))
	}

	// Without a logger: ids, no lines.
	quiet := httptest.NewServer(NewAccessLog(nil).Handler(s.Handler()))
	defer quiet.Close()
	r, err := http.Get(quiet.URL + "/v2/health/live")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if !generatedID.MatchString(r.Header.Get(RequestIDHeader)) {
		t.Errorf("without a logger: X-Request-Id %q", r.Header.Get(RequestIDHeader))
	}
}

// TestAccessLogGRPC: the same for gRPC, through the x-request-id
// metadata: unary calls, failing calls and streams.
func TestAccessLogGRPC(t *testing.T) {
	s, _ := newTestServer(t, nil, true)
	var logs logLines
	gs := s.NewGRPC(NewAccessLog(slog.New(slog.NewJSONHandler(&logs, nil))).GRPCOptions()...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	defer gs.Stop(context.Background())
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewGRPCInferenceServiceClient(conn)

	var hdr metadata.MD
	ctx := metadata.AppendToOutgoingContext(t.Context(), RequestIDMetadata, "grpc-client-1")
	if _, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "lm"}, grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	if got := hdr.Get(RequestIDMetadata); len(got) != 1 || got[0] != "grpc-client-1" {
		t.Errorf("response x-request-id %q, want the client's", got)
	}
	line := logs.waitFor(t, "grpc-client-1")
	if line["protocol"] != "grpc" || line["method"] != "/inference.GRPCInferenceService/ModelMetadata" || line["status"] != "OK" || line["remote"] == nil || line["model"] != "lm" {
		t.Errorf("logged %v", line)
	}

	hdr = nil
	_, err = c.ModelReady(metadata.AppendToOutgoingContext(t.Context(), SequenceMetadata, "s-1"), &pb.ModelReadyRequest{Name: "nope"}, grpc.Header(&hdr))
	if codeOf(err).String() != "NotFound" {
		t.Fatalf("ModelReady of nothing: %v", err)
	}
	id := hdr.Get(RequestIDMetadata)
	if len(id) != 1 || !generatedID.MatchString(id[0]) {
		t.Fatalf("generated x-request-id %q", id)
	}
	if line := logs.waitFor(t, id[0]); line["status"] != "NotFound" || line["sequence_id"] != "s-1" {
		t.Errorf("failed call logged %v", line)
	}

	stream, err := c.ModelStreamInfer(metadata.AppendToOutgoingContext(t.Context(), RequestIDMetadata, "grpc-stream-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{1, 2}})}}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.ErrorMessage != "" {
		t.Fatalf("stream: %v %v", r, err)
	}
	if h, err := stream.Header(); err != nil || len(h.Get(RequestIDMetadata)) != 1 || h.Get(RequestIDMetadata)[0] != "grpc-stream-1" {
		t.Errorf("stream header %v %v", h, err)
	}
	stream.CloseSend()
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("stream end: %v", err)
	}
	if line := logs.waitFor(t, "grpc-stream-1"); line["method"] != "/inference.GRPCInferenceService/ModelStreamInfer" || line["status"] != "OK" || line["model"] != "lm" {
		t.Errorf("stream logged %v", line)
	}
}

// TestAccessLogProbes: health probes get request ids but no log line,
// unless Probes is set.
func TestAccessLogProbes(t *testing.T) {
	s, _ := newTestServer(t, nil, true)
	for _, probes := range []bool{false, true} {
		var logs logLines
		al := NewAccessLog(slog.New(slog.NewJSONHandler(&logs, nil)))
		al.Probes = probes
		hs := httptest.NewServer(al.Handler(s.Handler()))
		gs := s.NewGRPC(al.GRPCOptions()...)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go gs.Serve(ln)
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		c := pb.NewGRPCInferenceServiceClient(conn)
		for _, p := range []string{"/v2/health/live", "/v2/health/ready"} {
			resp, _ := sendWith(t, http.MethodGet, hs.URL+p, "")
			if !generatedID.MatchString(resp.Header.Get(RequestIDHeader)) {
				t.Errorf("%s: no request id", p)
			}
		}
		if _, err := c.ServerReady(t.Context(), &pb.ServerReadyRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		// A request that is no probe, logged either way, last.
		resp, _ := sendWith(t, http.MethodGet, hs.URL+"/v2", "")
		logs.waitFor(t, resp.Header.Get(RequestIDHeader))
		n := strings.Count(logs.String(), `"msg":"request"`)
		if want := map[bool]int{false: 1, true: 5}[probes]; n != want {
			t.Errorf("probes %v: %d lines, want %d:\n%s", probes, n, want, logs.String())
		}
		conn.Close()
		gs.Stop(context.Background())
		hs.Close()
	}
}

// TestRequestIDInContext: handlers see the request id in their context.
func TestRequestIDInContext(t *testing.T) {
	var got string
	h := NewAccessLog(nil).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = RequestID(r.Context()) }))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set(RequestIDHeader, "ctx-1")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got != "ctx-1" || RequestID(context.Background()) != "" {
		t.Errorf("RequestID %q", got)
	}
}

// BenchmarkAccessLog times what the access log adds to a REST request:
// the stubbed-engine request of BenchmarkRESTOverhead (binary output)
// through the bare handler and through AccessLog writing JSON lines
// (to io.Discard: the cost of the line, not of the disk), alternating in
// one loop so that both see the same machine. It reports each path's mean
// and their difference.
//
//	go test ./server/ -run '^$' -bench BenchmarkAccessLog -benchtime 20000x
func BenchmarkAccessLog(b *testing.B) {
	bm := benchModels(b)[1]
	s := stubServer(b, bm)
	bare := s.Handler()
	logged := NewAccessLog(slog.New(slog.NewJSONHandler(io.Discard, nil))).Handler(bare)
	toks := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(bm.ids)), ","), "[]")
	body := fmt.Sprintf(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, %d], "data": [%s]}], "outputs": [{"name": "hidden", "parameters": {"binary_data": true}}]}`, len(bm.ids), toks)
	var with, without time.Duration
	for b.Loop() {
		for i, h := range []http.Handler{bare, logged} {
			req := httptest.NewRequest(http.MethodPost, "/v2/models/"+bm.entry.Name+"/infer", strings.NewReader(body))
			w := httptest.NewRecorder()
			t0 := time.Now()
			h.ServeHTTP(w, req)
			d := time.Since(t0)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if i == 0 {
				without += d
			} else {
				with += d
			}
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(without.Nanoseconds())/n, "bare-ns/req")
	b.ReportMetric(float64(with.Nanoseconds())/n, "logged-ns/req")
	b.ReportMetric(float64((with-without).Nanoseconds())/n, "added-ns/req")
}
