package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jhump/protoreflect/v2/grpcdynamic"
	"github.com/jhump/protoreflect/v2/grpcreflect"
	triton "github.com/sunhailin-Leo/triton-service-go/v2/nvidia_inferenceserver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The gRPC side of the conformance suite: grpcTransport runs every
// conformance case through the same third-party client
// (github.com/sunhailin-Leo/triton-service-go/v2) built on a
// grpc.ClientConn: its wrapper calls where it has them, and the
// Triton-generated stub it ships (NewGRPCInferenceServiceClient) for what
// the wrapper leaves out (request parameters, ModelStreamInfer).
// TestGRPCProtocol adds what only gRPC has: the standard health service,
// server reflection used as grpcurl uses it (github.com/jhump/protoreflect/v2),
// the server's schema checked field by field against Triton's own, the
// message size limit, and bad input answered with the right codes.
//
// This package never links rnnserve's generated protocol code, nor
// grpc-go's health package: the client module's generated code registers
// the same message names (inference.*, grpc.health.v1.*), and one binary
// holding both would refuse to start.

// maxMessage is the largest message the test clients send or take.
const maxMessage = 64 << 20

// dialGRPC connects to a gRPC address.
func dialGRPC(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// grpcTransport is the third-party client over gRPC.
type grpcTransport struct {
	c    *triton.TritonClientService
	stub triton.GRPCInferenceServiceClient
}

func newGRPCTransport(t *testing.T, addr string) *grpcTransport {
	conn := dialGRPC(t, addr)
	c, err := triton.NewTritonClientWithOnlyGRPC(conn, triton.WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return &grpcTransport{c: c, stub: triton.NewGRPCInferenceServiceClient(conn)}
}

func (g *grpcTransport) name() string                        { return "grpc" }
func (g *grpcTransport) client() *triton.TritonClientService { return g.c }

// inferParam converts a request or output parameter.
func inferParam(v any) (*triton.InferParameter, error) {
	switch x := v.(type) {
	case bool:
		return &triton.InferParameter{ParameterChoice: &triton.InferParameter_BoolParam{BoolParam: x}}, nil
	case int:
		return &triton.InferParameter{ParameterChoice: &triton.InferParameter_Int64Param{Int64Param: int64(x)}}, nil
	case int64:
		return &triton.InferParameter{ParameterChoice: &triton.InferParameter_Int64Param{Int64Param: x}}, nil
	case float64:
		return &triton.InferParameter{ParameterChoice: &triton.InferParameter_DoubleParam{DoubleParam: x}}, nil
	case string:
		return &triton.InferParameter{ParameterChoice: &triton.InferParameter_StringParam{StringParam: x}}, nil
	}
	return nil, fmt.Errorf("parameter of type %T", v)
}

func inferParams(m map[string]any) (map[string]*triton.InferParameter, error) {
	if m == nil {
		return nil, nil
	}
	out := map[string]*triton.InferParameter{}
	for k, v := range m {
		p, err := inferParam(v)
		if err != nil {
			return nil, err
		}
		out[k] = p
	}
	return out, nil
}

// rawTensor lays a tensor's elements out raw, little-endian: Triton's binary
// tensor data over HTTP, raw_input_contents over gRPC (BYTES elements each
// a 4-byte length and its bytes).
func rawTensor(t tensorIn) []byte {
	var data []byte
	if t.bytes != nil {
		for _, b := range t.bytes {
			data = binary.LittleEndian.AppendUint32(data, uint32(len(b)))
			data = append(data, b...)
		}
		return data
	}
	for _, v := range t.ints {
		data = binary.LittleEndian.AppendUint64(data, uint64(v))
	}
	return data
}

// grpcRequest builds an infer request: raw_input_contents when any input
// asks for binary data (gRPC has one encoding for all inputs), typed
// contents otherwise; outputs not asked as binary get binary_data false
// (typed contents).
func grpcRequest(model string, in []tensorIn, outs []outputReq, params map[string]any) (*triton.ModelInferRequest, error) {
	req := &triton.ModelInferRequest{ModelName: model, ModelVersion: "1"}
	raw := slices.ContainsFunc(in, func(t tensorIn) bool { return t.binary })
	for _, t := range in {
		ti := &triton.ModelInferRequest_InferInputTensor{Name: t.name, Datatype: t.datatype, Shape: t.shape}
		switch {
		case raw:
			req.RawInputContents = append(req.RawInputContents, rawTensor(t))
		case t.bytes != nil:
			ti.Contents = &triton.InferTensorContents{BytesContents: t.bytes}
		default:
			ti.Contents = &triton.InferTensorContents{Int64Contents: t.ints}
		}
		req.Inputs = append(req.Inputs, ti)
	}
	for _, o := range outs {
		p := map[string]any{}
		for k, v := range o.params {
			p[k] = v
		}
		if !o.binary {
			p["binary_data"] = false
		}
		wp, err := inferParams(p)
		if err != nil {
			return nil, err
		}
		req.Outputs = append(req.Outputs, &triton.ModelInferRequest_InferRequestedOutputTensor{Name: o.name, Parameters: wp})
	}
	var err error
	req.Parameters, err = inferParams(params)
	return req, err
}

func (g *grpcTransport) infer(ctx context.Context, model string, in []tensorIn, outs []outputReq, params map[string]any) ([]tensorOut, error) {
	req, err := grpcRequest(model, in, outs, params)
	if err != nil {
		return nil, err
	}
	if params == nil {
		// The client's own infer call: it sends inputs, outputs and raw
		// contents, no request parameters.
		res, err := g.c.ModelGRPCInfer(ctx, req.Inputs, req.Outputs, req.RawInputContents, model, "1", decodeGRPCResponse)
		if err != nil {
			return nil, err
		}
		out := make([]tensorOut, len(res))
		for i, r := range res {
			out[i] = r.(tensorOut)
		}
		return out, nil
	}
	resp, err := g.stub.ModelInfer(ctx, req)
	if err != nil {
		return nil, err
	}
	return grpcOutputs(resp)
}

// decodeGRPCResponse is the client's decoder callback.
func decodeGRPCResponse(response any, _ ...any) ([]any, error) {
	outs, err := grpcOutputs(response.(*triton.ModelInferResponse))
	if err != nil {
		return nil, err
	}
	res := make([]any, len(outs))
	for i, o := range outs {
		res[i] = o
	}
	return res, nil
}

// grpcOutputs reads a response's outputs from raw_output_contents or typed
// contents.
func grpcOutputs(resp *triton.ModelInferResponse) ([]tensorOut, error) {
	raw := resp.GetRawOutputContents()
	if len(raw) > 0 && len(raw) != len(resp.Outputs) {
		return nil, fmt.Errorf("%d raw outputs for %d outputs", len(raw), len(resp.Outputs))
	}
	var out []tensorOut
	for i, o := range resp.Outputs {
		t := tensorOut{name: o.Name, datatype: o.Datatype, shape: o.Shape}
		if len(raw) == 0 {
			c := o.GetContents()
			t.floats, t.ints, t.bytes = c.GetFp32Contents(), c.GetInt64Contents(), c.GetBytesContents()
			out = append(out, t)
			continue
		}
		if err := fromRaw(&t, raw[i]); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// fromRaw fills t's elements from raw little-endian data (Triton's binary
// tensor data, gRPC's raw contents) by its datatype.
func fromRaw(t *tensorOut, r []byte) error {
	switch t.datatype {
	case "FP32":
		for k := 0; k+4 <= len(r); k += 4 {
			t.floats = append(t.floats, math.Float32frombits(binary.LittleEndian.Uint32(r[k:])))
		}
	case "INT64":
		for k := 0; k+8 <= len(r); k += 8 {
			t.ints = append(t.ints, int64(binary.LittleEndian.Uint64(r[k:])))
		}
	case "BYTES":
		for len(r) >= 4 {
			l := int(binary.LittleEndian.Uint32(r))
			if 4+l > len(r) {
				return fmt.Errorf("output %s: BYTES element overruns", t.name)
			}
			t.bytes = append(t.bytes, r[4:4+l])
			r = r[4+l:]
		}
	default:
		return fmt.Errorf("output %s: datatype %s", t.name, t.datatype)
	}
	return nil
}

func (g *grpcTransport) load(ctx context.Context, model string) error {
	_, err := g.c.ModelLoadWithGRPC(ctx, "", model, nil)
	return err
}

func (g *grpcTransport) unload(ctx context.Context, model string) error {
	_, err := g.c.ModelUnloadWithGRPC(ctx, "", model, nil)
	return err
}

// stream sends one generation request on ModelStreamInfer and reads a
// response per token until the one marked triton_final_response.
func (g *grpcTransport) stream(ctx context.Context, model, text string, maxTokens int) ([]int64, string, error) {
	st, err := g.stub.ModelStreamInfer(ctx)
	if err != nil {
		return nil, "", err
	}
	params, _ := inferParams(map[string]any{"max_tokens": maxTokens, "temperature": 0.0})
	err = st.Send(&triton.ModelInferRequest{ModelName: model, Parameters: params,
		Inputs: []*triton.ModelInferRequest_InferInputTensor{{Name: "text_input", Datatype: "BYTES", Shape: []int64{1},
			Contents: &triton.InferTensorContents{BytesContents: [][]byte{[]byte(text)}}}},
		Outputs: []*triton.ModelInferRequest_InferRequestedOutputTensor{{Name: "token_ids"}, {Name: "text_output"}}})
	if err != nil {
		return nil, "", err
	}
	var toks []int64
	for {
		r, err := st.Recv()
		if err != nil {
			return nil, "", err
		}
		if r.ErrorMessage != "" {
			return nil, "", errors.New(r.ErrorMessage)
		}
		resp := r.InferResponse
		outs, err := grpcOutputs(resp)
		if err != nil {
			return nil, "", err
		}
		if len(outs) == 2 {
			if len(outs[0].ints) != 1 || len(outs[1].bytes) != 1 || outs[1].bytes[0][0] != byte(outs[0].ints[0]) {
				return nil, "", fmt.Errorf("token response %v", outs)
			}
			toks = append(toks, outs[0].ints...)
		}
		if resp.Parameters["triton_final_response"].GetBoolParam() {
			st.CloseSend()
			if _, err := st.Recv(); err != io.EOF {
				return nil, "", fmt.Errorf("after the final response: %v, want the end of the stream", err)
			}
			return toks, resp.Parameters["finish_reason"].GetStringParam(), nil
		}
	}
}

func (g *grpcTransport) rawJSON(context.Context, string) ([]byte, error) { return nil, nil }

// serveRepository builds cmd/serve and serves a model repository holding
// a small GRU language model, "spare", with REST and gRPC on free loopback
// ports until the test ends. setup gets the module root, the test's
// directory and the repository directory, may add models, and returns
// more flags. It returns the REST and gRPC addresses.
func serveRepository(ctx context.Context, t *testing.T, setup func(root, dir, repo string) []string) (httpAddr, grpcAddr string) {
	t.Helper()
	root := repoRoot(t)
	dir := t.TempDir()
	buildCtx, cancelBuild := context.WithTimeout(context.Background(), buildTimeout)
	defer cancelBuild()
	bin := buildServer(buildCtx, t, root, dir)
	repo := filepath.Join(dir, "models")
	writeFile(t, filepath.Join(repo, "spare", "model.yaml"), "cell: gru\ninput_size: 8\nhidden_size: 16\nembedding: {vocab_size: 256}\nhead: {out_features: 256, activation: log_softmax}\nseed: 3\n")
	extra := setup(root, dir, repo)
	_, httpAddr = startOnFreePort(ctx, t, "serve", dir, bin, func(addr string) []string {
		grpcAddr = freeAddr(t)
		return append([]string{"-listen", addr, "-grpc-listen", grpcAddr, "-model-repository", repo, "-model-control-mode", "explicit", "-load-model", "*"}, extra...)
	}, "/v2/health/ready")
	return httpAddr, grpcAddr
}

// TestGRPCProtocol covers what only the gRPC API has, against the real
// server binary.
func TestGRPCProtocol(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test builds and runs the server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout+runTimeout) // serveRepository builds first
	defer cancel()
	_, grpcAddr := serveRepository(ctx, t, func(_, dir, _ string) []string {
		cfg := filepath.Join(dir, "serve.yaml")
		writeFile(t, cfg, "server:\n  max_body_bytes: 65536\n")
		return []string{"-config", cfg}
	})
	conn := dialGRPC(t, grpcAddr)
	stub := triton.NewGRPCInferenceServiceClient(conn)

	t.Run("health", func(t *testing.T) {
		// The client module ships its own build of the standard health
		// service (grpc.health.v1), which is what it checks.
		h := triton.NewHealthClient(conn)
		for _, svc := range []string{"", "inference.GRPCInferenceService"} {
			r, err := h.Check(ctx, &triton.HealthCheckRequest{Service: svc})
			if err != nil || r.Status != triton.HealthCheckResponse_SERVING {
				t.Errorf("health %q: %v %v", svc, r, err)
			}
		}
		if _, err := h.Check(ctx, &triton.HealthCheckRequest{Service: "other"}); status.Code(err) != codes.NotFound {
			t.Errorf("health of an unknown service: %v", err)
		}
	})
	t.Run("reflection", func(t *testing.T) { checkReflection(ctx, t, conn) })
	t.Run("bad_input", func(t *testing.T) { checkBadInput(ctx, t, stub) })
	t.Run("unload_live_sequence", func(t *testing.T) { checkUnloadLiveSequence(ctx, t, stub) })
}

// checkReflection lists the services and reads the inference service's
// schema through server reflection, compares every message and field
// reachable from its methods with Triton's own definition (as compiled
// into the client module), and calls ModelInfer with a request built
// from the reflected schema out of JSON, as grpcurl does.
func checkReflection(ctx context.Context, t *testing.T, conn *grpc.ClientConn) {
	rc := grpcreflect.NewClientAuto(ctx, conn)
	services, err := rc.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []protoreflect.FullName{"inference.GRPCInferenceService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(services, want) {
			t.Errorf("services %v lack %s", services, want)
		}
	}
	fd, err := rc.FileContainingSymbol("inference.GRPCInferenceService")
	if err != nil {
		t.Fatal(err)
	}
	ours := fd.Services().ByName("GRPCInferenceService")
	theirs := triton.File_grpc_service_proto.Services().ByName("GRPCInferenceService")
	seen := map[protoreflect.FullName]bool{}
	for i := range ours.Methods().Len() {
		m := ours.Methods().Get(i)
		tm := theirs.Methods().ByName(m.Name())
		if tm == nil || tm.Input().FullName() != m.Input().FullName() || tm.Output().FullName() != m.Output().FullName() ||
			tm.IsStreamingClient() != m.IsStreamingClient() || tm.IsStreamingServer() != m.IsStreamingServer() {
			t.Errorf("method %s differs from Triton's %v", m.FullName(), tm)
			continue
		}
		sameMessage(t, m.Input(), tm.Input(), seen)
		sameMessage(t, m.Output(), tm.Output(), seen)
	}
	if ours.Methods().Len() != 12 || len(seen) < 30 {
		t.Errorf("%d methods and %d messages compared", ours.Methods().Len(), len(seen))
	}

	// grpcurl -d '{...}' ADDR inference.GRPCInferenceService/ModelInfer
	method := ours.Methods().ByName("ModelInfer")
	req := dynamicpb.NewMessage(method.Input())
	body := `{"model_name": "spare", "inputs": [{"name": "tokens", "datatype": "INT64", "shape": ["1", "3"], "contents": {"int64_contents": ["104", "105", "33"]}}],
		"outputs": [{"name": "top_k", "parameters": {"k": {"int64_param": "2"}, "binary_data": {"bool_param": false}}}]}`
	if err := protojson.Unmarshal([]byte(body), req); err != nil {
		t.Fatal(err)
	}
	resp, err := grpcdynamic.NewStub(conn).InvokeRPC(ctx, method, req)
	if err != nil {
		t.Fatalf("dynamic ModelInfer: %v", err)
	}
	js, _ := protojson.Marshal(resp)
	var got triton.ModelInferResponse
	if err := protojson.Unmarshal(js, &got); err != nil || got.ModelName != "spare" || len(got.Outputs) != 1 ||
		fmt.Sprint(got.Outputs[0].Shape) != "[1 3 2]" || len(got.Outputs[0].GetContents().GetInt64Contents()) != 6 {
		t.Errorf("dynamic ModelInfer answered %s (%v)", js, err)
	}
}

// sameMessage checks that every field of our message exists in Triton's
// message of the same name with the same number, type, cardinality and
// oneof, recursing into message fields; enums by their values.
func sameMessage(t *testing.T, ours, theirs protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) {
	if seen[ours.FullName()] {
		return
	}
	seen[ours.FullName()] = true
	if theirs == nil || theirs.FullName() != ours.FullName() {
		t.Errorf("message %s has no counterpart in Triton's definition", ours.FullName())
		return
	}
	for i := range ours.Fields().Len() {
		f := ours.Fields().Get(i)
		tf := theirs.Fields().ByName(f.Name())
		switch {
		case tf == nil && f.FullName() == "inference.ModelMetadataResponse.properties":
			// KServe's Open Inference Protocol has it (field 6, a string
			// map); Triton's definition does not.
			if f.Number() != 6 || !f.IsMap() || f.MapValue().Kind() != protoreflect.StringKind {
				t.Errorf("%s: number %d, want KServe's 6, a map of strings", f.FullName(), f.Number())
			}
			continue
		case tf == nil:
			t.Errorf("%s: Triton has no field %s", ours.FullName(), f.Name())
			continue
		case tf.Number() != f.Number() || tf.Kind() != f.Kind() || tf.Cardinality() != f.Cardinality() || tf.IsMap() != f.IsMap():
			t.Errorf("%s.%s: number %d kind %v %v, Triton's %d %v %v", ours.FullName(), f.Name(), f.Number(), f.Kind(), f.Cardinality(), tf.Number(), tf.Kind(), tf.Cardinality())
			continue
		case (f.ContainingOneof() == nil) != (tf.ContainingOneof() == nil) ||
			f.ContainingOneof() != nil && f.ContainingOneof().Name() != tf.ContainingOneof().Name():
			t.Errorf("%s.%s: oneof differs from Triton's", ours.FullName(), f.Name())
		}
		if f.Message() != nil {
			sameMessage(t, f.Message(), tf.Message(), seen)
		}
		if e := f.Enum(); e != nil {
			te := tf.Enum()
			for k := range e.Values().Len() {
				v := e.Values().Get(k)
				if tv := te.Values().ByName(v.Name()); tv == nil || tv.Number() != v.Number() || te.FullName() != e.FullName() {
					t.Errorf("enum %s value %s = %d differs from Triton's", e.FullName(), v.Name(), v.Number())
				}
			}
		}
	}
}

// checkBadInput sends requests that must fail with a given code; after
// each the server still answers.
func checkBadInput(ctx context.Context, t *testing.T, stub triton.GRPCInferenceServiceClient) {
	good := func() *triton.ModelInferRequest {
		return &triton.ModelInferRequest{ModelName: "spare", Inputs: []*triton.ModelInferRequest_InferInputTensor{
			{Name: "tokens", Datatype: "INT64", Shape: []int64{1, 2}, Contents: &triton.InferTensorContents{Int64Contents: []int64{1, 2}}}}}
	}
	rawReq := func(dt string, shape []int64, raw []byte) *triton.ModelInferRequest {
		return &triton.ModelInferRequest{ModelName: "spare", Inputs: []*triton.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: dt, Shape: shape}},
			RawInputContents: [][]byte{raw}}
	}
	overrun := append(binary.LittleEndian.AppendUint32(nil, 1000), "abc"...)
	withVersion := good()
	withVersion.ModelVersion = "3"
	for _, c := range []struct {
		name string
		req  *triton.ModelInferRequest
		code codes.Code
		want string
	}{
		{"raw size against shape", rawReq("INT64", []int64{1, 2}, make([]byte, 15)), codes.InvalidArgument, "want 16"},
		{"BYTES length prefix overrun", rawReq("BYTES", []int64{1}, overrun), codes.InvalidArgument, "length 1000"},
		{"unknown version", withVersion, codes.NotFound, "versions served"},
		{"over the message limit", rawReq("INT64", []int64{1, 10000}, make([]byte, 80000)), codes.ResourceExhausted, ""},
	} {
		_, err := stub.ModelInfer(ctx, c.req)
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.want) {
			t.Errorf("%s: %v, want %v mentioning %q", c.name, err, c.code, c.want)
		}
		if _, err := stub.ModelInfer(ctx, good()); err != nil {
			t.Fatalf("after %s the server does not answer: %v", c.name, err)
		}
	}
	for _, name := range []string{"a/b", "..", "../spare", `a\b`} {
		_, err := stub.RepositoryModelLoad(ctx, &triton.RepositoryModelLoadRequest{ModelName: name})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("load %q: %v, want InvalidArgument", name, err)
		}
	}
}

// checkUnloadLiveSequence unloads a model with a live sequence: the
// sequence's next request finds no model; loaded again, it finds its
// sequence ended; the server keeps serving.
func checkUnloadLiveSequence(ctx context.Context, t *testing.T, stub triton.GRPCInferenceServiceClient) {
	seq := func(start bool) error {
		req, err := grpcRequest("spare", []tensorIn{{name: "tokens", datatype: "INT64", shape: []int64{1, 2}, ints: []int64{5, 6}}}, nil,
			map[string]any{"sequence_id": 77, "sequence_start": start})
		if err == nil {
			_, err = stub.ModelInfer(ctx, req)
		}
		return err
	}
	if err := seq(true); err != nil {
		t.Fatal(err)
	}
	if _, err := stub.RepositoryModelUnload(ctx, &triton.RepositoryModelUnloadRequest{ModelName: "spare"}); err != nil {
		t.Fatalf("unload: %v", err)
	}
	if err := seq(false); status.Code(err) != codes.NotFound {
		t.Errorf("the sequence of an unloaded model: %v, want NotFound", err)
	}
	if _, err := stub.RepositoryModelLoad(ctx, &triton.RepositoryModelLoadRequest{ModelName: "spare"}); err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := seq(false); status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "unloaded") {
		t.Errorf("the sequence after the reload: %v, want FailedPrecondition saying it was unloaded", err)
	}
	if err := seq(true); err != nil {
		t.Errorf("a new sequence: %v", err)
	}
}
