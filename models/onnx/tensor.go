package onnx

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	pb "rnnserve/models/onnx/onnxpb"
	"rnnserve/models/safetensors"
)

// tensors decodes the graph's constant tensors, reading external data
// through open, and holds the decoded bytes to the bytes stored: every
// element of a tensor is stored somewhere in the file or an external data
// file, so the tensors the graph uses cannot claim more bytes than those
// files hold (tensors that share one stored range are refused).
type tensors struct {
	open    func(string) ([]byte, error)
	files   map[string][]byte // external data files read, by location
	budget  int64             // stored bytes not yet claimed by a decoded tensor
	read    int64             // external bytes read
	charged map[*pb.TensorProto]bool
}

func newTensors(open func(string) ([]byte, error), fileBytes int64) *tensors {
	return &tensors{open: open, files: map[string][]byte{}, budget: fileBytes, charged: map[*pb.TensorProto]bool{}}
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

// charge claims stored bytes for a tensor's first decoding.
func (ts *tensors) charge(t *pb.TensorProto, stored int64) error {
	if ts.charged[t] {
		return nil
	}
	if stored > ts.budget {
		return fmt.Errorf("%w: tensor %s claims %d bytes of data where the file and its external data have %d bytes not claimed by other tensors",
			ErrLimit, clip(t.GetName()), stored, ts.budget)
	}
	ts.budget -= stored
	ts.charged[t] = true
	return nil
}

// floats decodes a float tensor to float32, with its shape. The slice
// may be the tensor's own memory (FLOAT data read in place): the caller
// changes it only where the tensor is its alone (see graph.own).
func (ts *tensors) floats(t *pb.TensorProto) ([]float32, []int, error) {
	name := t.GetName()
	if t.Segment != nil {
		return nil, nil, fmt.Errorf("%w: tensor %s is a segment of a larger tensor", ErrUnsupported, clip(name))
	}
	s, n, err := shape(t)
	if err != nil {
		return nil, nil, err
	}
	raw := t.GetRawData()
	if t.GetDataLocation() == pb.TensorProto_EXTERNAL {
		if raw, err = ts.external(t); err != nil {
			return nil, nil, err
		}
	}
	var dt safetensors.DType
	switch typ := pb.TensorProto_DataType(t.GetDataType()); typ {
	case pb.TensorProto_FLOAT:
		dt = safetensors.F32
		if raw != nil && len(raw) == 4*n && littleEndian && uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%4 == 0 {
			// The bytes are the floats: no copy.
			if err := ts.charge(t, int64(len(raw))); err != nil {
				return nil, nil, err
			}
			return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(raw))), n), s, nil
		}
		if raw == nil {
			if len(t.GetFloatData()) != n {
				return nil, nil, fmt.Errorf("%w: tensor %s has %d floats for dims %s", ErrUnsupported, clip(name), len(t.GetFloatData()), ints64(t.GetDims()))
			}
			if err := ts.charge(t, 4*int64(n)); err != nil {
				return nil, nil, err
			}
			return t.GetFloatData(), s, nil
		}
	case pb.TensorProto_DOUBLE:
		dt = safetensors.F64
		if raw == nil {
			if len(t.GetDoubleData()) != n {
				return nil, nil, fmt.Errorf("%w: tensor %s has %d doubles for dims %s", ErrUnsupported, clip(name), len(t.GetDoubleData()), ints64(t.GetDims()))
			}
			if err := ts.charge(t, 8*int64(n)); err != nil {
				return nil, nil, err
			}
			v := make([]float32, n)
			for i, d := range t.GetDoubleData() {
				v[i] = float32(d)
			}
			return v, s, nil
		}
	case pb.TensorProto_FLOAT16, pb.TensorProto_BFLOAT16:
		dt = safetensors.F16
		if typ == pb.TensorProto_BFLOAT16 {
			dt = safetensors.BF16
		}
		if raw == nil {
			if len(t.GetInt32Data()) != n {
				return nil, nil, fmt.Errorf("%w: tensor %s has %d values for dims %s", ErrUnsupported, clip(name), len(t.GetInt32Data()), ints64(t.GetDims()))
			}
			// Each value is at least one byte of varint in the file.
			if err := ts.charge(t, int64(n)); err != nil {
				return nil, nil, err
			}
			raw = make([]byte, 0, 2*n)
			for _, v := range t.GetInt32Data() {
				raw = binary.LittleEndian.AppendUint16(raw, uint16(v))
			}
			st := safetensors.Tensor{Name: name, DType: dt, Shape: s, Data: raw}
			v, err := st.Float32s()
			if err != nil {
				return nil, nil, fmt.Errorf("%w: tensor %s: %w", ErrUnsupported, clip(name), err)
			}
			return v, s, nil
		}
	default:
		return nil, nil, fmt.Errorf("%w: tensor %s has data type %v, want a float type", ErrUnsupported, clip(name), typ)
	}
	if err := ts.charge(t, int64(len(raw))); err != nil {
		return nil, nil, err
	}
	st := safetensors.Tensor{Name: name, DType: dt, Shape: s, Data: raw}
	v, err := st.Float32s()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: tensor %s: %w", ErrUnsupported, clip(name), err)
	}
	return v, s, nil
}

// littleEndian is true on hosts that store a float32 as ONNX does.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// ints decodes a small inline integer tensor (shapes, axes, indices):
// at most maxInts values.
func ints(t *pb.TensorProto) ([]int64, bool) {
	const maxInts = 64
	if t == nil || t.GetDataLocation() == pb.TensorProto_EXTERNAL || t.Segment != nil {
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
	if t.GetDataLocation() == pb.TensorProto_EXTERNAL {
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

// external reads a tensor's external data through open, only from a
// local path inside the model's folder. Each file is read once.
func (ts *tensors) external(t *pb.TensorProto) ([]byte, error) {
	var loc string
	var offset, length int64 = 0, -1
	for _, e := range t.GetExternalData() {
		switch e.GetKey() {
		case "location":
			loc = e.GetValue()
		case "offset", "length":
			v, err := strconv.ParseInt(e.GetValue(), 10, 64)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("%w: tensor %s: %s %s", ErrExternalData, clip(t.GetName()), e.GetKey(), clip(e.GetValue()))
			}
			if e.GetKey() == "offset" {
				offset = v
			} else {
				length = v
			}
		}
	}
	if loc == "" || !filepath.IsLocal(loc) || !fs.ValidPath(filepath.ToSlash(loc)) || strings.Contains(loc, `\`) {
		return nil, fmt.Errorf("%w: tensor %s: location %s is outside the model's folder (only relative paths below it are read)", ErrExternalData, clip(t.GetName()), clip(loc))
	}
	if ts.open == nil {
		return nil, fmt.Errorf("%w: tensor %s is stored in %s, and no folder was given to read it from", ErrExternalData, clip(t.GetName()), clip(loc))
	}
	loc = filepath.ToSlash(loc)
	data, ok := ts.files[loc]
	if !ok {
		var err error
		if data, err = ts.open(loc); err != nil {
			return nil, fmt.Errorf("%w: tensor %s: %w", ErrExternalData, clip(t.GetName()), err)
		}
		if ts.read += int64(len(data)); ts.read > MaxExternalBytes {
			return nil, fmt.Errorf("%w: external data files of more than MaxExternalBytes = %d bytes", ErrLimit, int64(MaxExternalBytes))
		}
		ts.files[loc] = data
		ts.budget += int64(len(data))
	}
	if offset > int64(len(data)) || length > int64(len(data))-offset {
		return nil, fmt.Errorf("%w: tensor %s: offset %d and length %d outside %s (%d bytes)", ErrExternalData, clip(t.GetName()), offset, length, clip(loc), len(data))
	}
	if length < 0 {
		length = int64(len(data)) - offset
	}
	return data[offset : offset+length], nil
}
