package wire

import (
	"fmt"

	"rnnserve/server/internal/infer"
)

// TensorMemory bounds and charges the memory one request's decoded
// tensors take. Decoded data can be larger than its text or raw bytes
// (the JSON "1," is an 8-byte int64; an INT8 takes 8 bytes as int64; an
// empty BYTES element is a 24-byte slice header), so a request's tensors
// may hold at most Limit bytes (413 beyond; twice the body limit, which
// any request within the model limits meets), and Charge takes them from
// the memory budget beside the body's bytes. A nil *TensorMemory bounds
// nothing.
type TensorMemory struct {
	Limit  int64
	Charge func(n int64) error // nil: not charged
	used   int64
}

// take counts n more bytes of input name's decoded data.
func (m *TensorMemory) take(name string, n int64) error {
	if m == nil {
		return nil // not bounded (tests)
	}
	if m.used+n > m.Limit {
		return fmt.Errorf("%w: input %q: the decoded tensors would take %d bytes, over the %d-byte limit", infer.ErrTooLarge, infer.Clip(name), m.used+n, m.Limit)
	}
	m.used += n
	if m.Charge != nil {
		return m.Charge(n)
	}
	return nil
}

// decodedSize is the memory n decoded elements of kind take, holding
// text bytes of BYTES data at most.
func decodedSize(kind infer.Kind, n, text int64) int64 {
	switch kind {
	case infer.KindInt:
		return 8 * n
	case infer.KindFloat:
		return 4 * n
	case infer.KindBytes:
		return 24*n + text // a slice header each, and the bytes
	}
	return 0
}
