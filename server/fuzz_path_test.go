package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"rnnserve/internal/fuzzbound"
	"rnnserve/models/bundled"
	"rnnserve/server/api"
	pb "rnnserve/server/inferencepb"
	"rnnserve/server/internal/wire"
)

// The whole-path fuzz targets: each drives the real handler (REST through
// httptest, gRPC through a real connection) with arbitrary bodies, and
// checks that every answer is well formed: a 200 whose body parses, or a
// 4xx or 503 with a bounded JSON error (gRPC: any code but INTERNAL and
// UNKNOWN), and that the server keeps answering. Run each with
//
//	go test ./server -run '^$' -fuzz '^FuzzTreeBody$' -fuzztime 10m -parallel 1

// fuzzServer is a test server small enough to fuzz quickly: the test
// repository and the bundled tree model, short sequences and generations,
// a 64 KiB body limit.
func fuzzServer(f *testing.F) *Server {
	entries, err := LoadRepository(testRepo)
	if err != nil {
		f.Fatal(err)
	}
	trees, err := LoadRepository(bundled.FS)
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range trees {
		if e.Tree != nil {
			entries = append(entries, e)
		}
	}
	o := DefaultOptions()
	o.MaxSteps, o.MaxBodyBytes, o.TrafficSteps, o.CacheBytes, o.MaxGenerateTokens = 64, 1<<16, 4, 1<<20, 8
	o.MaxRequestRows = 8
	s, err := New(entries, o, testDeps(f, o))
	if err != nil {
		f.Fatal(err)
	}
	s.Start()
	f.Cleanup(func() { s.Stop(context.Background()) })
	return s
}

// checkAnswer fails t unless w is a 200 (checked by ok) or a 4xx or 503
// with a JSON error of bounded length.
func checkAnswer(t *testing.T, w *httptest.ResponseRecorder, ok func(body []byte) error) {
	t.Helper()
	switch {
	case w.Code == http.StatusOK:
		if err := ok(w.Body.Bytes()); err != nil {
			t.Fatalf("200 with a body that does not parse: %v\n%q", err, w.Body.Bytes())
		}
	case w.Code >= 400 && w.Code < 500 || w.Code == http.StatusServiceUnavailable:
		var e api.Error
		if json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Error == "" || len(e.Error) > maxErrorBytes+3 {
			t.Fatalf("%d with body %q", w.Code, w.Body.Bytes())
		}
	default:
		t.Fatalf("status %d: %s", w.Code, w.Body.Bytes())
	}
}

// inferOK parses an infer response as a client would.
func inferOK(hdr string) func([]byte) error {
	return func(b []byte) error {
		_, err := splitResponse(b, hdr)
		return err
	}
}

// FuzzTreeBody drives the tree model's infer path: JSON and binary BYTES
// trees, bracketed or JSON, with whatever outputs and parameters.
func FuzzTreeBody(f *testing.F) {
	h := fuzzServer(f).Handler()
	f.Add([]byte(`{"inputs": [{"name": "trees", "datatype": "BYTES", "shape": [2], "data": ["((3) ((+) (4)))", "{\"children\": [{\"word\": \"3\"}, {\"word\": \"4\"}]}"]}], "outputs": [{"name": "class"}, {"name": "node_probs"}], "parameters": {"executor": "recursive"}}`), int64(-1))
	tree := []byte("((1) (2))")
	hdr := []byte(`{"inputs": [{"name": "trees", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 13}}], "outputs": [{"name": "probs", "parameters": {"binary_data": true}}]}`)
	bin := append(append(append([]byte{}, hdr...), 9, 0, 0, 0), tree...)
	f.Add(bin, int64(len(hdr)))
	f.Add([]byte(`{"inputs": [{"name": "trees", "datatype": "BYTES", "shape": [1], "data": ["(((((((1) (2)) (3)) (4)) (5)) (6)) (7))"]}], "outputs": [{"name": "nodes"}, {"name": "probs", "parameters": {"classification": 3}}]}`), int64(-1))
	f.Add([]byte(`{"inputs": [{"name": "trees", "datatype": "BYTES", "shape": [1], "data": ["((3) (\ud83d\ude00))"]}], "parameters": {"sequence_id": 3}}`), int64(-1))
	f.Fuzz(func(t *testing.T, body []byte, hdr int64) {
		fuzzbound.Run(t, len(body), func() {
			req := httptest.NewRequest(http.MethodPost, "/v2/models/treelstm/infer", bytes.NewReader(body))
			hv := ""
			if hdr >= 0 {
				hv = strconv.FormatInt(hdr, 10)
				req.Header.Set(wire.HeaderLength, hv)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			checkAnswer(t, w, func(b []byte) error { return inferOK(w.Header().Get(wire.HeaderLength))(b) })
		})
	})
}

// FuzzGenerateBody drives generation: generate (one JSON object),
// generate_stream (Server-Sent Events) and the NDJSON stream, checking
// every event of a stream parses and the stream ends with its finish
// reason or an error.
func FuzzGenerateBody(f *testing.F) {
	h := fuzzServer(f).Handler()
	f.Add([]byte(`{"text_input": "Hi", "parameters": {"max_tokens": 4, "temperature": 0.7, "top_k": 5, "top_p": 0.9, "seed": 1, "stop": ["!"]}}`), uint8(0))
	f.Add([]byte(`{"prompt": "ab", "max_tokens": 3, "stop": "b"}`), uint8(1))
	f.Add([]byte(`{"prompt_tokens": [1, 2, 3], "parameters": {"max_tokens": 2}, "stream": true}`), uint8(2))
	f.Add([]byte(`{"text_input": "\ud83d\ude00 \u00e9", "parameters": {"max_tokens": 8}}`), uint8(1))
	f.Add([]byte(`{"text_input": "x", "parameters": {"max_tokens": 2}}`), uint8(5))
	f.Fuzz(func(t *testing.T, body []byte, mode uint8) {
		fuzzbound.Run(t, len(body), func() {
			path, accept := "/v2/models/lm/generate", ""
			switch mode % 4 {
			case 1:
				path = "/v2/models/lm/generate_stream"
			case 2:
				accept = "application/x-ndjson"
			case 3:
				path = "/v2/models/treelstm/generate" // not a language model
			}
			req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			if accept != "" {
				req.Header.Set("Accept", accept)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			checkAnswer(t, w, func(b []byte) error {
				switch {
				case accept != "":
					return checkLines(b, "", func(line []byte, last bool) error {
						var d api.GenerateDone
						if err := json.Unmarshal(line, &d); err != nil {
							return err
						}
						if last && (!d.Done || d.Reason == "") {
							return errString("the last line is not a done line: " + string(line))
						}
						return nil
					})
				case mode%4 == 1:
					return checkLines(b, "data: ", func(line []byte, last bool) error {
						var r struct {
							api.GenerateResponse
							Error string `json:"error"`
						}
						if err := json.Unmarshal(line, &r); err != nil {
							return err
						}
						if last && r.RNNServe.FinishReason == "" && r.Error == "" {
							return errString("the last event has no finish reason: " + string(line))
						}
						return nil
					})
				}
				var r api.GenerateResponse
				if err := json.Unmarshal(b, &r); err != nil {
					return err
				}
				if r.RNNServe.FinishReason == "" || len(r.RNNServe.Tokens) != len(r.RNNServe.LogProbs) {
					return errString("incomplete generate response")
				}
				return nil
			})
		})
	})
}

type errString string

func (e errString) Error() string { return string(e) }

// checkLines calls each for every non-empty line of b (after prefix,
// which every line must have), telling it which is the last.
func checkLines(b []byte, prefix string, each func(line []byte, last bool) error) error {
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if len(sc.Bytes()) > 0 {
			lines = append(lines, append([]byte(nil), sc.Bytes()...))
		}
	}
	if len(lines) == 0 {
		return errString("an empty stream")
	}
	for i, l := range lines {
		rest, ok := bytes.CutPrefix(l, []byte(prefix))
		if !ok {
			return errString("a line without " + prefix + ": " + string(l))
		}
		if err := each(rest, i == len(lines)-1); err != nil {
			return err
		}
	}
	return nil
}

// FuzzInferEncoded drives the body reading of the infer path: the body
// sent as it is, gzip- or deflate-compressed (or claimed so when it is
// not), with or without a Content-Length.
func FuzzInferEncoded(f *testing.F) {
	h := fuzzServer(f).Handler()
	f.Add([]byte(`{"inputs": [{"name": "tokens", "datatype": "INT64", "shape": [1, 3], "data": [1, 2, 3]}]}`), uint8(1), false)
	f.Add([]byte(`{"inputs": [{"name": "tokens", "datatype": "INT32", "shape": [1, 1], "data": [7]}], "outputs": [{"name": "logits"}]}`), uint8(2), true)
	f.Add(bytes.Repeat([]byte(" "), 70000), uint8(1), true) // a bomb of white space
	f.Add([]byte(`not compressed`), uint8(4), false)
	f.Add([]byte(`{"inputs": []}`), uint8(7), true)
	f.Fuzz(func(t *testing.T, body []byte, enc uint8, chunked bool) {
		fuzzbound.Run(t, len(body), func() {
			var b bytes.Buffer
			name := ""
			switch enc % 8 {
			case 1:
				name = "gzip"
				zw := gzip.NewWriter(&b)
				zw.Write(body)
				zw.Close()
			case 2:
				name = "deflate"
				zw := zlib.NewWriter(&b)
				zw.Write(body)
				zw.Close()
			case 3, 4:
				name = []string{"gzip", "deflate"}[enc%8-3] // claimed, not done
				b.Write(body)
			case 5:
				name = "br"
				b.Write(body)
			default:
				b.Write(body)
			}
			var rd io.Reader = bytes.NewReader(b.Bytes())
			if chunked {
				rd = io.MultiReader(rd)
			}
			req := httptest.NewRequest(http.MethodPost, "/v2/models/lm/infer", rd)
			if chunked {
				req.ContentLength = -1
			}
			if name != "" {
				req.Header.Set("Content-Encoding", name)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			checkAnswer(t, w, inferOK(""))
		})
	})
}

// rawCodec sends and receives messages as the bytes given, so a fuzz
// target can put any bytes on the wire as a ModelInferRequest.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

var _ encoding.CodecV2 = rawCodec{}

// FuzzGRPCWire sends arbitrary bytes as a ModelInferRequest over a real
// gRPC connection, to ModelInfer or as one message of ModelStreamInfer:
// the server answers a message that parses with a response that parses or
// a code other than INTERNAL and UNKNOWN (bytes that do not parse get
// grpc-go's INTERNAL "failed to unmarshal"), and keeps answering.
func FuzzGRPCWire(f *testing.F) {
	for _, seed := range grpcFuzzSeeds() {
		data, err := proto.Marshal(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, false)
		f.Add(data, true)
	}
	s := fuzzServer(f)
	gs := s.NewGRPC()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go gs.Serve(ln)
	f.Cleanup(gs.Close)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallSendMsgSize(1<<20)))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { conn.Close() })
	f.Fuzz(func(t *testing.T, data []byte, stream bool) {
		fuzzbound.Run(t, len(data), func() {
			ctx := t.Context()
			// Bytes that are no protobuf message get grpc-go's own INTERNAL
			// ("failed to unmarshal") before any handler of ours runs; every
			// message that parses must get another code.
			parses := proto.Unmarshal(data, &pb.ModelInferRequest{}) == nil
			bad := func(err error) bool {
				c := status.Code(err)
				if !parses {
					return c == codes.Unknown || c == codes.Internal && !strings.Contains(err.Error(), "unmarshal")
				}
				return c == codes.Internal || c == codes.Unknown
			}
			var out []byte
			if !stream {
				err := conn.Invoke(ctx, "/inference.GRPCInferenceService/ModelInfer", &data, &out)
				if err != nil {
					if bad(err) {
						t.Fatalf("ModelInfer: %v", err)
					}
					return
				}
				var resp pb.ModelInferResponse
				if err := proto.Unmarshal(out, &resp); err != nil {
					t.Fatalf("response does not parse: %v", err)
				}
				grpcOutputs(t, &resp)
				return
			}
			desc := &grpc.StreamDesc{StreamName: "ModelStreamInfer", ServerStreams: true, ClientStreams: true}
			cs, err := conn.NewStream(ctx, desc, "/inference.GRPCInferenceService/ModelStreamInfer")
			if err != nil {
				t.Fatal(err)
			}
			if err := cs.SendMsg(&data); err != nil {
				t.Fatal(err)
			}
			cs.CloseSend()
			for {
				var msg []byte
				err := cs.RecvMsg(&msg)
				if err == io.EOF {
					return
				}
				if err != nil {
					if bad(err) {
						t.Fatalf("ModelStreamInfer: %v", err)
					}
					return
				}
				var r pb.ModelStreamInferResponse
				if err := proto.Unmarshal(msg, &r); err != nil {
					t.Fatalf("stream response does not parse: %v", err)
				}
				if strings.Contains(r.ErrorMessage, "internal error") {
					t.Fatalf("stream: %s", r.ErrorMessage)
				}
			}
		})
	})
}
