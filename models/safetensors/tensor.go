package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// Tensor is one named tensor: its dtype, its shape and its elements in
// row-major order, each stored little-endian in Data.
type Tensor struct {
	Name  string
	DType DType
	Shape []int // empty for a scalar
	Data  []byte
}

// NumElements returns the product of the dimensions of t.Shape, which is 1
// for a scalar. For a tensor returned by Read the product is known to fit in
// an int; for one built by hand it wraps around if it does not.
func (t *Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Float32s decodes the elements of an F32, BF16, F16 or F64 tensor into a
// new slice. Widening from the 16-bit types is exact; F64 rounds to the
// nearest float32 (values beyond its range become infinities); infinities
// and NaNs are kept. Other dtypes return an error matching ErrConvert.
func (t *Tensor) Float32s() ([]float32, error) {
	n, err := t.checkSize()
	if err != nil {
		return nil, err
	}
	out := make([]float32, n)
	switch t.DType {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(t.Data[2*i:])) << 16)
		}
	case F16:
		for i := range out {
			out[i] = float16to32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	case F64:
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:])))
		}
	default:
		return nil, &TensorError{t.Name, fmt.Errorf("%w: %s to float32", ErrConvert, t.DType)}
	}
	return out, nil
}

// Int64s decodes the elements of a signed integer tensor (I8, I16, I32,
// I64) or of an unsigned one narrower than 64 bits (U8, U16, U32) into a new
// slice. Other dtypes return an error matching ErrConvert.
func (t *Tensor) Int64s() ([]int64, error) {
	n, err := t.checkSize()
	if err != nil {
		return nil, err
	}
	out := make([]int64, n)
	d := t.Data
	switch t.DType {
	case I64:
		for i := range out {
			out[i] = int64(binary.LittleEndian.Uint64(d[8*i:]))
		}
	case I32:
		for i := range out {
			out[i] = int64(int32(binary.LittleEndian.Uint32(d[4*i:])))
		}
	case I16:
		for i := range out {
			out[i] = int64(int16(binary.LittleEndian.Uint16(d[2*i:])))
		}
	case I8:
		for i := range out {
			out[i] = int64(int8(d[i]))
		}
	case U32:
		for i := range out {
			out[i] = int64(binary.LittleEndian.Uint32(d[4*i:]))
		}
	case U16:
		for i := range out {
			out[i] = int64(binary.LittleEndian.Uint16(d[2*i:]))
		}
	case U8:
		for i := range out {
			out[i] = int64(d[i])
		}
	default:
		return nil, &TensorError{t.Name, fmt.Errorf("%w: %s to int64", ErrConvert, t.DType)}
	}
	return out, nil
}

// checkSize validates t as Read would and returns its element count.
func (t *Tensor) checkSize() (int, error) {
	if !t.DType.Valid() {
		return 0, &TensorError{t.Name, fmt.Errorf("%w: %q", ErrDType, string(t.DType))}
	}
	size, err := byteSize(t.Shape, t.DType)
	if err != nil {
		return 0, &TensorError{t.Name, err}
	}
	if size != uint64(len(t.Data)) {
		return 0, &TensorError{t.Name, fmt.Errorf("%w: %d bytes for shape %v of %s, want %d",
			ErrSize, len(t.Data), t.Shape, t.DType, size)}
	}
	return len(t.Data) / t.DType.Size(), nil
}

// byteSize returns the number of bytes of a tensor of the given shape and
// (valid) dtype, or an error if a dimension is negative or the size does
// not fit in 64 bits.
func byteSize(shape []int, dt DType) (uint64, error) {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("%w: negative dimension in %v", ErrShape, shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 {
			return 0, fmt.Errorf("%w: element count of shape %v", ErrOverflow, shape)
		}
		n = lo
	}
	hi, lo := bits.Mul64(n, uint64(dt.Size()))
	if hi != 0 {
		return 0, fmt.Errorf("%w: byte size of shape %v of %s", ErrOverflow, shape, dt)
	}
	return lo, nil
}

// float16to32 widens an IEEE 754 binary16 value.
func float16to32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // infinity or NaN: keep the payload
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0: // normal: rebias the exponent from 15 to 127
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	default: // zero or subnormal: mant * 2^-24, exact in float32
		f := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
}

// FromFloat32 returns an F32 tensor holding a copy of v. It panics if
// len(v) is not the product of shape, which is a programming error.
func FromFloat32(name string, shape []int, v []float32) Tensor {
	t := Tensor{Name: name, DType: F32, Shape: append([]int{}, shape...)}
	if n, err := byteSize(shape, F32); err != nil || n != 4*uint64(len(v)) {
		panic("safetensors: FromFloat32: len(v) does not match shape")
	}
	t.Data = make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(t.Data[4*i:], math.Float32bits(x))
	}
	return t
}

// FromInt64 returns an I64 tensor holding a copy of v. It panics if len(v)
// is not the product of shape, which is a programming error.
func FromInt64(name string, shape []int, v []int64) Tensor {
	t := Tensor{Name: name, DType: I64, Shape: append([]int{}, shape...)}
	if n, err := byteSize(shape, I64); err != nil || n != 8*uint64(len(v)) {
		panic("safetensors: FromInt64: len(v) does not match shape")
	}
	t.Data = make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(t.Data[8*i:], uint64(x))
	}
	return t
}
