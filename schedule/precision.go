package schedule

import (
	"errors"
	"fmt"
)

// Precision is how a Partitioned program stores its recurrent weights
// (W_ih, W_hh and W_hr). Arithmetic is float32 either way; embedding, head
// and biases stay float32.
type Precision uint8

const (
	// F32 stores float32 weights: outputs match PyTorch within 1e-5.
	F32 Precision = iota
	// BF16 stores bf16 weights (float32 rounded to 8 mantissa bits): half
	// the bytes to stream per step, for a relative weight error of at most
	// 2^-9. The plan's weight buffers have 2-byte elements, so the traffic
	// analysis counts the smaller bytes.
	BF16
)

// ErrUnknownPrecision is returned for a precision name other than "f32" or "bf16".
var ErrUnknownPrecision = errors.New("schedule: unknown weight precision")

// ParsePrecision returns the precision named s: "f32" (or "float32", or
// "") or "bf16" (or "bfloat16").
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "", "f32", "float32":
		return F32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	}
	return 0, fmt.Errorf("%w %q (want f32 or bf16)", ErrUnknownPrecision, s)
}

func (p Precision) String() string {
	switch p {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("Precision(%d)", uint8(p))
}

// elemSize is the bytes of one stored weight.
func (p Precision) elemSize() int {
	if p == BF16 {
		return 2
	}
	return 4
}
