package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"rnnserve/server/api"
	pb "rnnserve/server/inferencepb"
	"rnnserve/server/internal/wire"
)

// grpcTest is a started test server with its REST front end, its gRPC
// front end on a loopback port, and a client of it.
type grpcTest struct {
	s    *Server
	rest string // REST base URL
	gs   *GRPCServer
	c    pb.GRPCInferenceServiceClient
	conn *grpc.ClientConn
}

// newGRPCTest starts the test repository's server with load and unload
// from testRepo, and its gRPC front end.
func newGRPCTest(t testing.TB, mutate func(*Options)) *grpcTest {
	t.Helper()
	s, hs := newTestServer(t, mutate, true)
	s.repo = repoOf(t, testRepo)
	s.opts.ModelControlMode = ControlExplicit
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := s.NewGRPC()
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := gs.Stop(ctx); err != nil {
			t.Errorf("gRPC stop: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve after Stop: %v", err)
		}
	})
	return &grpcTest{s: s, rest: hs.URL, gs: gs, c: pb.NewGRPCInferenceServiceClient(conn), conn: conn}
}

// codeOf is the gRPC code of a call's error.
func codeOf(err error) codes.Code { return status.Code(err) }

// i64Param and friends build wire parameters.
func boolParam(b bool) *pb.InferParameter   { return wire.ParamToGRPC(b) }
func i64Param(v int64) *pb.InferParameter   { return wire.ParamToGRPC(v) }
func strParam(s string) *pb.InferParameter  { return wire.ParamToGRPC(s) }
func f64Param(v float64) *pb.InferParameter { return wire.ParamToGRPC(v) }

// tokensInput is an INT64 tokens input with typed contents.
func tokensInput(rows [][]int64) *pb.ModelInferRequest_InferInputTensor {
	var flat []int64
	for _, r := range rows {
		flat = append(flat, r...)
	}
	return &pb.ModelInferRequest_InferInputTensor{Name: "tokens", Datatype: "INT64",
		Shape: []int64{int64(len(rows)), int64(len(rows[0]))}, Contents: &pb.InferTensorContents{Int64Contents: flat}}
}

// rawOf is a typed request turned into the same request with
// raw_input_contents.
func rawOf(req *pb.ModelInferRequest) *pb.ModelInferRequest {
	out := &pb.ModelInferRequest{ModelName: req.ModelName, ModelVersion: req.ModelVersion, Id: req.Id,
		Parameters: req.Parameters, Outputs: req.Outputs}
	for _, in := range req.Inputs {
		t := Tensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape}
		if err := wire.ContentsToTensor(&t, in.Contents); err != nil {
			panic(err)
		}
		o := OutputTensor{Datatype: t.Datatype, Float32: t.Float32, Int64: t.Int64, Bytes: t.Bytes}
		out.Inputs = append(out.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape})
		out.RawInputContents = append(out.RawInputContents, o.AppendRaw(nil))
	}
	return out
}

// grpcOutputs reads a gRPC response's outputs as parsedOutput, from raw or
// typed contents.
func grpcOutputs(t testing.TB, resp *pb.ModelInferResponse) []parsedOutput {
	t.Helper()
	raw := resp.GetRawOutputContents()
	if len(raw) > 0 && len(raw) != len(resp.Outputs) {
		t.Fatalf("%d raw outputs for %d outputs", len(raw), len(resp.Outputs))
	}
	var out []parsedOutput
	for i, o := range resp.Outputs {
		p := parsedOutput{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape}
		tn := Tensor{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape}
		var err error
		if len(raw) > 0 {
			p.Binary = true
			if o.Contents != nil {
				t.Fatalf("output %s has raw and typed contents", o.Name)
			}
			err = tn.DecodeRaw(raw[i])
		} else {
			err = wire.ContentsToTensor(&tn, o.Contents)
		}
		if err == nil {
			err = tn.Check()
		}
		if err != nil {
			t.Fatalf("output %s: %v", o.Name, err)
		}
		p.Float32, p.Int64, p.Bytes = tn.Float32, tn.Int64, tn.Bytes
		out = append(out, p)
	}
	return out
}

// sameOutputs fails unless two parsed responses hold the same outputs,
// in order, bit for bit (the binary flags aside).
func sameOutputs(t testing.TB, what string, a, b []parsedOutput) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d outputs vs %d", what, len(a), len(b))
	}
	for i := range a {
		if a[i].Name != b[i].Name {
			t.Fatalf("%s: output %d is %s vs %s", what, i, a[i].Name, b[i].Name)
		}
		sameBits(t, what+": "+a[i].Name, a[i], b[i])
	}
}

// TestGRPCMatchesREST: the same request over REST (JSON, binary tensor
// data) and gRPC (typed and raw contents, raw and typed outputs) gives
// bit-identical outputs, for token, feature and classification outputs.
func TestGRPCMatchesREST(t *testing.T) {
	g := newGRPCTest(t, nil)
	ctx := t.Context()
	for _, c := range []struct {
		name   string
		model  string
		json   string // the REST body's inputs and outputs
		input  *pb.ModelInferRequest_InferInputTensor
		output []*pb.ModelInferRequest_InferRequestedOutputTensor
	}{
		{"tokens", "lm", `"inputs": [` + tokensJSON([][]int64{{72, 105, 33}, {1, 2, 3}}) + `], "outputs": [{"name": "logits"}, {"name": "hidden"}, {"name": "cell"}, {"name": "top_k", "parameters": {"k": 3}}]`,
			tokensInput([][]int64{{72, 105, 33}, {1, 2, 3}}),
			[]*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits"}, {Name: "hidden"}, {Name: "cell"}, {Name: "top_k", Parameters: map[string]*pb.InferParameter{"k": i64Param(3)}}}},
		{"features", "feat", `"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 2, 3], "data": [0.5, -1.25, 3, 0.1, 0.2, 1e-3]}], "outputs": [{"name": "probs"}, {"name": "output"}]`,
			&pb.ModelInferRequest_InferInputTensor{Name: "features", Datatype: "FP32", Shape: []int64{1, 2, 3},
				Contents: &pb.InferTensorContents{Fp32Contents: []float32{0.5, -1.25, 3, 0.1, 0.2, 1e-3}}},
			[]*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "probs"}, {Name: "output"}}},
		{"classification", "lm", `"inputs": [` + tokensJSON([][]int64{{9, 8}}) + `], "outputs": [{"name": "probs", "parameters": {"classification": 4, "last_step": true}}]`,
			tokensInput([][]int64{{9, 8}}),
			[]*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "probs", Parameters: map[string]*pb.InferParameter{"classification": i64Param(4), "last_step": boolParam(true)}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body, hdr := post(t, g.rest+"/v2/models/"+c.model+"/infer", `{`+c.json+`}`)
			if code != 200 {
				t.Fatalf("REST JSON: %d %s", code, body)
			}
			jsonOut, err := splitResponse(body, hdr.Get(wire.HeaderLength))
			if err != nil {
				t.Fatal(err)
			}
			code, body, hdr = post(t, g.rest+"/v2/models/"+c.model+"/infer", `{"parameters": {"binary_data_output": true}, `+c.json+`}`)
			if code != 200 || hdr.Get(wire.HeaderLength) == "" {
				t.Fatalf("REST binary: %d %v %s", code, hdr, body)
			}
			binOut, err := splitResponse(body, hdr.Get(wire.HeaderLength))
			if err != nil {
				t.Fatal(err)
			}
			sameOutputs(t, "REST JSON vs binary", jsonOut, binOut)
			typed := &pb.ModelInferRequest{ModelName: c.model, Id: "req-7", Inputs: []*pb.ModelInferRequest_InferInputTensor{c.input}, Outputs: c.output}
			for _, v := range []struct {
				what string
				req  *pb.ModelInferRequest
				raw  bool
			}{
				{"typed in, raw out", typed, true},
				{"raw in, raw out", rawOf(typed), true},
				{"typed in, typed out", withParams(typed, wire.ParamBinaryOutput, boolParam(false)), false},
				{"raw in, typed out", withParams(rawOf(typed), wire.ParamBinaryOutput, boolParam(false)), false},
			} {
				resp, err := g.c.ModelInfer(ctx, v.req)
				if err != nil {
					t.Fatalf("%s: %v", v.what, err)
				}
				if resp.ModelName != c.model || resp.ModelVersion != "1" || resp.Id != "req-7" || (len(resp.RawOutputContents) > 0) != v.raw {
					t.Fatalf("%s: response %v", v.what, resp)
				}
				sameOutputs(t, "REST vs gRPC "+v.what, jsonOut, grpcOutputs(t, resp))
			}
		})
	}
}

// withParams is a copy of req with one more request parameter.
func withParams(req *pb.ModelInferRequest, key string, v *pb.InferParameter) *pb.ModelInferRequest {
	out := proto.Clone(req).(*pb.ModelInferRequest)
	if out.Parameters == nil {
		out.Parameters = map[string]*pb.InferParameter{}
	}
	out.Parameters[key] = v
	return out
}

// TestGRPCHealthAndMetadata covers the server, health and metadata calls.
func TestGRPCHealthAndMetadata(t *testing.T) {
	g := newGRPCTest(t, nil)
	ctx := t.Context()
	if r, err := g.c.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !r.Live {
		t.Errorf("live: %v %v", r, err)
	}
	if r, err := g.c.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || !r.Ready {
		t.Errorf("ready: %v %v", r, err)
	}
	h := healthpb.NewHealthClient(g.conn)
	for _, svc := range []string{"", "inference.GRPCInferenceService"} {
		if r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: svc}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, r, err)
		}
	}
	md, err := g.c.ServerMetadata(ctx, &pb.ServerMetadataRequest{})
	if err != nil || md.Name != "rnnserve" || md.Version != Version || !strings.Contains(strings.Join(md.Extensions, " "), "sequence") {
		t.Errorf("server metadata: %v %v", md, err)
	}
	for _, ver := range []string{"", "1"} {
		if r, err := g.c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "lm", Version: ver}); err != nil || !r.Ready {
			t.Errorf("model ready %q: %v %v", ver, r, err)
		}
	}
	mm, err := g.c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "lm"})
	if err != nil {
		t.Fatal(err)
	}
	var rnn api.RNNMetadata
	want := seqOf(t, g.s, "lm").meta
	if mm.Name != "lm" || fmt.Sprint(mm.Versions) != "[1]" || mm.Platform != want.Platform || len(mm.Inputs) != 2 || mm.Inputs[0].Name != "tokens" || mm.Inputs[1].Name != "lengths" ||
		fmt.Sprint(mm.Inputs[0].Shape) != "[-1 -1]" || len(mm.Outputs) != len(want.Outputs) || json.Unmarshal([]byte(mm.Properties["rnn"]), &rnn) != nil || rnn.VocabSize != 256 {
		t.Errorf("model metadata: %v", mm)
	}
	cfg, err := g.c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "lm", Version: "1"})
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	if c.Name != "lm" || c.Backend != "rnnserve" || c.MaxBatchSize != 64 || len(c.Input) != 2 || c.Input[0].DataType != pb.DataType_TYPE_INT64 || !c.Input[1].Optional ||
		fmt.Sprint(c.Input[0].Dims) != "[-1]" || c.GetSequenceBatching() == nil || c.InstanceGroup[0].Kind != pb.ModelInstanceGroup_KIND_CPU ||
		!strings.Contains(c.Parameters["rnnserve"].GetStringValue(), `"kind":"sequence"`) {
		t.Errorf("model config: %v", c)
	}
}

// TestGRPCSequencesAndStream runs one sequence in three parts over
// ModelInfer and the same over ModelStreamInfer: both end with the outputs
// of the whole sequence run at once.
func TestGRPCSequencesAndStream(t *testing.T) {
	g := newGRPCTest(t, nil)
	ctx := t.Context()
	all := []int64{5, 6, 7, 8, 9, 10, 11}
	parts := [][]int64{all[:3], all[3:4], all[4:]}
	outs := []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "hidden"}, {Name: "logits", Parameters: map[string]*pb.InferParameter{"last_step": boolParam(true)}}}
	whole, err := g.c.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{all})}, Outputs: outs})
	if err != nil {
		t.Fatal(err)
	}
	want := grpcOutputs(t, whole)
	part := func(id *pb.InferParameter, i int) *pb.ModelInferRequest {
		params := map[string]*pb.InferParameter{"sequence_id": id, "sequence_start": boolParam(i == 0), "sequence_end": boolParam(i == len(parts)-1)}
		return &pb.ModelInferRequest{ModelName: "lm", Id: strconv.Itoa(i), Parameters: params, Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{parts[i]})}, Outputs: outs}
	}
	var last *pb.ModelInferResponse
	for i := range parts {
		if last, err = g.c.ModelInfer(ctx, part(i64Param(41), i)); err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
	}
	near(t, "hidden (unary sequence)", toF64(grpcOutputs(t, last)[0].Float32), want[0].Float32)
	if _, err := g.c.ModelInfer(ctx, part(i64Param(41), 1)); codeOf(err) != codes.FailedPrecondition {
		t.Errorf("continuing an ended sequence: %v, want FailedPrecondition", err)
	}
	if _, err := g.c.ModelInfer(ctx, part(strParam("nobody"), 1)); codeOf(err) != codes.NotFound {
		t.Errorf("unknown sequence: %v, want NotFound", err)
	}

	stream, err := g.c.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range parts {
		if err := stream.Send(part(strParam("s-1"), i)); err != nil {
			t.Fatal(err)
		}
	}
	stream.CloseSend()
	var got []*pb.ModelInferResponse
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.ErrorMessage != "" {
			t.Fatalf("stream error: %s", r.ErrorMessage)
		}
		if !r.InferResponse.Parameters[wire.ParamFinal].GetBoolParam() {
			t.Errorf("response %s is not final", r.InferResponse.Id)
		}
		got = append(got, r.InferResponse)
	}
	if len(got) != 3 || got[2].Id != "2" {
		t.Fatalf("%d responses", len(got))
	}
	sameOutputs(t, "stream vs unary sequence", grpcOutputs(t, last), grpcOutputs(t, got[2]))
}

func toF64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// TestGRPCGenerate: a generation over ModelStreamInfer streams the tokens
// REST's generate gives for the same seed, the last response final; the
// unary form answers them all at once.
func TestGRPCGenerate(t *testing.T) {
	g := newGRPCTest(t, nil)
	ctx := t.Context()
	code, body, _ := post(t, g.rest+"/v2/models/lm/generate", `{"text_input": "Hi", "parameters": {"max_tokens": 8, "temperature": 1, "top_k": 20, "top_p": 0.9, "seed": 42}}`)
	var rest api.GenerateResponse
	if code != 200 || json.Unmarshal(body, &rest) != nil {
		t.Fatalf("REST generate: %d %s", code, body)
	}
	req := func() *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "lm", Id: "g",
			Parameters: map[string]*pb.InferParameter{"temperature": f64Param(1), "top_k": i64Param(20), "seed": i64Param(42)},
			Inputs: []*pb.ModelInferRequest_InferInputTensor{
				{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("Hi")}}},
				{Name: "max_tokens", Datatype: "INT32", Shape: []int64{1}, Contents: &pb.InferTensorContents{IntContents: []int32{8}}},
				{Name: "top_p", Datatype: "FP32", Shape: []int64{1}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{0.9}}},
			}}
	}
	// top_p 0.9 as a float32 tensor is 0.8999999761581421, not REST's
	// 0.9; the seed's draws must not fall between: the tokens are checked
	// equal below.
	whole, err := g.c.ModelInfer(ctx, req())
	if err != nil {
		t.Fatal(err)
	}
	// REST's JSON text has U+FFFD for bytes that are not UTF-8: compare
	// the tokens, and the text with the bytes of the tokens.
	var restText []byte
	for _, tok := range rest.RNNServe.Tokens {
		restText = append(restText, byte(tok))
	}
	wo := grpcOutputs(t, whole)
	if len(wo) != 3 || !bytes.Equal(wo[0].Bytes[0], restText) || fmt.Sprint(wo[1].Int64) != fmt.Sprint(rest.RNNServe.Tokens) ||
		whole.Parameters[wire.ParamFinishReason].GetStringParam() != "length" {
		t.Fatalf("unary generation %v, REST %s", wo, body)
	}
	for _, emptyFinal := range []bool{false, true} {
		stream, err := g.c.ModelStreamInfer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r := req()
		r.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "text_output"}}
		if emptyFinal {
			r.Parameters[wire.ParamEmptyFinal] = boolParam(true)
		}
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
		stream.CloseSend()
		var text []byte
		n, finals := 0, 0
		var last *pb.ModelInferResponse
		for {
			resp, err := stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil || resp.ErrorMessage != "" {
				t.Fatalf("stream: %v %q", err, resp.GetErrorMessage())
			}
			last = resp.InferResponse
			if last.Parameters[wire.ParamFinal].GetBoolParam() {
				finals++
			}
			if len(last.Outputs) > 0 {
				n++
				text = append(text, grpcOutputs(t, last)[0].Bytes[0]...)
			}
		}
		if !bytes.Equal(text, restText) || n != 8 || finals != 1 || !last.Parameters[wire.ParamFinal].GetBoolParam() ||
			last.Parameters[wire.ParamFinishReason].GetStringParam() != "length" || emptyFinal != (len(last.Outputs) == 0) {
			t.Errorf("empty final %v: %d token responses, %d final, text %q, want %q; last %v", emptyFinal, n, finals, text, restText, last)
		}
	}
	// A bad generation request fails on its own; the stream goes on.
	stream, err := g.c.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bad := req()
	bad.Parameters["colour"] = strParam("red")
	stream.Send(bad)
	stream.Send(&pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{1}})}})
	stream.CloseSend()
	r1, err1 := stream.Recv()
	r2, err2 := stream.Recv()
	if err1 != nil || !strings.Contains(r1.ErrorMessage, "colour") || err2 != nil || r2.ErrorMessage != "" || r2.InferResponse == nil {
		t.Errorf("bad then good: %v %v / %v %v", r1, err1, r2, err2)
	}
	// triton_enable_empty_final_response that is not a boolean fails its
	// request, as any parameter of the wrong type does, rather than
	// reading as false.
	if stream, err = g.c.ModelStreamInfer(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*pb.ModelInferRequest{req(), {ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{1}})}}} {
		r.Parameters = map[string]*pb.InferParameter{wire.ParamEmptyFinal: strParam("true")}
		stream.Send(r)
	}
	stream.CloseSend()
	for i := range 2 {
		r, err := stream.Recv()
		if err != nil || !strings.Contains(r.ErrorMessage, wire.ParamEmptyFinal+" must be a boolean") {
			t.Errorf("%s as a string (request %d): %v %v", wire.ParamEmptyFinal, i, r, err)
		}
	}
}

// TestGRPCBadInput: each bad request gets its code, and the server keeps
// serving.
func TestGRPCBadInput(t *testing.T) {
	g := newGRPCTest(t, func(o *Options) { o.MaxBodyBytes = 64 << 10 })
	ctx := t.Context()
	ok := func() *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{1, 2}})}}
	}
	overrun := binary.LittleEndian.AppendUint32(nil, 100)
	overrun = append(overrun, "abc"...)
	for _, c := range []struct {
		name string
		req  *pb.ModelInferRequest
		code codes.Code
		want string
	}{
		{"raw size", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "INT64", Shape: []int64{1, 2}}},
			RawInputContents: [][]byte{make([]byte, 12)}}, codes.InvalidArgument, "12 bytes of binary data, want 16"},
		{"BYTES prefix overrun", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "BYTES", Shape: []int64{1}}},
			RawInputContents: [][]byte{overrun}}, codes.InvalidArgument, "length 100"},
		{"raw count", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "INT64", Shape: []int64{1, 1}}},
			RawInputContents: [][]byte{make([]byte, 8), make([]byte, 8)}}, codes.InvalidArgument, "2 raw_input_contents for 1 inputs"},
		{"raw and typed", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{1}})},
			RawInputContents: [][]byte{make([]byte, 8)}}, codes.InvalidArgument, "use one or the other"},
		{"no contents", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "INT64", Shape: []int64{1, 1}}}},
			codes.InvalidArgument, "no contents"},
		{"wrong field", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "INT64", Shape: []int64{1, 1},
			Contents: &pb.InferTensorContents{Fp32Contents: []float32{1}}}}}, codes.InvalidArgument, "belongs in int64_contents"},
		{"INT8 range", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "INT8", Shape: []int64{1, 1},
			Contents: &pb.InferTensorContents{IntContents: []int32{300}}}}}, codes.InvalidArgument, "out of range for INT8"},
		{"count", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "INT64", Shape: []int64{1, 3},
			Contents: &pb.InferTensorContents{Int64Contents: []int64{1}}}}}, codes.InvalidArgument, "want 3"},
		{"token range", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{256}})}}, codes.InvalidArgument, ""},
		{"mixed outputs", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{1}})},
			Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "hidden"}, {Name: "cell", Parameters: map[string]*pb.InferParameter{"binary_data": boolParam(false)}}}},
			codes.InvalidArgument, "all outputs or for none"},
		{"mixed outputs, one raw", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{1}})},
			Parameters: map[string]*pb.InferParameter{wire.ParamBinaryOutput: boolParam(false)},
			Outputs:    []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "hidden"}, {Name: "cell", Parameters: map[string]*pb.InferParameter{"binary_data": boolParam(true)}}}},
			codes.InvalidArgument, "all outputs or for none"},
		{"unknown output", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{1}})},
			Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "colour"}}}, codes.InvalidArgument, ""},
		{"unknown output parameter", &pb.ModelInferRequest{ModelName: "lm", Inputs: ok().Inputs,
			Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "hidden", Parameters: map[string]*pb.InferParameter{"colour": strParam("red")}}}}, codes.InvalidArgument, "colour"},
		{"empty parameter", withParams(ok(), "sequence_id", &pb.InferParameter{}), codes.InvalidArgument, "no value"},
		{"shared memory", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "INT64", Shape: []int64{1, 1},
			Parameters: map[string]*pb.InferParameter{"shared_memory_region": strParam("r")}}}}, codes.InvalidArgument, "shared memory"},
		{"FP16", &pb.ModelInferRequest{ModelName: "feat", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "features", Datatype: "FP16", Shape: []int64{1, 1, 3}}},
			RawInputContents: [][]byte{make([]byte, 6)}}, codes.InvalidArgument, "not supported"},
		{"no model name", &pb.ModelInferRequest{Inputs: ok().Inputs}, codes.InvalidArgument, "model_name"},
		{"unknown model", &pb.ModelInferRequest{ModelName: "nope", Inputs: ok().Inputs}, codes.NotFound, "unknown model"},
		{"unknown version", &pb.ModelInferRequest{ModelName: "lm", ModelVersion: "7", Inputs: ok().Inputs}, codes.NotFound, "versions served: [1]"},
		{"too large", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "INT64", Shape: []int64{1, 10000}}},
			RawInputContents: [][]byte{make([]byte, 80000)}}, codes.ResourceExhausted, "larger than max"},
		{"generate: not a language model", &pb.ModelInferRequest{ModelName: "feat", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("x")}}}}}, codes.InvalidArgument, "cannot generate"},
		{"generate: two prompts", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "text_input", Datatype: "BYTES", Shape: []int64{2}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("x"), []byte("y")}}}}}, codes.InvalidArgument, "want one string"},
		{"generate: two text_input tensors", &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("x")}}},
			{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("y")}}}}}, codes.InvalidArgument, `input "text_input" given twice`},
		{"generate: bad max_tokens", &pb.ModelInferRequest{ModelName: "lm", Parameters: map[string]*pb.InferParameter{"max_tokens": i64Param(0)}, Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("x")}}}}}, codes.InvalidArgument, "max_tokens"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := g.c.ModelInfer(ctx, c.req)
			if codeOf(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.want) {
				t.Errorf("%v, want %v mentioning %q", err, c.code, c.want)
			}
			if _, err := g.c.ModelInfer(ctx, ok()); err != nil {
				t.Errorf("the server stopped serving: %v", err)
			}
		})
	}
	// A deadline that has passed.
	past, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	if _, err := g.c.ModelInfer(past, ok()); codeOf(err) != codes.DeadlineExceeded {
		t.Errorf("past deadline: %v", err)
	}
	for _, c := range []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"metadata of an unknown version", func() error {
			_, err := g.c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "lm", Version: "2"})
			return err
		}, codes.NotFound},
		{"ready of an unknown model", func() error {
			_, err := g.c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "nope"})
			return err
		}, codes.NotFound},
		{"config of an unknown version", func() error {
			_, err := g.c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "lm", Version: "0"})
			return err
		}, codes.NotFound},
		{"statistics of an unknown model", func() error {
			_, err := g.c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "nope"})
			return err
		}, codes.NotFound},
	} {
		if err := c.call(); codeOf(err) != c.code {
			t.Errorf("%s: %v, want %v", c.name, err, c.code)
		}
	}
}

// TestGRPCRepository: index, load and unload over gRPC, with bad names,
// and an unload that ends a live sequence.
func TestGRPCRepository(t *testing.T) {
	g := newGRPCTest(t, nil)
	ctx := t.Context()
	idx, err := g.c.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{})
	if err != nil || len(idx.Models) != 3 || idx.Models[0].Name != "bi" || idx.Models[0].State != "READY" {
		t.Fatalf("index: %v %v", idx, err)
	}
	for _, c := range []struct {
		name string
		code codes.Code
	}{{"a/b", codes.InvalidArgument}, {"..", codes.InvalidArgument}, {"../lm", codes.InvalidArgument}, {"", codes.InvalidArgument}, {"missing", codes.NotFound}} {
		if _, err := g.c.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: c.name}); codeOf(err) != c.code {
			t.Errorf("load %q: %v, want %v", c.name, err, c.code)
		}
	}
	if _, err := g.c.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "lm", Parameters: map[string]*pb.ModelRepositoryParameter{
		"config": {ParameterChoice: &pb.ModelRepositoryParameter_StringParam{StringParam: "{}"}}}}); codeOf(err) != codes.InvalidArgument {
		t.Errorf("load with a config override: %v", err)
	}
	if _, err := g.c.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{RepositoryName: "other"}); codeOf(err) != codes.InvalidArgument {
		t.Errorf("index of another repository: %v", err)
	}
	// A live sequence, then unload: the model is gone; loaded again, the
	// sequence has ended.
	seq := func(start bool) error {
		_, err := g.c.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "lm",
			Parameters: map[string]*pb.InferParameter{"sequence_id": i64Param(5), "sequence_start": boolParam(start)},
			Inputs:     []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{1, 2}})}})
		return err
	}
	if err := seq(true); err != nil {
		t.Fatal(err)
	}
	if _, err := g.c.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{ModelName: "lm",
		Parameters: map[string]*pb.ModelRepositoryParameter{"unload_dependents": {ParameterChoice: &pb.ModelRepositoryParameter_BoolParam{BoolParam: true}}}}); err != nil {
		t.Fatalf("unload: %v", err)
	}
	if err := seq(false); codeOf(err) != codes.NotFound {
		t.Errorf("sequence of an unloaded model: %v, want NotFound", err)
	}
	if _, err := g.c.RepositoryModelUnload(ctx, &pb.RepositoryModelUnloadRequest{ModelName: "lm"}); codeOf(err) != codes.NotFound {
		t.Errorf("unload twice: %v", err)
	}
	idx, _ = g.c.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{})
	if idx.Models[2].Name != "lm" || idx.Models[2].State != "UNAVAILABLE" || idx.Models[2].Reason != "unloaded" {
		t.Errorf("index after unload: %v", idx)
	}
	if r, _ := g.c.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{Ready: true}); len(r.Models) != 2 {
		t.Errorf("ready index: %v", r)
	}
	if _, err := g.c.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "lm", RepositoryName: "models"}); err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := seq(false); codeOf(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "unloaded") {
		t.Errorf("sequence after reload: %v, want FailedPrecondition saying it was unloaded", err)
	}
	if err := seq(true); err != nil {
		t.Errorf("a new sequence after reload: %v", err)
	}
	// Without a repository, load and unload are refused.
	g.s.repo = nil
	if _, err := g.c.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "lm"}); codeOf(err) != codes.FailedPrecondition {
		t.Errorf("load without a repository: %v", err)
	}
}

// TestGRPCStatisticsAndMetrics: gRPC requests count in Triton's statistics
// as REST ones do, and in the metrics under protocol="grpc".
func TestGRPCStatisticsAndMetrics(t *testing.T) {
	g := newGRPCTest(t, nil)
	ctx := t.Context()
	for range 3 {
		if _, err := g.c.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "feat", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "features", Datatype: "FP32",
			Shape: []int64{2, 1, 3}, Contents: &pb.InferTensorContents{Fp32Contents: make([]float32, 6)}}}}); err != nil {
			t.Fatal(err)
		}
	}
	g.c.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "feat"}) // fails: no inputs
	g.c.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "feat", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "features", Datatype: "FP32"}}})
	st, err := g.c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "feat"})
	if err != nil || len(st.ModelStats) != 1 {
		t.Fatalf("statistics: %v %v", st, err)
	}
	ms := st.ModelStats[0]
	is := ms.InferenceStats
	if ms.Name != "feat" || ms.Version != "1" || ms.InferenceCount != 6 || is.Success.Count != 3 || is.Fail.Count != 2 || is.ComputeInfer.Count != 3 ||
		is.ComputeInfer.Ns == 0 || ms.LastInference == 0 {
		t.Errorf("statistics %v", ms)
	}
	code, body := get(t, g.rest+"/v2/models/feat/stats")
	var rest api.ModelStatsResponse
	if code != 200 || json.Unmarshal(body, &rest) != nil || rest.ModelStats[0].InferenceCount != ms.InferenceCount || rest.ModelStats[0].InferenceStats.Fail.Count != is.Fail.Count {
		t.Errorf("REST statistics %s, gRPC %v", body, ms)
	}
	if all, err := g.c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{}); err != nil || len(all.ModelStats) != 3 {
		t.Errorf("every model's statistics: %v %v", all, err)
	}
	if n := testutil.ToFloat64(g.s.metrics.requests.WithLabelValues("feat", "infer", "grpc", "200")); n != 3 {
		t.Errorf("%v grpc requests with code 200 in the metrics, want 3", n)
	}
	if n := testutil.ToFloat64(g.s.metrics.requests.WithLabelValues("feat", "infer", "grpc", "400")); n != 2 {
		t.Errorf("%v failed grpc requests in the metrics, want 2", n)
	}
}

// TestGRPCStop: after Stop the health service is NOT_SERVING and new
// calls fail; Serve has returned nil (checked by the cleanup).
func TestGRPCStop(t *testing.T) {
	g := newGRPCTest(t, nil)
	h := healthpb.NewHealthClient(g.conn)
	if r, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", r, err)
	}
	// A stream open and idle during Stop gets a last response saying the
	// server is shutting down and ends cleanly, without holding the drain.
	stream, err := g.c.ModelStreamInfer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{1}})}})
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := g.gs.Stop(ctx); err != nil || time.Since(start) > time.Second {
		t.Errorf("stop with an idle open stream: %v after %v, want nil at once", err, time.Since(start))
	}
	last, err := stream.Recv()
	if err != nil || !strings.Contains(last.GetErrorMessage(), "shutting down") {
		t.Errorf("the idle stream's last response: %v %v, want an error_message saying the server is shutting down", last, err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Errorf("after the last response: %v, want the stream ended (OK)", err)
	}
	if _, err := g.c.ServerLive(t.Context(), &pb.ServerLiveRequest{}); codeOf(err) != codes.Unavailable {
		t.Errorf("after stop: %v", err)
	}
}
