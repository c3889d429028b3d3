// Package infer holds the one internal form of an inference request and
// its response, whatever the transport: the REST codec and the gRPC
// conversion decode their wire formats into a Request, package server
// runs it and hands back a Response for them to encode. It also holds the
// errors a request can meet and their HTTP statuses (StatusOf), and the
// helpers that keep a client's words short in an error message (Clip,
// ClipShape). It knows tensors, parameters and errors, not models,
// batches or connections.
package infer

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"
	"unsafe"
)

// littleEndian is true on hosts whose byte order is the wire's.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// Request is one inference request in transport-neutral form. Every front
// end decodes its wire format into a Request and hands it to package
// server's Server.Infer, and encodes the Response that returns: REST JSON
// and REST binary tensors, and gRPC. Batching, sequences,
// limits, statistics and metrics live behind Infer, so they apply the same
// way whatever the transport.
//
// How a transport uses it:
//
//  1. Fill Model, Version (empty for the one served), ID, Protocol (the
//     metrics label: "rest", "grpc") and Received (when the request
//     arrived, so decoding counts as compute_input in the statistics).
//  2. Decode each input into a Tensor: typed data in Int64, Float32 or
//     Bytes according to Datatype. Raw little-endian bytes (Triton's binary
//     tensor data, gRPC raw_input_contents) go through DecodeRaw; typed
//     values (JSON data, gRPC typed contents) are converted by the
//     transport. Infer checks shapes against data lengths and the model's
//     own limits; a transport only refuses what it cannot parse.
//  3. Put the request parameters into a Params and call SetParameters:
//     it takes the sequence controls (sequence_id, sequence_start,
//     sequence_end) into Sequence and keeps the rest, which the model
//     checks (it refuses parameters it does not know). Parameters that are
//     the transport's own business (REST's binary_data_output) are taken
//     out by the transport first.
//  4. List the requested outputs with their parameters; Classification
//     (Triton's classification extension) and the binary-or-JSON choice
//     are fields of their own, read by the transport from its wire format.
//  5. Call Infer with the request's context: its cancellation drops the
//     request's rows from a batch at the next step, its deadline bounds
//     the wait for a core. Map a failure to a status with StatusOf (HTTP)
//     or by errors.Is on the sentinels in errors.go (gRPC codes: package
//     wire's CodeOf).
//  6. Encode Response.Outputs in order. Each OutputTensor has typed data
//     and says whether the client asked for it as raw binary data;
//     AppendRaw writes it as Triton's binary layout (and gRPC's
//     raw_output_contents).
//
// A transport that fails before it has a Request (unparsable body, body
// too large) calls Server.Rejected so the failure is counted like the
// others.
type Request struct {
	Model   string
	Version string // "" for the version served
	ID      string // echoed in the response

	Inputs []Tensor
	// Outputs are the outputs wanted, returned in this order; none means
	// the model's default output.
	Outputs []RequestedOutput
	// Sequence holds the stateful-sequence controls; zero for a request
	// that is not part of a sequence.
	Sequence SequenceControl
	// Parameters are the request parameters left after SetParameters took
	// the sequence controls; the model refuses any it does not read.
	Parameters Params
	// BinaryOutput is the default encoding of outputs whose Binary is nil:
	// true asks for raw tensor data instead of JSON numbers (REST's
	// binary_data_output). A transport without the choice ignores it.
	BinaryOutput bool

	Protocol string    // metrics label: "rest" or "grpc"
	Received time.Time // when the transport got the request; zero: when Infer starts

	// Charge, set by the front end, takes n more bytes from the request's
	// share of the memory budget (nil: not charged).
	Charge func(n int64) error
	// Plan, set by the server before a model runs the request, checks and
	// charges the response the model is about to compute (nil: none); a
	// model calls it through ExpectOutputs.
	Plan func([]PlannedOutput) error
}

// PlannedOutput is an output a model is about to compute.
type PlannedOutput struct {
	Name     string
	Datatype string  // FP32 or INT64
	Shape    []int64 // at most these dimensions
}

// ExpectOutputs is called by a model before it runs r, with the outputs
// it will compute: Plan refuses a response over the limit and charges the
// rest.
func (r *Request) ExpectOutputs(outs []PlannedOutput) error {
	if r.Plan == nil {
		return nil
	}
	return r.Plan(outs)
}

// Tensor is one input tensor. Exactly one of Int64, Float32 and Bytes
// holds its elements, row-major, according to Datatype (see DatatypeKind).
type Tensor struct {
	Name     string
	Datatype string // KServe v2 name: INT64, INT32, FP32, BYTES, ...
	Shape    []int64
	Int64    []int64   // INT8..INT64 and UINT8..UINT64
	Float32  []float32 // FP32
	Bytes    [][]byte  // BYTES
}

// RequestedOutput is one output a request asks for.
type RequestedOutput struct {
	Name string
	// Binary asks for the output as raw tensor data (true) or JSON (false);
	// nil follows Request.BinaryOutput.
	Binary *bool
	// Classification, when above 0, replaces the output by its
	// Classification largest values along the last dimension as BYTES
	// elements "value:index" (Triton's classification extension): the
	// last dimension of the shape becomes Classification.
	Classification int
	// Parameters are the output's own parameters (last_step, k).
	Parameters Params
}

// MaxClassification bounds RequestedOutput.Classification.
const MaxClassification = 1 << 16

// SequenceControl are a request's stateful-sequence parameters, as
// Triton's sequence batcher has them.
type SequenceControl struct {
	ID         string // "" when the request is not part of a sequence
	Start, End bool
}

// Params are request, tensor or output parameters. A value is a bool,
// int64, uint64, float64 or string: the types KServe v2 parameters take
// (JSON numbers decode as int64 when integral and in range, as uint64 above
// it, else float64).
type Params map[string]any

// Response is the result of an inference request.
type Response struct {
	Model   string
	Version string
	ID      string
	Outputs []OutputTensor
}

// OutputTensor is one output. Exactly one of Float32, Int64 and Bytes
// holds its elements, row-major, according to Datatype.
type OutputTensor struct {
	Name     string
	Datatype string
	Shape    []int64
	Float32  []float32
	Int64    []int64
	Bytes    [][]byte
	// Binary is true when the request asked for this output as raw
	// tensor data.
	Binary bool
}

// Kind is how a datatype's elements are held in a Tensor.
type Kind int

// Kinds of tensor data.
const (
	KindUnsupported Kind = iota
	KindInt              // Tensor.Int64
	KindFloat            // Tensor.Float32
	KindBytes            // Tensor.Bytes
)

// DatatypeKind tells which field of a Tensor holds elements of datatype dt
// and, for fixed-size types, the size of one element in raw form (BYTES
// elements are 4-byte lengths and their bytes). Datatypes no rnnserve
// model takes (BOOL, FP16, BF16, FP64) are KindUnsupported.
func DatatypeKind(dt string) (Kind, int) {
	switch dt {
	case "INT8", "UINT8":
		return KindInt, 1
	case "INT16", "UINT16":
		return KindInt, 2
	case "INT32", "UINT32":
		return KindInt, 4
	case "INT64", "UINT64":
		return KindInt, 8
	case "FP32":
		return KindFloat, 4
	case "BYTES":
		return KindBytes, 0
	}
	return KindUnsupported, 0
}

// DatatypeError reports a datatype no model takes.
func DatatypeError(name, dt string) error {
	return BadRequest("input %q: datatype %q is not supported (rnnserve models take INT64, INT32, FP32 or BYTES; any INT/UINT width is read as integers)", Clip(name), Clip(dt))
}

// Elements is the number of elements a shape holds, refusing negative
// dimensions and counts that overflow.
func Elements(shape []int64) (int, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, BadRequest("shape %v has a negative dimension", ClipShape(shape))
		}
		if d > 0 && n > math.MaxInt32/d {
			return 0, BadRequest("shape %v holds more than %d elements", ClipShape(shape), math.MaxInt32)
		}
		n *= d
	}
	return int(n), nil
}

// Check verifies that t's data is of its datatype's kind and holds the
// element count of its shape.
func (t *Tensor) Check() error {
	kind, _ := DatatypeKind(t.Datatype)
	n, err := Elements(t.Shape)
	if err != nil {
		return fmt.Errorf("input %q: %w", Clip(t.Name), err)
	}
	var have int
	switch kind {
	case KindInt:
		have = len(t.Int64)
	case KindFloat:
		have = len(t.Float32)
	case KindBytes:
		have = len(t.Bytes)
	default:
		return DatatypeError(t.Name, t.Datatype)
	}
	if have != n {
		return BadRequest("input %q: %d values, want %d for its shape %v", Clip(t.Name), have, n, ClipShape(t.Shape))
	}
	return nil
}

// DecodeRaw fills t's data from raw little-endian bytes laid out as
// Triton's binary tensor data (and gRPC's raw_input_contents) lay them
// out: fixed-size elements back to back, BYTES elements each a 4-byte
// length and that many bytes. The byte count must match the shape exactly.
func (t *Tensor) DecodeRaw(raw []byte) error {
	kind, size := DatatypeKind(t.Datatype)
	if kind == KindUnsupported {
		return DatatypeError(t.Name, t.Datatype)
	}
	n, err := Elements(t.Shape)
	if err != nil {
		return fmt.Errorf("input %q: %w", Clip(t.Name), err)
	}
	if kind == KindBytes {
		t.Bytes, err = splitBytes(t.Name, raw, n)
		return err
	}
	if len(raw) != n*size {
		return BadRequest("input %q: %d bytes of binary data, want %d (shape %v x %d-byte %s)", Clip(t.Name), len(raw), n*size, ClipShape(t.Shape), size, t.Datatype)
	}
	if kind == KindFloat {
		t.Float32 = make([]float32, n)
		for i := range t.Float32 {
			t.Float32[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return nil
	}
	t.Int64 = make([]int64, n)
	return decodeInts(t.Name, t.Datatype, raw, size, t.Int64)
}

// decodeInts converts little-endian integers of the given size into dst.
func decodeInts(name, dt string, raw []byte, size int, dst []int64) error {
	unsigned := dt[0] == 'U'
	for i := range dst {
		b := raw[i*size:]
		switch size {
		case 1:
			if unsigned {
				dst[i] = int64(b[0])
			} else {
				dst[i] = int64(int8(b[0]))
			}
		case 2:
			v := binary.LittleEndian.Uint16(b)
			if unsigned {
				dst[i] = int64(v)
			} else {
				dst[i] = int64(int16(v))
			}
		case 4:
			v := binary.LittleEndian.Uint32(b)
			if unsigned {
				dst[i] = int64(v)
			} else {
				dst[i] = int64(int32(v))
			}
		default:
			v := binary.LittleEndian.Uint64(b)
			if unsigned && v > math.MaxInt64 {
				return BadRequest("input %q: UINT64 value %d at index %d is out of range", Clip(name), v, i)
			}
			dst[i] = int64(v)
		}
	}
	return nil
}

// splitBytes splits n BYTES elements, each a 4-byte little-endian length
// and that many bytes, which must use raw exactly. The elements alias raw.
func splitBytes(name string, raw []byte, n int) ([][]byte, error) {
	if n > len(raw)/4 {
		return nil, BadRequest("input %q: %d bytes of binary data cannot hold %d BYTES elements (4-byte length each)", Clip(name), len(raw), n)
	}
	out := make([][]byte, n)
	off := 0
	for i := range out {
		if len(raw)-off < 4 {
			return nil, BadRequest("input %q: binary data ends inside the length of BYTES element %d", Clip(name), i)
		}
		l := binary.LittleEndian.Uint32(raw[off:])
		off += 4
		if uint64(l) > uint64(len(raw)-off) {
			return nil, BadRequest("input %q: BYTES element %d has length %d, but only %d bytes follow", Clip(name), i, l, len(raw)-off)
		}
		out[i] = raw[off : off+int(l) : off+int(l)]
		off += int(l)
	}
	if off != len(raw) {
		return nil, BadRequest("input %q: %d bytes of binary data after its %d BYTES elements", Clip(name), len(raw)-off, n)
	}
	return out, nil
}

// RawSize is the number of bytes AppendRaw writes for o.
func (o *OutputTensor) RawSize() int {
	switch {
	case o.Bytes != nil:
		n := 0
		for _, b := range o.Bytes {
			n += 4 + len(b)
		}
		return n
	case o.Datatype == "FP32":
		return 4 * len(o.Float32)
	}
	_, size := DatatypeKind(o.Datatype)
	return size * len(o.Int64)
}

// AppendRaw appends o's elements to dst as raw little-endian data: the
// layout of Triton's binary tensor data and of gRPC's raw_output_contents.
func (o *OutputTensor) AppendRaw(dst []byte) []byte {
	switch {
	case o.Bytes != nil:
		for _, b := range o.Bytes {
			dst = binary.LittleEndian.AppendUint32(dst, uint32(len(b)))
			dst = append(dst, b...)
		}
	case o.Datatype == "FP32" && littleEndian && len(o.Float32) > 0:
		// The host's float32s are already little-endian: one copy.
		dst = append(dst, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(o.Float32))), 4*len(o.Float32))...)
	case o.Datatype == "FP32":
		for _, f := range o.Float32 {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(f))
		}
	default:
		_, size := DatatypeKind(o.Datatype)
		for _, v := range o.Int64 {
			switch size {
			case 1:
				dst = append(dst, byte(v))
			case 2:
				dst = binary.LittleEndian.AppendUint16(dst, uint16(v))
			case 4:
				dst = binary.LittleEndian.AppendUint32(dst, uint32(v))
			default:
				dst = binary.LittleEndian.AppendUint64(dst, uint64(v))
			}
		}
	}
	return dst
}

// SetParameters takes the sequence controls out of p into r.Sequence and
// keeps the other parameters in r.Parameters.
func (r *Request) SetParameters(p Params) error {
	rest := Params{}
	for key, v := range p {
		switch key {
		case "sequence_id":
			id, err := sequenceID(v)
			if err != nil {
				return err
			}
			r.Sequence.ID = id
		case "sequence_start", "sequence_end":
			b, ok := v.(bool)
			if !ok {
				return BadRequest("parameter %s must be a boolean", key)
			}
			if key == "sequence_start" {
				r.Sequence.Start = b
			} else {
				r.Sequence.End = b
			}
		default:
			rest[key] = v
		}
	}
	if (r.Sequence.Start || r.Sequence.End) && r.Sequence.ID == "" {
		return BadRequest("sequence_start or sequence_end without sequence_id")
	}
	r.Parameters = rest
	return nil
}

// MaxSequenceID bounds a string sequence id.
const MaxSequenceID = 256

// sequenceID reads a sequence_id: a non-empty string or an unsigned
// integer other than 0 (its decimal form).
func sequenceID(v any) (string, error) {
	var id string
	switch v := v.(type) {
	case string:
		id = v
	case int64:
		if v < 0 {
			return "", BadRequest("parameter sequence_id: %d is not an unsigned integer", v)
		}
		id = strconv.FormatInt(v, 10)
	case uint64:
		id = strconv.FormatUint(v, 10)
	case float64:
		return "", BadRequest("parameter sequence_id: %v is not an unsigned integer", v)
	default:
		return "", BadRequest("parameter sequence_id must be a string or an unsigned integer")
	}
	if id == "" || id == "0" {
		return "", BadRequest("parameter sequence_id must not be empty or 0")
	}
	if len(id) > MaxSequenceID {
		return "", BadRequest("parameter sequence_id longer than %d bytes", MaxSequenceID)
	}
	return id, nil
}

// Bool reads a boolean parameter; ok is false when it is absent.
func (p Params) Bool(key string) (v, ok bool, err error) {
	raw, ok := p[key]
	if !ok {
		return false, false, nil
	}
	b, isBool := raw.(bool)
	if !isBool {
		return false, true, BadRequest("parameter %s must be a boolean", key)
	}
	return b, true, nil
}

// Int reads an integer parameter in [lo, hi]; ok is false when it is absent.
func (p Params) Int(key string, lo, hi int64) (v int64, ok bool, err error) {
	raw, ok := p[key]
	if !ok {
		return 0, false, nil
	}
	switch x := raw.(type) {
	case int64:
		v = x
	case uint64:
		v = math.MaxInt64
	default:
		return 0, true, BadRequest("parameter %s must be an integer in %d..%d", key, lo, hi)
	}
	if v < lo || v > hi {
		return 0, true, BadRequest("parameter %s must be an integer in %d..%d", key, lo, hi)
	}
	return v, true, nil
}

// Float reads a number parameter; ok is false when it is absent.
func (p Params) Float(key string) (v float64, ok bool, err error) {
	raw, ok := p[key]
	if !ok {
		return 0, false, nil
	}
	switch x := raw.(type) {
	case int64:
		return float64(x), true, nil
	case uint64:
		return float64(x), true, nil
	case float64:
		return x, true, nil
	}
	return 0, true, BadRequest("parameter %s must be a number", key)
}

// String reads a string parameter; ok is false when it is absent.
func (p Params) String(key string) (v string, ok bool, err error) {
	raw, ok := p[key]
	if !ok {
		return "", false, nil
	}
	s, isString := raw.(string)
	if !isString {
		return "", true, BadRequest("parameter %s must be a string", key)
	}
	return s, true, nil
}

// Only refuses every parameter of p not named in known; what names p's
// owner in the message.
func (p Params) Only(what string, known ...string) error {
outer:
	for key := range p {
		for _, k := range known {
			if key == k {
				continue outer
			}
		}
		if len(known) == 0 {
			return BadRequest("%s: unknown parameter %q (none are taken)", what, Clip(key))
		}
		return BadRequest("%s: unknown parameter %q (known: %v)", what, Clip(key), known)
	}
	return nil
}

// maxEcho bounds how much of a client's input an error message repeats.
const maxEcho = 64

// Clip cuts s to maxEcho bytes for an error message.
func Clip(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	return s[:maxEcho] + "..."
}

// ClipShape cuts a shape for an error message.
func ClipShape(s []int64) []int64 {
	if len(s) <= 8 {
		return s
	}
	return s[:8]
}
