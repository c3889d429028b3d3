package schedule

import (
	"errors"
	"fmt"
	"rnnserve/internal/f32"
)

// Precision is how a Partitioned program (or a Stepper) stores its
// recurrent weights (W_ih, W_hh and W_hr). Embedding, head and biases stay
// float32, and so does everything between the products.
type Precision uint8

const (
	// F32 stores float32 weights: outputs match PyTorch within 1e-5.
	F32 Precision = iota
	// BF16 stores bf16 weights (float32 rounded to 8 mantissa bits): half
	// the bytes to stream per step, for a relative weight error of at most
	// 2^-9. The plan's weight buffers have 2-byte elements, so the traffic
	// analysis counts the smaller bytes.
	BF16
	// Int8 stores every row of a weight matrix as int8 with a float32
	// scale (symmetric, per output row), a quarter of float32's bytes plus
	// 8 bytes a row, and each product quantizes its input rows to int8 as
	// it runs (per row, symmetric: dynamic quantization), sums exactly in
	// int32 and scales back (f32.GemmNTI8). The plan's weight buffers
	// have 1-byte elements in f32.PackI8's layout, scales included, so the
	// traffic analysis counts those bytes. Opt-in: it trades accuracy for
	// speed (docs/models.md, "Precision", has the measured error).
	Int8
)

// ErrUnknownPrecision is returned for a precision name other than "f32",
// "bf16" or "int8".
var ErrUnknownPrecision = errors.New("schedule: unknown weight precision")

// ParsePrecision returns the precision named s: "f32" (or "float32", or
// ""), "bf16" (or "bfloat16") or "int8".
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "", "f32", "float32":
		return F32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "int8":
		return Int8, nil
	}
	return 0, fmt.Errorf("%w %q (want f32, bf16 or int8)", ErrUnknownPrecision, s)
}

func (p Precision) String() string {
	switch p {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	case Int8:
		return "int8"
	}
	return fmt.Sprintf("Precision(%d)", uint8(p))
}

// elemSize is the bytes of one element of a stored weight buffer.
func (p Precision) elemSize() int {
	switch p {
	case BF16:
		return 2
	case Int8:
		return 1
	}
	return 4
}

// weightElems is the elements of a stored rows×cols weight matrix.
func (p Precision) weightElems(rows, cols int) int {
	if p == Int8 {
		return f32.PackedI8Bytes(rows, cols)
	}
	return rows * cols
}
