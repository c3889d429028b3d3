package onnx

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	pb "rnnserve/models/onnx/onnxpb"
	"rnnserve/models/safetensors"
)

// Opener opens an external data file given its location relative to the
// model's folder: something to read it by offset, and its size. The file
// must stay readable until the model's weights have been read.
type Opener func(location string) (io.ReaderAt, int64, error)

// tensors finds where the graph's constant tensors are stored (the model
// file, an external data file, or numbers decoded with the graph) and
// holds what the graph uses to what is stored: each use of a tensor
// claims its stored bytes, and together they may claim at most
// useFactor times the bytes of the file and its external data, so a
// graph that uses one tensor many times (or many tensors on one external
// range) cannot make the network many times the file.
type tensors struct {
	file     io.ReaderAt // the model file
	payloads []payload   // tensor data the walk left in it
	open     Opener
	files    map[string]external // external data files opened, by location
	stored   int64               // bytes of the file and the external data files opened
	claimed  int64               // bytes claimed by the tensors used
	read     int64               // external bytes opened
}

type external struct {
	r    io.ReaderAt
	size int64
}

// useFactor is how many times the bytes stored the tensors the graph uses
// may claim: twice, for a tied embedding and head (one tensor, read by
// the Gather and the Gemm). The messages say "twice".
const useFactor = 2

func newTensors(file io.ReaderAt, fileBytes int64, payloads []payload, open Opener) *tensors {
	return &tensors{file: file, payloads: payloads, open: open, files: map[string]external{}, stored: fileBytes}
}

// shape checks a tensor's dims and returns them with the element count.
func shape(t *pb.TensorProto) ([]int, int, error) {
	dims := t.GetDims()
	if len(dims) > 8 {
		return nil, 0, fmt.Errorf("%w: tensor %s has %d dims, want at most 8", ErrUnsupported, clip(t.GetName()), len(dims))
	}
	s := make([]int, len(dims))
	n := 1
	for i, d := range dims {
		if d < 0 || d > MaxElements || n > MaxElements/max(int(d), 1) {
			return nil, 0, fmt.Errorf("%w: tensor %s has dims %s, more than MaxElements = %d elements", ErrLimit, clip(t.GetName()), ints64(dims), MaxElements)
		}
		s[i] = int(d)
		n *= int(d)
	}
	return s, n, nil
}

// claim charges one use of a tensor of stored bytes.
func (ts *tensors) claim(t *pb.TensorProto, stored int64) error {
	if ts.claimed+stored > useFactor*ts.stored {
		return fmt.Errorf("%w: tensor %s of %d bytes, used after tensors of %d bytes, makes the graph use more than twice the %d bytes "+
			"the file and its external data store (each use of a tensor counts)", ErrLimit, clip(t.GetName()), stored, ts.claimed, ts.stored)
	}
	ts.claimed += stored
	return nil
}

// payload returns the data the walk left in the file for t, if any.
func (ts *tensors) payload(t *pb.TensorProto) (payload, bool, error) {
	b := t.ProtoReflect().GetUnknown()
	found := -1
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeField(b)
		if n < 0 {
			return payload{}, false, fmt.Errorf("%w: %v", ErrFormat, protowire.ParseError(n))
		}
		if num == markerField && typ == protowire.VarintType {
			v, _ := protowire.ConsumeVarint(b[protowire.SizeTag(num):])
			if found >= 0 || v >= uint64(len(ts.payloads)) {
				// Two TensorProtos merged into one (a field given twice).
				return payload{}, false, fmt.Errorf("%w: tensor %s has its data in two fields", ErrUnsupported, clip(t.GetName()))
			}
			found = int(v)
		}
		b = b[n:]
	}
	if found < 0 {
		return payload{}, false, nil
	}
	return ts.payloads[found], true, nil
}

// elided reports whether the walk left t's data in the file.
func elided(t *pb.TensorProto) bool {
	for b := t.ProtoReflect().GetUnknown(); len(b) > 0; {
		num, _, n := protowire.ConsumeField(b)
		if n < 0 {
			return false
		}
		if num == markerField {
			return true
		}
		b = b[n:]
	}
	return false
}

// inline reports whether t has data decoded with the graph.
func inline(t *pb.TensorProto) bool {
	return t.RawData != nil || len(t.FloatData) > 0 || len(t.DoubleData) > 0 || len(t.Int32Data) > 0 || len(t.Int64Data) > 0
}

// stored is a float tensor as the file stores it: its elements, of dtype
// dt, at off of r.
type stored struct {
	name  string
	r     io.ReaderAt
	off   int64
	dt    safetensors.DType
	shape []int
}

func (s *stored) es() int64 { return int64(s.dt.Size()) }

// floats finds a float tensor's data, with its shape, and claims them.
// FLOAT, DOUBLE, FLOAT16 and BFLOAT16 are read, converted to float32 as
// they are read into the network.
func (ts *tensors) floats(t *pb.TensorProto) (*stored, error) {
	name := t.GetName()
	if t.Segment != nil {
		return nil, fmt.Errorf("%w: tensor %s is a segment of a larger tensor", ErrUnsupported, clip(name))
	}
	sh, n, err := shape(t)
	if err != nil {
		return nil, err
	}
	s := &stored{name: name, shape: sh}
	typ := pb.TensorProto_DataType(t.GetDataType())
	switch typ {
	case pb.TensorProto_FLOAT:
		s.dt = safetensors.F32
	case pb.TensorProto_DOUBLE:
		s.dt = safetensors.F64
	case pb.TensorProto_FLOAT16:
		s.dt = safetensors.F16
	case pb.TensorProto_BFLOAT16:
		s.dt = safetensors.BF16
	default:
		return nil, fmt.Errorf("%w: tensor %s has data type %v, want a float type", ErrUnsupported, clip(name), typ)
	}
	p, left, err := ts.payload(t)
	if err != nil {
		return nil, err
	}
	var length, claim int64 // the bytes of the elements, and those their use claims
	switch {
	case t.GetDataLocation() == pb.TensorProto_EXTERNAL:
		if s.r, s.off, length, err = ts.external(t); err != nil {
			return nil, err
		}
		claim = length
	case left && inline(t):
		return nil, fmt.Errorf("%w: tensor %s has its data in two fields", ErrUnsupported, clip(name))
	case left:
		if p.field == floatDataField && s.dt != safetensors.F32 || p.field == doubleDataField && s.dt != safetensors.F64 {
			return nil, fmt.Errorf("%w: tensor %s of type %v has its data in %s", ErrUnsupported, clip(name), typ, tensorMD.Fields().ByNumber(p.field).Name())
		}
		// Packed float_data and double_data are little-endian floats and
		// doubles, as raw_data holds them.
		s.r, s.off, length, claim = ts.file, p.off, p.n, p.n
	case t.RawData != nil:
		s.r, length, claim = bytes.NewReader(t.RawData), int64(len(t.RawData)), int64(len(t.RawData))
	default:
		// Numbers decoded with the graph, as little-endian bytes.
		var b []byte
		count := 0
		switch s.dt {
		case safetensors.F32:
			count = len(t.FloatData)
			for _, f := range t.FloatData {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
			}
		case safetensors.F64:
			count = len(t.DoubleData)
			for _, f := range t.DoubleData {
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
			}
		default:
			// FLOAT16 and BFLOAT16 in int32_data.
			count = len(t.Int32Data)
			for _, v := range t.Int32Data {
				b = binary.LittleEndian.AppendUint16(b, uint16(v))
			}
		}
		if count != n {
			return nil, fmt.Errorf("%w: tensor %s has %d values for dims %s", ErrUnsupported, clip(name), count, ints64(t.GetDims()))
		}
		s.r, length, claim = bytes.NewReader(b), int64(len(b)), int64(len(b))
		if s.dt == safetensors.F16 || s.dt == safetensors.BF16 {
			claim = int64(n) // each value at least one byte of varint in the file
		}
	}
	if want := int64(n) * s.es(); length != want {
		return nil, fmt.Errorf("%w: tensor %s has %d bytes of data for dims %s of %v (%d bytes)", ErrUnsupported, clip(name), length, ints64(t.GetDims()), typ, want)
	}
	if err := ts.claim(t, claim); err != nil {
		return nil, err
	}
	return s, nil
}

// ints decodes a small inline integer tensor (shapes, axes, indices):
// at most maxInts values.
func ints(t *pb.TensorProto) ([]int64, bool) {
	const maxInts = 64
	if t == nil || t.GetDataLocation() == pb.TensorProto_EXTERNAL || t.Segment != nil || elided(t) {
		return nil, false
	}
	raw := t.GetRawData()
	switch pb.TensorProto_DataType(t.GetDataType()) {
	case pb.TensorProto_INT64:
		if raw != nil {
			if len(raw)%8 != 0 || len(raw) > 8*maxInts {
				return nil, false
			}
			out := make([]int64, len(raw)/8)
			for i := range out {
				out[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
			}
			return out, true
		}
		if len(t.GetInt64Data()) > maxInts {
			return nil, false
		}
		return t.GetInt64Data(), true
	case pb.TensorProto_INT32:
		var out []int64
		if raw != nil {
			if len(raw)%4 != 0 || len(raw) > 4*maxInts {
				return nil, false
			}
			for i := 0; i < len(raw); i += 4 {
				out = append(out, int64(int32(binary.LittleEndian.Uint32(raw[i:]))))
			}
			return out, true
		}
		if len(t.GetInt32Data()) > maxInts {
			return nil, false
		}
		for _, v := range t.GetInt32Data() {
			out = append(out, int64(v))
		}
		return out, true
	}
	return nil, false
}

// isZero reports whether a small inline tensor (a ConstantOfShape value)
// holds only zeros; an absent one is a zero float.
func isZero(t *pb.TensorProto) bool {
	if t == nil {
		return true
	}
	if t.GetDataLocation() == pb.TensorProto_EXTERNAL || elided(t) {
		return false
	}
	for _, b := range t.GetRawData() {
		if b != 0 {
			return false
		}
	}
	for _, f := range t.GetFloatData() {
		if f != 0 || math.Signbit(float64(f)) {
			return false
		}
	}
	for _, v := range t.GetInt32Data() {
		if v != 0 {
			return false
		}
	}
	for _, v := range t.GetInt64Data() {
		if v != 0 {
			return false
		}
	}
	for _, v := range t.GetDoubleData() {
		if v != 0 || math.Signbit(v) {
			return false
		}
	}
	return true
}

// external finds a tensor's external data: a range of a file opened
// through open, only from a local path inside the model's folder. Each
// file is opened once.
func (ts *tensors) external(t *pb.TensorProto) (io.ReaderAt, int64, int64, error) {
	var loc string
	var offset, length int64 = 0, -1
	for _, e := range t.GetExternalData() {
		switch e.GetKey() {
		case "location":
			loc = e.GetValue()
		case "offset", "length":
			v, err := strconv.ParseInt(e.GetValue(), 10, 64)
			if err != nil || v < 0 {
				return nil, 0, 0, fmt.Errorf("%w: tensor %s: %s %s", ErrExternalData, clip(t.GetName()), e.GetKey(), clip(e.GetValue()))
			}
			if e.GetKey() == "offset" {
				offset = v
			} else {
				length = v
			}
		}
	}
	if loc == "" || !filepath.IsLocal(loc) || !fs.ValidPath(filepath.ToSlash(loc)) || strings.Contains(loc, `\`) {
		return nil, 0, 0, fmt.Errorf("%w: tensor %s: location %s is outside the model's folder (only relative paths below it are read)", ErrExternalData, clip(t.GetName()), clip(loc))
	}
	if ts.open == nil {
		return nil, 0, 0, fmt.Errorf("%w: tensor %s is stored in %s, and no folder was given to read it from", ErrExternalData, clip(t.GetName()), clip(loc))
	}
	loc = filepath.ToSlash(loc)
	f, ok := ts.files[loc]
	if !ok {
		if len(ts.files) >= MaxExternalFiles {
			return nil, 0, 0, fmt.Errorf("%w: tensor %s: external data in more than MaxExternalFiles = %d files", ErrLimit, clip(t.GetName()), MaxExternalFiles)
		}
		r, size, err := ts.open(loc)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("%w: tensor %s: %w", ErrExternalData, clip(t.GetName()), err)
		}
		if size < 0 {
			return nil, 0, 0, fmt.Errorf("%w: tensor %s: %s has size %d", ErrExternalData, clip(t.GetName()), clip(loc), size)
		}
		if ts.read += size; ts.read > MaxExternalBytes {
			return nil, 0, 0, fmt.Errorf("%w: external data files of more than MaxExternalBytes = %d bytes", ErrLimit, int64(MaxExternalBytes))
		}
		f = external{r, size}
		ts.files[loc] = f
		ts.stored += size
	}
	if offset > f.size || length > f.size-offset {
		return nil, 0, 0, fmt.Errorf("%w: tensor %s: offset %d and length %d outside %s (%d bytes)", ErrExternalData, clip(t.GetName()), offset, length, clip(loc), f.size)
	}
	if length < 0 {
		length = f.size - offset
	}
	return f.r, offset, length, nil
}
