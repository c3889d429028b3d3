package safetensors

import (
	"errors"
	"strconv"
	"strings"
)

// Errors returned by Read, Write and the Tensor conversions. They are
// wrapped with detail, and with a *TensorError when one tensor is at fault;
// test for them with errors.Is.
var (
	// ErrTruncated means the input ends before the header or before the
	// end of some tensor's data.
	ErrTruncated = errors.New("safetensors: file truncated")
	// ErrHeaderTooLarge means the header length exceeds MaxHeaderSize.
	ErrHeaderTooLarge = errors.New("safetensors: header too large")
	// ErrHeader means the header is not valid UTF-8 JSON of the expected
	// structure: not an object, a field missing or of the wrong type,
	// metadata values that are not strings, or a reserved name.
	ErrHeader = errors.New("safetensors: invalid header")
	// ErrDType means a dtype name this package does not know.
	ErrDType = errors.New("safetensors: unknown dtype")
	// ErrShape means a dimension that is negative or not an integer.
	ErrShape = errors.New("safetensors: invalid shape")
	// ErrSize means the byte length of a tensor's data differs from its
	// element count times the size of its dtype.
	ErrSize = errors.New("safetensors: data size does not match shape and dtype")
	// ErrOffsets means data offsets that are malformed, reversed, overlap,
	// leave a gap, or leave bytes at the end of the data section unused.
	ErrOffsets = errors.New("safetensors: invalid data offsets")
	// ErrDuplicate means two tensors with the same name.
	ErrDuplicate = errors.New("safetensors: duplicate tensor name")
	// ErrOverflow means an element count or byte size too large to
	// represent.
	ErrOverflow = errors.New("safetensors: size overflow")
	// ErrFormat means the input is another kind of model file (a PyTorch
	// checkpoint, an ONNX model, ...); the message says which.
	ErrFormat = errors.New("safetensors: not a safetensors file")
	// ErrConvert means a Tensor conversion method was called on a tensor
	// whose dtype it does not convert.
	ErrConvert = errors.New("safetensors: unsupported dtype conversion")
)

// TensorError is an error that concerns one tensor of a file.
type TensorError struct {
	Name string // tensor name as it appears in the header
	Err  error  // wraps one of the package's sentinels
}

// Error names the tensor and then describes the problem, for example
// `safetensors: tensor "rnn.weight_ih_l0": unknown dtype: "F12"`.
func (e *TensorError) Error() string {
	return "safetensors: tensor " + strconv.Quote(clip(e.Name)) + ": " +
		strings.TrimPrefix(e.Err.Error(), "safetensors: ")
}

// clip shortens a name or value from a file for a message: a header may
// hold a name of megabytes.
func clip(s string) string {
	if len(s) <= 200 {
		return s
	}
	return s[:200] + "... (" + strconv.Itoa(len(s)) + " bytes)"
}

func (e *TensorError) Unwrap() error { return e.Err }
