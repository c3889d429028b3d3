package server

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"rnnserve/internal/fuzzbound"
	pb "rnnserve/server/inferencepb"
	"rnnserve/server/internal/wire"
)

// grpcFuzzSeeds are the seed requests of FuzzGRPCRequest (also in
// testdata/fuzz/FuzzGRPCRequest).
func grpcFuzzSeeds() []*pb.ModelInferRequest {
	text := func(s string) *pb.ModelInferRequest_InferInputTensor {
		return &pb.ModelInferRequest_InferInputTensor{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte(s)}}}
	}
	typed := &pb.ModelInferRequest{ModelName: "lm", Id: "1", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{1, 2}})},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "top_k", Parameters: map[string]*pb.InferParameter{"k": i64Param(2), "classification": i64Param(2)}}}}
	return []*pb.ModelInferRequest{
		typed,
		rawOf(typed),
		{ModelName: "feat", Parameters: map[string]*pb.InferParameter{"sequence_id": i64Param(9), "sequence_start": boolParam(true), wire.ParamBinaryOutput: boolParam(false)},
			Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "features", Datatype: "FP32", Shape: []int64{1, 1, 3}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1, 2, 3}}}}},
		{ModelName: "bi", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "features", Datatype: "FP32", Shape: []int64{1, 2, 3}}}, RawInputContents: [][]byte{make([]byte, 24)}},
		{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "BYTES", Shape: []int64{1}}}, RawInputContents: [][]byte{{9, 0, 0, 0, 'x'}}},
		{ModelName: "lm", Parameters: map[string]*pb.InferParameter{"max_tokens": i64Param(3), "seed": i64Param(1), "temperature": f64Param(0.5)},
			Inputs:  []*pb.ModelInferRequest_InferInputTensor{text("Hi"), {Name: "stop", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("!")}}}},
			Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "text_output"}}},
		{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "prompt_tokens", Datatype: "INT32", Shape: []int64{2}, Contents: &pb.InferTensorContents{IntContents: []int32{3, 4}}},
			{Name: "max_tokens", Datatype: "INT64", Shape: []int64{1}, Contents: &pb.InferTensorContents{Int64Contents: []int64{2}}}}},
	}
}

// FuzzGRPCRequest feeds arbitrary ModelInferRequest messages (as wire
// bytes) to the gRPC request converter and then to the whole ModelInfer
// path: the converter either fails with INVALID_ARGUMENT or yields tensors
// whose data is of their datatype's kind; ModelInfer answers every request
// with a response whose outputs parse or a code other than INTERNAL and
// UNKNOWN; nothing panics.
func FuzzGRPCRequest(f *testing.F) {
	for _, seed := range grpcFuzzSeeds() {
		data, err := proto.Marshal(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	s, _ := newTestServer(f, func(o *Options) {
		o.MaxSteps, o.MaxBodyBytes, o.TrafficSteps, o.MaxGenerateTokens = 64, 1<<16, 4, 8
	}, true)
	svc := &grpcService{s: s}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzbound.Run(t, len(data), func() {
			var req pb.ModelInferRequest
			if proto.Unmarshal(data, &req) != nil {
				return
			}
			if wire.IsGenerate(&req) {
				var g wire.GRPCGenerate
				if err := wire.GenerateFromGRPC(&req, &g, nil); err != nil && CodeOf(err) != codes.InvalidArgument {
					t.Fatalf("generation converter: %v maps to %v", err, CodeOf(err))
				}
			} else {
				var r Request
				if err := wire.FromGRPC(&req, &r, nil); err != nil {
					if CodeOf(err) != codes.InvalidArgument {
						t.Fatalf("converter: %v maps to %v", err, CodeOf(err))
					}
				} else {
					if len(r.Inputs) != len(req.Inputs) || len(r.Outputs) != len(req.Outputs) {
						t.Fatalf("%d inputs and %d outputs from %d and %d", len(r.Inputs), len(r.Outputs), len(req.Inputs), len(req.Outputs))
					}
					for _, tn := range r.Inputs {
						kind, _ := DatatypeKind(tn.Datatype)
						if kind == KindUnsupported || (kind == KindInt) != (tn.Int64 != nil) || (kind == KindFloat) != (tn.Float32 != nil) || (kind == KindBytes) != (tn.Bytes != nil) {
							t.Fatalf("input %q of %s decoded to %d ints, %d floats, %d strings", tn.Name, tn.Datatype, len(tn.Int64), len(tn.Float32), len(tn.Bytes))
						}
					}
				}
			}
			resp, err := svc.ModelInfer(t.Context(), &req)
			if err != nil {
				if c := status.Code(err); c == codes.Internal || c == codes.Unknown {
					t.Fatalf("ModelInfer: %v", err)
				}
				return
			}
			grpcOutputs(t, resp)
		})
	})
}

// FuzzMessageSize feeds arbitrary bytes to boundedCodec's sizing of a
// ModelInferRequest from its wire bytes: it never panics, and where
// protobuf decodes the bytes and the sizing passes them, the elements it
// counted are at least those of the decoded message's repeated and map
// fields besides tensor contents, and what it found the contents take
// beyond their wire bytes is at least what their decoded slices hold
// beyond the message's size.
func FuzzMessageSize(f *testing.F) {
	for _, seed := range grpcFuzzSeeds() {
		data, err := proto.Marshal(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	desc := (&pb.ModelInferRequest{}).ProtoReflect().Descriptor()
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzbound.Run(t, len(data), func() {
			var z messageSize
			err := z.count(data, desc, 0)
			var req pb.ModelInferRequest
			if err != nil || proto.Unmarshal(data, &req) != nil {
				return
			}
			elements, contents := 0, int64(0)
			for _, in := range req.Inputs {
				elements += 1 + len(in.Shape) + len(in.Parameters)
				c := in.GetContents()
				contents += int64(len(c.GetBoolContents()) + 4*(len(c.GetIntContents())+len(c.GetUintContents())+len(c.GetFp32Contents())) +
					8*(len(c.GetInt64Contents())+len(c.GetUint64Contents())+len(c.GetFp64Contents())))
				for _, b := range c.GetBytesContents() {
					contents += 24 + int64(len(b))
				}
			}
			for _, out := range req.Outputs {
				elements += 1 + len(out.Parameters)
			}
			elements += len(req.Parameters) + len(req.RawInputContents)
			if elements > z.elements {
				t.Fatalf("counted %d elements, the message has %d", z.elements, elements)
			}
			if contents > int64(len(data))+z.extra {
				t.Fatalf("the contents take %d bytes decoded; counted %d beyond the message's %d", contents, z.extra, len(data))
			}
		})
	})
}
