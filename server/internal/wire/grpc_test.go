package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"rnnserve/internal/fuzzbound"
	"rnnserve/schedule"
	pb "rnnserve/server/inferencepb"
	"rnnserve/server/internal/infer"
)

func i64(v int64) *pb.InferParameter { return ParamToGRPC(v) }

// TestFromGRPC: a ModelInferRequest becomes the Request it describes,
// from typed or raw contents alike.
func TestFromGRPC(t *testing.T) {
	typed := &pb.ModelInferRequest{ModelName: "m", ModelVersion: "1", Id: "7",
		Parameters: map[string]*pb.InferParameter{"sequence_id": i64(4), "sequence_end": ParamToGRPC(true), "executor": ParamToGRPC("batched")},
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "a", Datatype: "INT32", Shape: []int64{2}, Contents: &pb.InferTensorContents{IntContents: []int32{-1, 2}}},
			{Name: "b", Datatype: "FP32", Shape: []int64{1}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{0.5}}},
			{Name: "c", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("x")}}},
		},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "y", Parameters: map[string]*pb.InferParameter{"classification": i64(2), "k": i64(3)}}}}
	raw := proto.Clone(typed).(*pb.ModelInferRequest)
	for i, in := range raw.Inputs {
		tn := infer.Tensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape}
		if err := ContentsToTensor(&tn, in.Contents); err != nil {
			t.Fatal(err)
		}
		o := infer.OutputTensor{Datatype: tn.Datatype, Int64: tn.Int64, Float32: tn.Float32, Bytes: tn.Bytes}
		raw.RawInputContents = append(raw.RawInputContents, o.AppendRaw(nil))
		raw.Inputs[i].Contents = nil
	}
	for what, p := range map[string]*pb.ModelInferRequest{"typed": typed, "raw": raw} {
		var r infer.Request
		if err := FromGRPC(p, &r, nil); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if r.Model != "m" || r.Version != "1" || r.ID != "7" || !r.BinaryOutput || r.Sequence != (infer.SequenceControl{ID: "4", End: true}) ||
			len(r.Parameters) != 1 || r.Parameters["executor"] != "batched" {
			t.Errorf("%s: %+v", what, r)
		}
		if len(r.Inputs) != 3 || !slices.Equal(r.Inputs[0].Int64, []int64{-1, 2}) || !slices.Equal(r.Inputs[1].Float32, []float32{0.5}) || string(r.Inputs[2].Bytes[0]) != "x" {
			t.Errorf("%s: inputs %+v", what, r.Inputs)
		}
		if len(r.Outputs) != 1 || r.Outputs[0].Classification != 2 || r.Outputs[0].Parameters["k"] != int64(3) || len(r.Outputs[0].Parameters) != 1 {
			t.Errorf("%s: outputs %+v", what, r.Outputs)
		}
	}
	// binary_data_output false asks for typed outputs; an output's own
	// binary_data becomes the request's choice.
	p := proto.Clone(typed).(*pb.ModelInferRequest)
	p.Parameters = map[string]*pb.InferParameter{ParamBinaryOutput: ParamToGRPC(false)}
	var r infer.Request
	if err := FromGRPC(p, &r, nil); err != nil || r.BinaryOutput || len(r.Parameters) != 0 {
		t.Errorf("binary_data_output false: %v %v", r.BinaryOutput, err)
	}
	p.Outputs[0].Parameters = map[string]*pb.InferParameter{ParamBinary: ParamToGRPC(true)}
	if err := FromGRPC(p, &r, nil); err != nil || !r.BinaryOutput {
		t.Errorf("an output's binary_data true: %v %v", r.BinaryOutput, err)
	}
}

// TestFromGRPCRefuses: what a ModelInferRequest may not be; each is
// INVALID_ARGUMENT naming what is wrong.
func TestFromGRPCRefuses(t *testing.T) {
	in := func(ins ...*pb.ModelInferRequest_InferInputTensor) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "m", Inputs: ins}
	}
	x := func(c *pb.InferTensorContents) *pb.ModelInferRequest_InferInputTensor {
		return &pb.ModelInferRequest_InferInputTensor{Name: "x", Datatype: "INT64", Shape: []int64{1}, Contents: c}
	}
	one := &pb.InferTensorContents{Int64Contents: []int64{1}}
	withRaw := func(p *pb.ModelInferRequest, raw ...[]byte) *pb.ModelInferRequest { p.RawInputContents = raw; return p }
	outs := func(a, b bool) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "m", Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{
			{Name: "y", Parameters: map[string]*pb.InferParameter{ParamBinary: ParamToGRPC(a)}},
			{Name: "z", Parameters: map[string]*pb.InferParameter{ParamBinary: ParamToGRPC(b)}}}}
	}
	for _, c := range []struct {
		p    *pb.ModelInferRequest
		want string
	}{
		{&pb.ModelInferRequest{}, "model_name is empty"},
		{&pb.ModelInferRequest{ModelName: "m", Parameters: map[string]*pb.InferParameter{"p": {}}}, `parameter "p" has no value`},
		{&pb.ModelInferRequest{ModelName: "m", Parameters: map[string]*pb.InferParameter{ParamBinaryOutput: i64(1)}}, "must be a boolean"},
		{in(x(nil)), "has no contents"},
		{withRaw(in(x(one)), []byte{1, 0, 0, 0, 0, 0, 0, 0}), "use one or the other"},
		{withRaw(in(x(nil), x(nil)), make([]byte, 8)), "1 raw_input_contents for 2 inputs"},
		{withRaw(in(x(nil)), make([]byte, 7)), "7 bytes of binary data, want 8"},
		{in(x(&pb.InferTensorContents{IntContents: []int32{1}})), "INT64 data belongs in int64_contents, not int_contents"},
		{in(&pb.ModelInferRequest_InferInputTensor{Name: "x", Datatype: "INT64", Shape: []int64{1}, Contents: one,
			Parameters: map[string]*pb.InferParameter{"shared_memory_region": ParamToGRPC("r")}}), "shared memory is not supported"},
		{in(&pb.ModelInferRequest_InferInputTensor{Name: "x", Datatype: "INT64", Shape: []int64{1}, Contents: one,
			Parameters: map[string]*pb.InferParameter{"binary_data_size": i64(8)}}), `unknown parameter "binary_data_size"`},
		{outs(true, false), "raw_output_contents for all outputs or for none"},
		// The data must fill the shape (found by FuzzFromGRPC: BYTES, shape
		// [], an empty contents message).
		{in(&pb.ModelInferRequest_InferInputTensor{Name: "x", Datatype: "BYTES", Contents: &pb.InferTensorContents{}}), "0 values, want 1 for its shape []"},
		{in(&pb.ModelInferRequest_InferInputTensor{Name: "x", Datatype: "FP32", Shape: []int64{2}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1}}}), "1 values, want 2"},
		{in(&pb.ModelInferRequest_InferInputTensor{Name: "x", Datatype: "INT64", Shape: []int64{2, 2}, Contents: one}), "1 values, want 4"},
		{&pb.ModelInferRequest{ModelName: "m", Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{
			{Name: "y", Parameters: map[string]*pb.InferParameter{"classification": i64(infer.MaxClassification + 1)}}}}, "classification must be an integer"},
	} {
		var r infer.Request
		err := FromGRPC(c.p, &r, nil)
		if CodeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want INVALID_ARGUMENT with %q", c.p, err, c.want)
		}
	}
	// The decoded tensors are bounded like REST's.
	var r infer.Request
	big := in(x(&pb.InferTensorContents{Int64Contents: make([]int64, 1000)}))
	big.Inputs[0].Shape = []int64{1000}
	if err := FromGRPC(big, &r, &TensorMemory{Limit: 4000}); CodeOf(err) != codes.ResourceExhausted {
		t.Errorf("over the tensor bound: %v", err)
	}
}

// TestToGRPC: outputs go raw when asked for as binary data (one buffer,
// each output's slice of it), else typed in their datatype's field.
func TestToGRPC(t *testing.T) {
	outs := []infer.OutputTensor{
		{Name: "f", Datatype: "FP32", Shape: []int64{2}, Float32: []float32{1, -2}},
		{Name: "i", Datatype: "INT64", Shape: []int64{1}, Int64: []int64{-5}},
		{Name: "s", Datatype: "BYTES", Shape: []int64{1}, Bytes: [][]byte{[]byte("ab")}},
	}
	resp := ToGRPC(&infer.Response{Model: "m", Version: "1", ID: "q", Outputs: outs})
	if resp.ModelName != "m" || resp.ModelVersion != "1" || resp.Id != "q" || len(resp.Outputs) != 3 || resp.RawOutputContents != nil {
		t.Fatalf("typed: %v", resp)
	}
	if c := resp.Outputs[0].Contents; !slices.Equal(c.Fp32Contents, []float32{1, -2}) || resp.Outputs[0].Datatype != "FP32" || !slices.Equal(resp.Outputs[0].Shape, []int64{2}) {
		t.Errorf("typed FP32: %v", resp.Outputs[0])
	}
	if c := resp.Outputs[1].Contents; !slices.Equal(c.Int64Contents, []int64{-5}) {
		t.Errorf("typed INT64: %v", c)
	}
	if c := resp.Outputs[2].Contents; len(c.BytesContents) != 1 || string(c.BytesContents[0]) != "ab" {
		t.Errorf("typed BYTES: %v", c)
	}
	for i := range outs {
		outs[i].Binary = true
	}
	resp = ToGRPC(&infer.Response{Model: "m", Outputs: outs})
	if len(resp.RawOutputContents) != 3 {
		t.Fatalf("raw: %v", resp)
	}
	for i, o := range resp.Outputs {
		if o.Contents != nil || !bytes.Equal(resp.RawOutputContents[i], outs[i].AppendRaw(nil)) {
			t.Errorf("raw output %s: %v %x", o.Name, o.Contents, resp.RawOutputContents[i])
		}
	}
	// Appending to one output's slice does not overwrite the next.
	first := resp.RawOutputContents[0]
	_ = append(first, 0xff)
	if !bytes.Equal(resp.RawOutputContents[1], outs[1].AppendRaw(nil)) {
		t.Error("the raw outputs share capacity")
	}
}

// TestTypedContentsRoundTrip: each integer datatype's typed contents
// decode to the values they hold and encode back into the same field.
func TestTypedContentsRoundTrip(t *testing.T) {
	for _, c := range []struct {
		dt   string
		in   *pb.InferTensorContents
		want []int64
	}{
		{"INT8", &pb.InferTensorContents{IntContents: []int32{-128, 127}}, []int64{-128, 127}},
		{"INT16", &pb.InferTensorContents{IntContents: []int32{-32768, 32767}}, []int64{-32768, 32767}},
		{"INT32", &pb.InferTensorContents{IntContents: []int32{math.MinInt32, math.MaxInt32}}, []int64{math.MinInt32, math.MaxInt32}},
		{"INT64", &pb.InferTensorContents{Int64Contents: []int64{math.MinInt64, math.MaxInt64}}, []int64{math.MinInt64, math.MaxInt64}},
		{"UINT8", &pb.InferTensorContents{UintContents: []uint32{0, 255}}, []int64{0, 255}},
		{"UINT16", &pb.InferTensorContents{UintContents: []uint32{0, 65535}}, []int64{0, 65535}},
		{"UINT32", &pb.InferTensorContents{UintContents: []uint32{0, math.MaxUint32}}, []int64{0, math.MaxUint32}},
		{"UINT64", &pb.InferTensorContents{Uint64Contents: []uint64{0, math.MaxInt64}}, []int64{0, math.MaxInt64}},
	} {
		tn := infer.Tensor{Name: "x", Datatype: c.dt, Shape: []int64{2}}
		if err := ContentsToTensor(&tn, c.in); err != nil || fmt.Sprint(tn.Int64) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v %v", c.dt, tn.Int64, err)
			continue
		}
		back := typedContents(&infer.OutputTensor{Datatype: c.dt, Int64: tn.Int64})
		if fmt.Sprint(back) != fmt.Sprint(c.in) {
			t.Errorf("%s: %v encodes as %v", c.dt, c.in, back)
		}
	}
	for _, c := range []struct {
		dt string
		in *pb.InferTensorContents
	}{
		{"INT8", &pb.InferTensorContents{IntContents: []int32{128}}},
		{"INT16", &pb.InferTensorContents{IntContents: []int32{-32769}}},
		{"UINT8", &pb.InferTensorContents{UintContents: []uint32{256}}},
		{"UINT64", &pb.InferTensorContents{Uint64Contents: []uint64{math.MaxInt64 + 1}}},
		{"INT32", &pb.InferTensorContents{Int64Contents: []int64{1}}},
		{"FP32", &pb.InferTensorContents{Fp64Contents: []float64{1}}},
		{"BYTES", &pb.InferTensorContents{BoolContents: []bool{true}}},
		{"BOOL", &pb.InferTensorContents{BoolContents: []bool{true}}},
	} {
		tn := infer.Tensor{Name: "x", Datatype: c.dt, Shape: []int64{1}}
		if err := ContentsToTensor(&tn, c.in); !errors.Is(err, infer.ErrBadRequest) {
			t.Errorf("%s %v: %v, want InvalidArgument", c.dt, c.in, err)
		}
	}
	if !bytes.Equal(typedContents(&infer.OutputTensor{Datatype: "BYTES", Bytes: [][]byte{[]byte("a")}}).BytesContents[0], []byte("a")) {
		t.Error("BYTES output")
	}
}

// TestGenerateFromGRPC: a generation request takes its prompt from
// text_input or prompt_tokens and its sampling settings from parameters
// or one-element tensors; a stream tensor is left out.
func TestGenerateFromGRPC(t *testing.T) {
	bytesIn := func(name string, s ...string) *pb.ModelInferRequest_InferInputTensor {
		b := make([][]byte, len(s))
		for i := range s {
			b[i] = []byte(s[i])
		}
		return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: "BYTES", Shape: []int64{int64(len(s))}, Contents: &pb.InferTensorContents{BytesContents: b}}
	}
	p := &pb.ModelInferRequest{ModelName: "lm", Id: "g",
		Parameters: map[string]*pb.InferParameter{"temperature": ParamToGRPC(0.5), "seed": i64(9), ParamEmptyFinal: ParamToGRPC(true)},
		Inputs: []*pb.ModelInferRequest_InferInputTensor{bytesIn("text_input", "Hi"), bytesIn("stop", "!", "."),
			{Name: "max_tokens", Datatype: "INT32", Shape: []int64{1}, Contents: &pb.InferTensorContents{IntContents: []int32{5}}},
			{Name: "top_p", Datatype: "FP32", Shape: []int64{1}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{0.25}}},
			{Name: "stream", Datatype: "BOOL", Shape: []int64{1}, Contents: &pb.InferTensorContents{BoolContents: []bool{true}}}},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "token_ids"}}}
	if !IsGenerate(p) {
		t.Fatal("not a generation request")
	}
	var g GRPCGenerate
	if err := GenerateFromGRPC(p, &g, nil); err != nil {
		t.Fatal(err)
	}
	stops := fmt.Sprintf("%q", g.Stop)
	if g.Model != "lm" || g.ID != "g" || string(g.Prompt) != "Hi" || g.MaxTokens != 5 || g.TopP != 0.25 || g.Temperature != 0.5 || g.Seed != 9 ||
		stops != `["!" "."]` || !g.binary || len(g.outputs) != 1 || g.outputs[0] != "token_ids" {
		t.Errorf("%+v", g)
	}
	resp := g.Response("1", []byte("ab"), []infer.GenerateToken{{Token: 97, LogProb: -1}, {Token: 98, LogProb: -2}})
	if resp.Id != "g" || resp.ModelVersion != "1" || len(resp.Outputs) != 1 || resp.Outputs[0].Name != "token_ids" ||
		!bytes.Equal(resp.RawOutputContents[0], (&infer.OutputTensor{Datatype: "INT64", Int64: []int64{97, 98}}).AppendRaw(nil)) {
		t.Errorf("response: %v", resp)
	}
	for _, c := range []struct {
		p    *pb.ModelInferRequest
		want string
	}{
		{&pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{bytesIn("text_input", "a", "b")}}, "2 elements, want one string"},
		{&pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{bytesIn("text_input", "a"), bytesIn("top_k", "3")}}, "want one number"},
		{&pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{bytesIn("text_input", "a")},
			Parameters: map[string]*pb.InferParameter{"beam": i64(2)}}, `unknown parameter "beam"`},
		{&pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{bytesIn("text_input", "a")},
			Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "probs"}}}, "a generation request has outputs"},
		{&pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{bytesIn("text_input", "a"),
			{Name: "max_tokens", Datatype: "INT64", Shape: []int64{1}, Contents: &pb.InferTensorContents{Int64Contents: []int64{1}}}},
			Parameters: map[string]*pb.InferParameter{"max_tokens": i64(2)}}, "both as a parameter and as an input"},
	} {
		var g GRPCGenerate
		if err := GenerateFromGRPC(c.p, &g, nil); err == nil || !strings.Contains(err.Error(), c.want) || CodeOf(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want INVALID_ARGUMENT with %q", c.p, err, c.want)
		}
	}
}

// TestCodeOf maps every sentinel to its gRPC code, wrapped as the server
// wraps them, and a bad request is INVALID_ARGUMENT as it is 400 over
// REST.
func TestCodeOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		code codes.Code
	}{
		{nil, codes.OK},
		{infer.BadRequest("x"), codes.InvalidArgument},
		{fmt.Errorf("plan: %w", schedule.ErrInput), codes.InvalidArgument},
		{infer.ErrNotLanguageModel, codes.InvalidArgument},
		{infer.ErrUnsupportedOutput, codes.InvalidArgument},
		{infer.ErrTooLarge, codes.ResourceExhausted},
		{infer.ErrTooManySequences, codes.ResourceExhausted},
		{fmt.Errorf("%w %q", infer.ErrUnknownModel, "m"), codes.NotFound},
		{infer.ErrUnknownVersion, codes.NotFound},
		{infer.ErrUnknownSequence, codes.NotFound},
		{loadErr("m", fmt.Errorf("%w: no model.yaml", infer.ErrNotInRepository)), codes.NotFound},
		{loadErr("a/b", infer.BadRequest("model name holds a path separator")), codes.InvalidArgument},
		{loadErr("m", errors.New("truncated weights")), codes.FailedPrecondition},
		{infer.ErrNoRepository, codes.FailedPrecondition},
		{fmt.Errorf("%w: model unloaded", infer.ErrSequenceEnded), codes.FailedPrecondition},
		{infer.ErrSequenceExpired, codes.FailedPrecondition},
		{infer.ErrSequenceBusy, codes.Aborted},
		{infer.ErrBusy, codes.Unavailable},
		{infer.ErrDraining, codes.Unavailable},
		{fmt.Errorf("step: %w", context.Canceled), codes.Canceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{errors.New("something else"), codes.Internal},
	} {
		if got := CodeOf(c.err); got != c.code {
			t.Errorf("%v: %v, want %v", c.err, got, c.code)
		}
		if c.err != nil && (CodeOf(c.err) == codes.InvalidArgument) != (infer.StatusOf(c.err) == http.StatusBadRequest) && !errors.Is(c.err, infer.ErrLoad) && !errors.Is(c.err, infer.ErrNoRepository) {
			t.Errorf("%v: gRPC %v but HTTP %d", c.err, CodeOf(c.err), infer.StatusOf(c.err))
		}
	}
}

// loadErr wraps a load failure as package server does.
func loadErr(name string, err error) error {
	return fmt.Errorf("%w: model %q: %w", infer.ErrLoad, name, err)
}

// FuzzFromGRPC feeds arbitrary ModelInferRequest messages to the gRPC
// converters alone: each fails with INVALID_ARGUMENT (or
// RESOURCE_EXHAUSTED past the tensor bound) or yields inputs whose data
// matches their datatype and shape, and a response made of them converts
// back; nothing panics.
func FuzzFromGRPC(f *testing.F) {
	for _, p := range []*pb.ModelInferRequest{
		{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "a", Datatype: "INT32", Shape: []int64{2}, Contents: &pb.InferTensorContents{IntContents: []int32{1, 2}}}},
			Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "y", Parameters: map[string]*pb.InferParameter{"classification": i64(1)}}}},
		{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "b", Datatype: "BYTES", Shape: []int64{1}}}, RawInputContents: [][]byte{{1, 0, 0, 0, 'x'}}},
		{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("Hi")}}}},
			Parameters: map[string]*pb.InferParameter{"max_tokens": i64(3)}},
	} {
		data, err := proto.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzbound.Run(t, len(data), func() {
			var p pb.ModelInferRequest
			if proto.Unmarshal(data, &p) != nil {
				return
			}
			mem := &TensorMemory{Limit: 1 << 20}
			ok := func(err error) bool {
				c := CodeOf(err)
				return c == codes.InvalidArgument || c == codes.ResourceExhausted
			}
			if IsGenerate(&p) {
				var g GRPCGenerate
				if err := GenerateFromGRPC(&p, &g, mem); err != nil && !ok(err) {
					t.Fatalf("generation converter: %v maps to %v", err, CodeOf(err))
				}
				return
			}
			var r infer.Request
			if err := FromGRPC(&p, &r, mem); err != nil {
				if !ok(err) {
					t.Fatalf("converter: %v maps to %v", err, CodeOf(err))
				}
				return
			}
			resp := &infer.Response{Model: r.Model}
			for _, tn := range r.Inputs {
				if err := tn.Check(); err != nil {
					t.Fatalf("decoded input fails its check: %v", err)
				}
				resp.Outputs = append(resp.Outputs, infer.OutputTensor{Name: tn.Name, Datatype: tn.Datatype, Shape: tn.Shape,
					Int64: tn.Int64, Float32: tn.Float32, Bytes: tn.Bytes, Binary: r.BinaryOutput})
			}
			back := ToGRPC(resp)
			for i, o := range back.Outputs {
				tn := infer.Tensor{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape}
				var err error
				if r.BinaryOutput {
					err = tn.DecodeRaw(back.RawOutputContents[i])
				} else {
					err = ContentsToTensor(&tn, o.Contents)
				}
				if err == nil {
					err = tn.Check()
				}
				if err != nil {
					t.Fatalf("input %q of %s does not convert back: %v", o.Name, o.Datatype, err)
				}
			}
		})
	})
}
