package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"unsafe"
)

// Tensor is one named tensor: its dtype, its shape and its elements in
// row-major order, each stored little-endian, in memory (Data) or in a
// file (Section).
type Tensor struct {
	Name  string
	DType DType
	Shape []int // empty for a scalar
	// Data holds the elements, when they are in memory.
	Data []byte
	// Section, when Data is nil, is where the elements are in a file
	// (ReadAt leaves them there); Float32sInto and Bytes read them.
	Section *io.SectionReader
}

// ByteSize is the size of the tensor's elements in bytes.
func (t *Tensor) ByteSize() int64 {
	if t.Data == nil && t.Section != nil {
		return t.Section.Size()
	}
	return int64(len(t.Data))
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

// Bytes returns the tensor's elements as bytes: Data, or the Section read
// into a new slice.
func (t *Tensor) Bytes() ([]byte, error) {
	if t.Data != nil || t.Section == nil {
		return t.Data, nil
	}
	b := make([]byte, t.Section.Size())
	if err := t.readAt(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

func (t *Tensor) readAt(b []byte, off int64) error {
	if err := readFullAt(t.Section, b, off); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return &TensorError{t.Name, fmt.Errorf("%w: the data end early (did the file change while it was read?)", ErrTruncated)}
		}
		return &TensorError{t.Name, err}
	}
	return nil
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
	if !isFloat(t.DType) {
		return nil, &TensorError{t.Name, fmt.Errorf("%w: %s to float32", ErrConvert, t.DType)}
	}
	out := make([]float32, n)
	if err := t.Float32sInto(out); err != nil {
		return nil, err
	}
	return out, nil
}

// chunkBytes is how much of a file Float32sInto reads at a time to convert
// a tensor whose elements are not float32.
const chunkBytes = 64 << 10

// Float32sInto decodes the elements as Float32s does into dst, which must
// have exactly NumElements elements. A tensor in a file is read straight
// into dst when it is F32 (on a little-endian machine) and through one
// buffer of at most 64 KiB otherwise, so nothing the size of the tensor
// is allocated.
func (t *Tensor) Float32sInto(dst []float32) error {
	n, err := t.checkSize()
	if err != nil {
		return err
	}
	if !isFloat(t.DType) {
		return &TensorError{t.Name, fmt.Errorf("%w: %s to float32", ErrConvert, t.DType)}
	}
	if len(dst) != n {
		return &TensorError{t.Name, fmt.Errorf("%w: %d elements into a buffer of %d", ErrSize, n, len(dst))}
	}
	if n == 0 {
		return nil
	}
	if t.Data != nil || t.Section == nil {
		decodeFloats(dst, t.Data, t.DType)
		return nil
	}
	if t.DType == F32 && littleEndian {
		return t.readAt(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*n), 0)
	}
	es := t.DType.Size()
	buf := make([]byte, min(chunkBytes, n*es))
	for i := 0; i < n; {
		k := min(len(buf)/es, n-i)
		if err := t.readAt(buf[:k*es], int64(i*es)); err != nil {
			return err
		}
		decodeFloats(dst[i:i+k], buf, t.DType)
		i += k
	}
	return nil
}

func isFloat(dt DType) bool { return dt == F32 || dt == BF16 || dt == F16 || dt == F64 }

// littleEndian is true on a machine that stores float32 as safetensors does.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// decodeFloats widens or narrows len(dst) elements of dtype dt from src.
func decodeFloats(dst []float32, src []byte, dt DType) {
	switch dt {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
		}
	case F16:
		for i := range dst {
			dst[i] = float16to32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
		}
	}
}

// Int64s decodes the elements of a signed integer tensor (I8, I16, I32,
// I64) or of an unsigned one narrower than 64 bits (U8, U16, U32) into a new
// slice. Other dtypes return an error matching ErrConvert.
func (t *Tensor) Int64s() ([]int64, error) {
	n, err := t.checkSize()
	if err != nil {
		return nil, err
	}
	d, err := t.Bytes()
	if err != nil {
		return nil, err
	}
	out := make([]int64, n)
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
	if size != uint64(t.ByteSize()) {
		return 0, &TensorError{t.Name, fmt.Errorf("%w: %d bytes for shape %v of %s, want %d",
			ErrSize, t.ByteSize(), t.Shape, t.DType, size)}
	}
	return int(t.ByteSize()) / t.DType.Size(), nil
}

// byteSize returns the number of bytes of a tensor of the given shape and
// (valid) dtype, or an error if a dimension is negative or the size does
// not fit in 64 bits.
// ShapeString formats a shape from a file for a message: whole up to
// eight dimensions ("[2 3]"), else by its rank ("of rank 100000"), since
// a file may give a tensor a million.
func ShapeString(shape []int) string {
	if len(shape) > 8 {
		return fmt.Sprintf("of rank %d", len(shape))
	}
	return fmt.Sprint(shape)
}

func byteSize(shape []int, dt DType) (uint64, error) {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("%w: negative dimension in shape %s", ErrShape, ShapeString(shape))
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 {
			return 0, fmt.Errorf("%w: element count of shape %s", ErrOverflow, ShapeString(shape))
		}
		n = lo
	}
	hi, lo := bits.Mul64(n, uint64(dt.Size()))
	if hi != 0 {
		return 0, fmt.Errorf("%w: byte size of shape %s of %s", ErrOverflow, ShapeString(shape), dt)
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
