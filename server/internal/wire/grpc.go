package wire

import (
	"context"
	"errors"
	"fmt"
	"math"

	"google.golang.org/grpc/codes"

	"rnnserve/schedule"
	pb "rnnserve/server/inferencepb"
	"rnnserve/server/internal/infer"
)

// The gRPC codec: a ModelInferRequest becomes an infer.Request (or, when
// it carries a text_input or prompt_tokens tensor, an
// infer.GenerateRequest) and an infer.Response becomes a
// ModelInferResponse. Tensor data comes typed (InferTensorContents,
// converted here) or raw (raw_input_contents, through Tensor.DecodeRaw, as
// REST's binary tensor data does); outputs go back
// raw by default, as Triton sends them, or typed when the request asks.

// Parameters the gRPC front end reads itself; the model never sees them.
const (
	// ParamBinaryOutput false asks for typed output contents instead of
	// raw_output_contents (the name of REST's binary tensor data switch).
	ParamBinaryOutput = "binary_data_output"
	// ParamBinary is the per-output form of ParamBinaryOutput.
	ParamBinary = "binary_data"
	// ParamFinal marks a stream's last response to a request (Triton's
	// decoupled-response flag).
	ParamFinal = "triton_final_response"
	// ParamEmptyFinal asks a stream to end each request's Responses with
	// an empty final one.
	ParamEmptyFinal = "triton_enable_empty_final_response"
	// ParamFinishReason says how a generation ended.
	ParamFinishReason = "finish_reason"
)

// Names of a generation request's tensors and outputs over gRPC: Triton's
// generate extension maps its JSON fields to tensors of the same names.
const (
	genTextInput    = "text_input"
	genPromptTokens = "prompt_tokens"
	genTextOutput   = "text_output"
	genTokenIDs     = "token_ids"
	genLogProbs     = "logprobs"
)

// IsGenerate reports whether p is a generation request: it has a
// text_input or prompt_tokens input.
func IsGenerate(p *pb.ModelInferRequest) bool {
	for _, in := range p.GetInputs() {
		if in.GetName() == genTextInput || in.GetName() == genPromptTokens {
			return true
		}
	}
	return false
}

// paramsFromGRPC converts wire parameters; a parameter with no value set
// is refused.
func paramsFromGRPC(wp map[string]*pb.InferParameter) (infer.Params, error) {
	p := make(infer.Params, len(wp))
	for key, v := range wp {
		switch c := v.GetParameterChoice().(type) {
		case *pb.InferParameter_BoolParam:
			p[key] = c.BoolParam
		case *pb.InferParameter_Int64Param:
			p[key] = c.Int64Param
		case *pb.InferParameter_Uint64Param:
			p[key] = c.Uint64Param
		case *pb.InferParameter_DoubleParam:
			p[key] = c.DoubleParam
		case *pb.InferParameter_StringParam:
			p[key] = c.StringParam
		default:
			return nil, infer.BadRequest("parameter %q has no value", infer.Clip(key))
		}
	}
	return p, nil
}

// ParamToGRPC converts a parameter value (bool, int64, uint64, float64 or
// string) to its wire form.
func ParamToGRPC(v any) *pb.InferParameter {
	switch x := v.(type) {
	case bool:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: x}}
	case int64:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: x}}
	case uint64:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: x}}
	case float64:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: x}}
	case string:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: x}}
	}
	panic(fmt.Sprintf("server: parameter of type %T", v))
}

// requestParams checks that p names a model and reads its request
// parameters, taking out binary_data_output (raw outputs unless it is
// false).
func requestParams(p *pb.ModelInferRequest) (params infer.Params, binary bool, err error) {
	if p.GetModelName() == "" {
		return nil, false, infer.BadRequest("model_name is empty")
	}
	if params, err = paramsFromGRPC(p.GetParameters()); err != nil {
		return nil, false, err
	}
	binary = true
	if v, ok, err := params.Bool(ParamBinaryOutput); err != nil {
		return nil, false, err
	} else if ok {
		binary = v
		delete(params, ParamBinaryOutput)
	}
	return params, binary, nil
}

// FromGRPC converts an infer request into r (its Model, Version, ID,
// inputs, outputs and parameters); the caller sets Protocol and Received.
func FromGRPC(p *pb.ModelInferRequest, r *infer.Request, mem *TensorMemory) error {
	r.Model, r.Version, r.ID = p.GetModelName(), p.GetModelVersion(), p.GetId()
	params, binary, err := requestParams(p)
	if err != nil {
		return err
	}
	r.BinaryOutput = binary
	if err := r.SetParameters(params); err != nil {
		return err
	}
	if r.Inputs, err = inputsFromGRPC(p, mem); err != nil {
		return err
	}
	r.Outputs = make([]infer.RequestedOutput, len(p.GetOutputs()))
	for i, o := range p.GetOutputs() {
		ro := &r.Outputs[i]
		ro.Name = o.GetName()
		what := fmt.Sprintf("output %q", infer.Clip(ro.Name))
		op, err := paramsFromGRPC(o.GetParameters())
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if _, ok := op["shared_memory_region"]; ok {
			return infer.BadRequest("%s: shared memory is not supported", what)
		}
		if v, ok, err := op.Bool(ParamBinary); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		} else if ok {
			ro.Binary = &v
			delete(op, ParamBinary)
		}
		if k, ok, err := op.Int("classification", 0, infer.MaxClassification); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		} else if ok {
			ro.Classification = int(k)
			delete(op, "classification")
		}
		ro.Parameters = op
	}
	return sameEncoding(r)
}

// sameEncoding refuses a request whose outputs would mix raw and typed
// data (a gRPC response carries either raw_output_contents for every
// output or contents for every output), and makes the choice of the
// outputs asked for the request's.
func sameEncoding(r *infer.Request) error {
	for i := range r.Outputs {
		b := r.BinaryOutput
		if r.Outputs[i].Binary != nil {
			b = *r.Outputs[i].Binary
		}
		if i == 0 {
			r.BinaryOutput = b
			continue
		}
		if b != r.BinaryOutput {
			return infer.BadRequest("output %q: binary_data %v, but output %q is %v: a gRPC response has raw_output_contents for all outputs or for none",
				infer.Clip(r.Outputs[i].Name), b, infer.Clip(r.Outputs[0].Name), r.BinaryOutput)
		}
	}
	return nil
}

// inputsFromGRPC decodes the inputs of p: each from its contents, or, when
// the request has raw_input_contents, from the raw bytes in its position.
func inputsFromGRPC(p *pb.ModelInferRequest, mem *TensorMemory) ([]infer.Tensor, error) {
	ins, raw := p.GetInputs(), p.GetRawInputContents()
	if len(raw) > 0 && len(raw) != len(ins) {
		return nil, infer.BadRequest("%d raw_input_contents for %d inputs: with raw contents, every input has one, in order", len(raw), len(ins))
	}
	out := make([]infer.Tensor, len(ins))
	for i, in := range ins {
		t := &out[i]
		t.Name, t.Datatype, t.Shape = in.GetName(), in.GetDatatype(), in.GetShape()
		what := fmt.Sprintf("input %q", infer.Clip(t.Name))
		ip, err := paramsFromGRPC(in.GetParameters())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if _, ok := ip["shared_memory_region"]; ok {
			return nil, infer.BadRequest("%s: shared memory is not supported", what)
		}
		if err := ip.Only(what); err != nil {
			return nil, err
		}
		switch {
		case len(raw) > 0 && in.GetContents() != nil:
			return nil, infer.BadRequest("%s has contents, but the request has raw_input_contents: use one or the other for every input", what)
		case len(raw) > 0:
			if err = mem.take(t.Name, rawDecodedSize(t, len(raw[i]))); err == nil {
				err = t.DecodeRaw(raw[i])
			}
		case in.GetContents() == nil:
			return nil, infer.BadRequest("%s has no contents (and the request no raw_input_contents)", what)
		default:
			if err = mem.take(t.Name, typedDecodedSize(in.GetContents())); err == nil {
				err = ContentsToTensor(t, in.GetContents())
			}
		}
		if err != nil {
			return nil, err
		}
		// The data must fill the shape: an input the converter returns is
		// whole, whichever path (typed or raw contents) it came by.
		if err := t.Check(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// rawDecodedSize is the memory DecodeRaw allocates for t from size raw
// bytes (see TensorMemory).
func rawDecodedSize(t *infer.Tensor, size int) int64 {
	kind, elem := infer.DatatypeKind(t.Datatype)
	n, err := infer.Elements(t.Shape)
	if err != nil || kind == infer.KindUnsupported {
		return 0 // DecodeRaw refuses it before allocating
	}
	if kind == infer.KindBytes {
		return decodedSize(kind, int64(min(n, size/4)), 0) // the bytes stay in the message
	}
	return decodedSize(kind, int64(min(n, size/elem)), 0)
}

// typedDecodedSize is the memory contentsToTensor allocates: integers
// become int64s; FP32 and BYTES contents are used as they are.
func typedDecodedSize(c *pb.InferTensorContents) int64 {
	return decodedSize(infer.KindInt, int64(len(c.IntContents)+len(c.Int64Contents)+len(c.UintContents)+len(c.Uint64Contents)), 0)
}

// contentField names the InferTensorContents field a datatype's elements
// travel in.
func contentField(dt string) string {
	switch dt {
	case "INT8", "INT16", "INT32":
		return "int_contents"
	case "UINT8", "UINT16", "UINT32":
		return "uint_contents"
	case "INT64":
		return "int64_contents"
	case "UINT64":
		return "uint64_contents"
	case "FP32":
		return "fp32_contents"
	case "BYTES":
		return "bytes_contents"
	}
	return ""
}

// setFields names the non-empty fields of c.
func setFields(c *pb.InferTensorContents) []string {
	var set []string
	for _, f := range []struct {
		name string
		n    int
	}{{"bool_contents", len(c.BoolContents)}, {"int_contents", len(c.IntContents)}, {"int64_contents", len(c.Int64Contents)},
		{"uint_contents", len(c.UintContents)}, {"uint64_contents", len(c.Uint64Contents)}, {"fp32_contents", len(c.Fp32Contents)},
		{"fp64_contents", len(c.Fp64Contents)}, {"bytes_contents", len(c.BytesContents)}} {
		if f.n > 0 {
			set = append(set, f.name)
		}
	}
	return set
}

// ContentsToTensor fills t's data from typed contents, which must be in
// the field of t's datatype and within its range.
func ContentsToTensor(t *infer.Tensor, c *pb.InferTensorContents) error {
	kind, size := infer.DatatypeKind(t.Datatype)
	if kind == infer.KindUnsupported {
		return infer.DatatypeError(t.Name, t.Datatype)
	}
	field := contentField(t.Datatype)
	for _, f := range setFields(c) {
		if f != field {
			return infer.BadRequest("input %q: %s data belongs in %s, not %s", infer.Clip(t.Name), t.Datatype, field, f)
		}
	}
	switch kind {
	case infer.KindFloat:
		t.Float32 = c.Fp32Contents
		if t.Float32 == nil {
			t.Float32 = []float32{}
		}
		return nil
	case infer.KindBytes:
		t.Bytes = c.BytesContents
		if t.Bytes == nil {
			t.Bytes = [][]byte{}
		}
		return nil
	}
	var lo, hi int64
	if t.Datatype[0] == 'U' {
		lo, hi = 0, int64(1)<<(8*size)-1
	} else {
		lo, hi = -int64(1)<<(8*size-1), int64(1)<<(8*size-1)-1
	}
	if size == 8 {
		lo, hi = math.MinInt64, math.MaxInt64
	}
	t.Int64 = make([]int64, 0, max(len(c.IntContents), len(c.Int64Contents), len(c.UintContents), len(c.Uint64Contents)))
	check := func(i int, v int64) error {
		if v < lo || v > hi {
			return infer.BadRequest("input %q: value %d at index %d is out of range for %s", infer.Clip(t.Name), v, i, t.Datatype)
		}
		t.Int64 = append(t.Int64, v)
		return nil
	}
	for i, v := range c.IntContents {
		if err := check(i, int64(v)); err != nil {
			return err
		}
	}
	for i, v := range c.UintContents {
		if err := check(i, int64(v)); err != nil {
			return err
		}
	}
	for i, v := range c.Int64Contents {
		if err := check(i, v); err != nil {
			return err
		}
	}
	for i, v := range c.Uint64Contents {
		if v > math.MaxInt64 {
			return infer.BadRequest("input %q: UINT64 value %d at index %d is out of range", infer.Clip(t.Name), v, i)
		}
		t.Int64 = append(t.Int64, int64(v))
	}
	return nil
}

// ToGRPC converts a response. Outputs go raw (raw_output_contents) when
// they were asked for as binary data, else typed; FromGRPC made sure they
// all agree.
func ToGRPC(resp *infer.Response) *pb.ModelInferResponse {
	out := &pb.ModelInferResponse{ModelName: resp.Model, ModelVersion: resp.Version, Id: resp.ID,
		Outputs: make([]*pb.ModelInferResponse_InferOutputTensor, len(resp.Outputs))}
	raw := false
	size := 0
	for i := range resp.Outputs {
		if resp.Outputs[i].Binary {
			raw = true
			size += resp.Outputs[i].RawSize()
		}
	}
	var buf []byte
	if raw {
		buf = make([]byte, 0, size)
		out.RawOutputContents = make([][]byte, len(resp.Outputs))
	}
	for i := range resp.Outputs {
		o := &resp.Outputs[i]
		t := &pb.ModelInferResponse_InferOutputTensor{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape}
		out.Outputs[i] = t
		if raw {
			start := len(buf)
			buf = o.AppendRaw(buf)
			out.RawOutputContents[i] = buf[start:len(buf):len(buf)]
			continue
		}
		t.Contents = typedContents(o)
	}
	return out
}

// typedContents puts an output's elements into the contents field of its
// datatype.
func typedContents(o *infer.OutputTensor) *pb.InferTensorContents {
	c := &pb.InferTensorContents{}
	switch {
	case o.Bytes != nil:
		c.BytesContents = o.Bytes
	case o.Datatype == "FP32":
		c.Fp32Contents = o.Float32
	case o.Datatype == "INT64":
		c.Int64Contents = o.Int64
	case o.Datatype == "UINT64":
		c.Uint64Contents = make([]uint64, len(o.Int64))
		for i, v := range o.Int64 {
			c.Uint64Contents[i] = uint64(v)
		}
	case o.Datatype[0] == 'U':
		c.UintContents = make([]uint32, len(o.Int64))
		for i, v := range o.Int64 {
			c.UintContents[i] = uint32(v)
		}
	default:
		c.IntContents = make([]int32, len(o.Int64))
		for i, v := range o.Int64 {
			c.IntContents[i] = int32(v)
		}
	}
	return c
}

// GRPCGenerate is a generation request read from a ModelInferRequest, and
// what its response should hold.
type GRPCGenerate struct {
	infer.GenerateRequest
	ID string // the request's id, echoed in its responses
	// outputs are the outputs asked for, in order: text_output, token_ids
	// and logprobs by default.
	outputs []string
	binary  bool // raw output contents
}

// GenerateFromGRPC reads a generation request: the prompt from a
// text_input (one BYTES element) or prompt_tokens tensor, the sampling
// settings (max_tokens, temperature, top_k, top_p, seed, stop) from request
// parameters or, as Triton's generate extension maps them, from tensors of
// those names. A "stream" tensor (BOOL) is accepted and ignored: the RPC
// decides whether tokens stream.
func GenerateFromGRPC(p *pb.ModelInferRequest, g *GRPCGenerate, mem *TensorMemory) error {
	g.Model, g.Version, g.ID = p.GetModelName(), p.GetModelVersion(), p.GetId()
	params, binary, err := requestParams(p)
	if err != nil {
		return err
	}
	g.binary = binary
	// The stream handler's own flag reaches here on unary calls too.
	delete(params, ParamEmptyFinal)
	stream := -1
	for i, in := range p.GetInputs() {
		if in.GetName() == "stream" {
			stream = i
		}
	}
	q := &pb.ModelInferRequest{Inputs: p.GetInputs(), RawInputContents: p.GetRawInputContents()}
	if stream >= 0 { // BOOL is no tensor type of ours: leave it out
		q.Inputs = append(append([]*pb.ModelInferRequest_InferInputTensor{}, p.Inputs[:stream]...), p.Inputs[stream+1:]...)
		if len(q.RawInputContents) > 0 {
			q.RawInputContents = append(append([][]byte{}, p.RawInputContents[:stream]...), p.RawInputContents[stream+1:]...)
		}
	}
	ins, err := inputsFromGRPC(q, mem)
	if err != nil {
		return err
	}
	names := make(map[string]bool, len(ins))
	for i := range ins {
		t := &ins[i]
		if names[t.Name] {
			return infer.BadRequest("input %q given twice", infer.Clip(t.Name))
		}
		names[t.Name] = true
		if t.Name == genTextInput || t.Name == genPromptTokens {
			continue
		}
		if _, dup := params[t.Name]; dup {
			return infer.BadRequest("%s given both as a parameter and as an input", infer.Clip(t.Name))
		}
		v, err := scalarParam(t)
		if err != nil {
			return err
		}
		params[t.Name] = v
	}
	for i := range ins { // each whole already (inputsFromGRPC)
		t := &ins[i]
		switch t.Name {
		case genTextInput:
			if len(t.Bytes) != 1 {
				return infer.BadRequest("input %s: %d elements, want one string", genTextInput, len(t.Bytes))
			}
			g.Prompt = t.Bytes[0]
		case genPromptTokens:
			if t.Int64 == nil {
				return infer.BadRequest("input %s: datatype %s, want INT64 or INT32", genPromptTokens, infer.Clip(t.Datatype))
			}
			g.PromptTokens = t.Int64
		case "stop":
			for _, s := range t.Bytes {
				g.Stop = append(g.Stop, s)
			}
		}
	}
	if err := sampling(params, &g.GenerateRequest); err != nil {
		return err
	}
	dflt := g.binary
	for i, o := range p.GetOutputs() {
		switch n := o.GetName(); n {
		case genTextOutput, genTokenIDs, genLogProbs:
			op, err := paramsFromGRPC(o.GetParameters())
			if err != nil {
				return fmt.Errorf("output %q: %w", n, err)
			}
			v, ok, err := op.Bool(ParamBinary)
			if err != nil {
				return fmt.Errorf("output %q: %w", n, err)
			}
			if !ok {
				v = dflt
			}
			if i == 0 {
				g.binary = v
			} else if v != g.binary {
				return infer.BadRequest("output %q: binary_data %v, but output %q is %v: a gRPC response has raw_output_contents for all outputs or for none", n, v, p.Outputs[0].GetName(), g.binary)
			}
			delete(op, ParamBinary)
			if err := op.Only(fmt.Sprintf("output %q", n)); err != nil {
				return err
			}
			g.outputs = append(g.outputs, n)
		default:
			return fmt.Errorf("%w: %q: a generation request has outputs %s, %s and %s", infer.ErrUnsupportedOutput, infer.Clip(n), genTextOutput, genTokenIDs, genLogProbs)
		}
	}
	if len(g.outputs) == 0 {
		g.outputs = []string{genTextOutput, genTokenIDs, genLogProbs}
	}
	return nil
}

// scalarParam reads a sampling setting given as a tensor (one whole, as
// inputsFromGRPC returns them): one number, or for stop, strings (kept as
// Bytes by the caller; here it returns a placeholder the sampling reader
// skips).
func scalarParam(t *infer.Tensor) (any, error) {
	switch {
	case t.Name == "stop":
		if t.Bytes == nil {
			return nil, infer.BadRequest("input stop: datatype %s, want BYTES", infer.Clip(t.Datatype))
		}
		return stopTensor{}, nil
	case len(t.Int64) == 1:
		return t.Int64[0], nil
	case len(t.Float32) == 1:
		return float64(t.Float32[0]), nil
	}
	return nil, infer.BadRequest("input %q: want one number (a generation request takes %s or %s, and sampling settings as one-element tensors)", infer.Clip(t.Name), genTextInput, genPromptTokens)
}

// stopTensor marks stop strings that came as a tensor.
type stopTensor struct{}

// sampling reads the sampling settings of a generation request from p,
// refusing any other parameter.
func sampling(p infer.Params, g *infer.GenerateRequest) error {
	for key, v := range p {
		var err error
		switch key {
		case "max_tokens":
			var n int64
			if n, _, err = p.Int(key, 1, math.MaxInt32); err == nil {
				g.MaxTokens = int(n)
			}
		case "top_k":
			var n int64
			if n, _, err = p.Int(key, 0, math.MaxInt32); err == nil {
				g.TopK = int(n)
			}
		case "temperature":
			g.Temperature, _, err = p.Float(key)
		case "top_p":
			g.TopP, _, err = p.Float(key)
		case "seed":
			switch x := v.(type) {
			case int64:
				g.Seed = uint64(x)
			case uint64:
				g.Seed = x
			default:
				err = infer.BadRequest("parameter seed must be an integer")
			}
		case "stop":
			switch x := v.(type) {
			case stopTensor:
			case string:
				g.Stop = append(g.Stop, []byte(x))
			default:
				err = infer.BadRequest("parameter stop must be a string")
			}
		default:
			err = infer.BadRequest("generation request: unknown parameter %q (known: max_tokens, temperature, top_k, top_p, seed, stop)", infer.Clip(key))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Response is the response of model version version holding tokens (all
// of a unary generation, or one of a stream) and their text.
func (g *GRPCGenerate) Response(version string, text []byte, tokens []infer.GenerateToken) *pb.ModelInferResponse {
	resp := &infer.Response{Model: g.Model, Version: version, ID: g.ID}
	for _, name := range g.outputs {
		o := infer.OutputTensor{Name: name, Binary: g.binary}
		switch name {
		case genTextOutput:
			o.Datatype, o.Shape, o.Bytes = "BYTES", []int64{1}, [][]byte{text}
		case genTokenIDs:
			o.Datatype, o.Shape, o.Int64 = "INT64", []int64{int64(len(tokens))}, make([]int64, len(tokens))
			for i, t := range tokens {
				o.Int64[i] = t.Token
			}
		case genLogProbs:
			o.Datatype, o.Shape, o.Float32 = "FP32", []int64{int64(len(tokens))}, make([]float32, len(tokens))
			for i, t := range tokens {
				o.Float32[i] = float32(t.LogProb)
			}
		}
		resp.Outputs = append(resp.Outputs, o)
	}
	return ToGRPC(resp)
}

// CodeOf maps an error to the gRPC status code that answers it, by the
// request errors of package infer (the gRPC counterpart of
// infer.StatusOf).
func CodeOf(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, infer.ErrLoad) && (errors.Is(err, infer.ErrUnknownModel) || errors.Is(err, infer.ErrNotInRepository)):
		return codes.NotFound
	case errors.Is(err, infer.ErrBadRequest), errors.Is(err, schedule.ErrInput),
		errors.Is(err, infer.ErrNotLanguageModel), errors.Is(err, infer.ErrUnsupportedOutput), errors.Is(err, infer.ErrUnsupportedMedia):
		return codes.InvalidArgument
	case errors.Is(err, infer.ErrLoad), errors.Is(err, infer.ErrNoRepository):
		return codes.FailedPrecondition
	case errors.Is(err, infer.ErrUnauthenticated):
		return codes.Unauthenticated
	case errors.Is(err, infer.ErrForbidden):
		return codes.PermissionDenied
	case errors.Is(err, infer.ErrTooLarge), errors.Is(err, infer.ErrTooManySequences), errors.Is(err, infer.ErrResponseTooLarge):
		return codes.ResourceExhausted
	case errors.Is(err, infer.ErrUnknownModel), errors.Is(err, infer.ErrUnknownVersion), errors.Is(err, infer.ErrUnknownSequence):
		return codes.NotFound
	case errors.Is(err, infer.ErrSequenceEnded), errors.Is(err, infer.ErrSequenceExpired):
		return codes.FailedPrecondition
	case errors.Is(err, infer.ErrSequenceBusy):
		return codes.Aborted
	case errors.Is(err, infer.ErrBusy), errors.Is(err, infer.ErrDraining), errors.Is(err, infer.ErrOverBudget):
		return codes.Unavailable
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, infer.ErrSlowBody):
		return codes.DeadlineExceeded
	}
	return codes.Internal
}
