package safetensors

// DType names the element type of a tensor as it is spelled in the header.
type DType string

// The dtypes this package reads and writes.
const (
	Bool   DType = "BOOL"
	U8     DType = "U8"
	I8     DType = "I8"
	F8E5M2 DType = "F8_E5M2"
	F8E4M3 DType = "F8_E4M3"
	I16    DType = "I16"
	U16    DType = "U16"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I32    DType = "I32"
	U32    DType = "U32"
	F32    DType = "F32"
	F64    DType = "F64"
	I64    DType = "I64"
	U64    DType = "U64"
)

// Size returns the number of bytes of one element, or 0 for a dtype this
// package does not know.
func (d DType) Size() int {
	switch d {
	case Bool, U8, I8, F8E5M2, F8E4M3:
		return 1
	case I16, U16, F16, BF16:
		return 2
	case I32, U32, F32:
		return 4
	case I64, U64, F64:
		return 8
	}
	return 0
}

// Valid reports whether d is one of the dtypes above.
func (d DType) Valid() bool { return d.Size() != 0 }
