package safetensors

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
)

// entry returns the header member for one tensor.
func entry(name, dtype, shape, offsets string) string {
	return `"` + name + `":{"dtype":"` + dtype + `","shape":` + shape + `,"data_offsets":` + offsets + `}`
}

// badFiles are hand-built files that Read must reject. tensor is the name
// the *TensorError must carry, or "" if the error concerns no one tensor.
var badFiles = []struct {
	name   string
	data   []byte
	want   error
	tensor string
}{
	{"empty input", nil, ErrTruncated, ""},
	{"short length prefix", []byte{2, 0, 0, 0, 0}, ErrTruncated, ""},
	{"header longer than file", binary.LittleEndian.AppendUint64(nil, 100), ErrTruncated, ""},
	{"header over the limit", append(binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1), "{}"...), ErrHeaderTooLarge, ""},
	{"header length near 2^64", append(binary.LittleEndian.AppendUint64(nil, 1<<63+5), "{}"...), ErrHeaderTooLarge, ""},
	{"empty header", file("", nil), ErrHeader, ""},
	{"invalid JSON", file(`{"a":`, nil), ErrHeader, ""},
	{"array header", file(`[1,2]`, nil), ErrHeader, ""},
	{"leading space", file(` {}`, nil), ErrHeader, ""},
	{"trailing garbage", file(`{} x`, nil), ErrHeader, ""},
	{"second object", file(`{}{}`, nil), ErrHeader, ""},
	{"invalid UTF-8", file("{\"\xff\":1}", nil), ErrHeader, ""},
	{"unterminated key", file(`{`+entry("a", "F32", "[0]", "[0,0]")+`,"b`, nil), ErrHeader, ""},
	{"control character in a key", file("{\"a\x01\":1}", nil), ErrHeader, ""},
	{"unknown field nested too deep", file(`{"a":{"x":`+strings.Repeat("[", 65)+strings.Repeat("]", 65)+`,"dtype":"F32","shape":[0],"data_offsets":[0,0]}}`, nil), ErrHeader, "a"},
	{"entry not an object", file(`{"a":[0,4]}`, nil), ErrHeader, "a"},
	{"missing data_offsets", file(`{"a":{"dtype":"F32","shape":[1]}}`, make([]byte, 4)), ErrHeader, "a"},
	{"missing dtype", file(`{"a":{"shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), ErrHeader, "a"},
	{"duplicate field", file(`{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), ErrHeader, "a"},
	{"dtype null", file(`{"a":{"dtype":null,"shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), ErrHeader, "a"},
	{"dtype number", file(`{"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), ErrHeader, "a"},
	{"shape null", file(`{`+entry("a", "F32", "null", "[0,4]")+`}`, make([]byte, 4)), ErrHeader, "a"},
	{"dimension as string", file(`{`+entry("a", "F32", `["1"]`, "[0,4]")+`}`, make([]byte, 4)), ErrHeader, "a"},
	{"nested shape", file(`{`+entry("a", "F32", `[[1]]`, "[0,4]")+`}`, make([]byte, 4)), ErrHeader, "a"},
	{"metadata not an object", file(`{"__metadata__":"x"}`, nil), ErrHeader, ""},
	{"metadata number value", file(`{"__metadata__":{"k":1}}`, nil), ErrHeader, ""},
	{"metadata null value", file(`{"__metadata__":{"k":null}}`, nil), ErrHeader, ""},
	{"metadata duplicate key", file(`{"__metadata__":{"k":"a","k":"b"}}`, nil), ErrHeader, ""},
	{"duplicate metadata", file(`{"__metadata__":{},"__metadata__":{}}`, nil), ErrHeader, ""},
	{"unknown dtype", file(`{`+entry("w", "F12", "[1]", "[0,4]")+`}`, make([]byte, 4)), ErrDType, "w"},
	{"lowercase dtype", file(`{`+entry("w", "f32", "[1]", "[0,4]")+`}`, make([]byte, 4)), ErrDType, "w"},
	{"sub-byte dtype", file(`{`+entry("w", "F4", "[2]", "[0,1]")+`}`, make([]byte, 1)), ErrDType, "w"},
	{"negative dimension", file(`{`+entry("w", "F32", "[-1]", "[0,4]")+`}`, make([]byte, 4)), ErrShape, "w"},
	{"fractional dimension", file(`{`+entry("w", "F32", "[1.5]", "[0,4]")+`}`, make([]byte, 4)), ErrShape, "w"},
	{"exponent dimension", file(`{`+entry("w", "F32", "[1e0]", "[0,4]")+`}`, make([]byte, 4)), ErrShape, "w"},
	{"dimension over 2^64", file(`{`+entry("w", "F32", "[18446744073709551616]", "[0,4]")+`}`, make([]byte, 4)), ErrOverflow, "w"},
	{"dimension over MaxInt", file(`{`+entry("w", "U8", "[9223372036854775808]", "[0,4]")+`}`, make([]byte, 4)), ErrOverflow, "w"},
	{"element count overflow", file(`{`+entry("w", "U8", "[4294967296,4294967296]", "[0,4]")+`}`, make([]byte, 4)), ErrOverflow, "w"},
	{"byte size overflow", file(`{`+entry("w", "F64", "[4611686018427387904]", "[0,4]")+`}`, make([]byte, 4)), ErrOverflow, "w"},
	{"too few bytes for shape", file(`{`+entry("w", "F32", "[2]", "[0,4]")+`}`, make([]byte, 4)), ErrSize, "w"},
	{"too many bytes for shape", file(`{`+entry("w", "BF16", "[2]", "[0,8]")+`}`, make([]byte, 8)), ErrSize, "w"},
	{"scalar with no bytes", file(`{`+entry("w", "F32", "[]", "[0,0]")+`}`, nil), ErrSize, "w"},
	{"one offset", file(`{`+entry("w", "F32", "[1]", "[4]")+`}`, make([]byte, 4)), ErrOffsets, "w"},
	{"three offsets", file(`{`+entry("w", "F32", "[1]", "[0,4,4]")+`}`, make([]byte, 4)), ErrOffsets, "w"},
	{"negative offset", file(`{`+entry("w", "F32", "[1]", "[-4,0]")+`}`, make([]byte, 4)), ErrOffsets, "w"},
	{"reversed offsets", file(`{`+entry("w", "F32", "[1]", "[4,0]")+`}`, make([]byte, 4)), ErrOffsets, "w"},
	{"offset past end", file(`{`+entry("w", "F32", "[2]", "[0,8]")+`}`, make([]byte, 4)), ErrTruncated, "w"},
	{"truncated data", file(`{`+entry("a", "F32", "[1]", "[0,4]")+`,`+entry("b", "F32", "[1]", "[4,8]")+`}`, make([]byte, 6)), ErrTruncated, "b"},
	{"gap at start", file(`{`+entry("w", "F32", "[1]", "[4,8]")+`}`, make([]byte, 8)), ErrOffsets, "w"},
	{"gap between", file(`{`+entry("a", "F32", "[1]", "[0,4]")+`,`+entry("b", "F32", "[1]", "[8,12]")+`}`, make([]byte, 12)), ErrOffsets, "b"},
	{"overlap", file(`{`+entry("a", "F32", "[2]", "[0,8]")+`,`+entry("b", "F32", "[2]", "[4,12]")+`}`, make([]byte, 12)), ErrOffsets, "b"},
	{"same span twice", file(`{`+entry("a", "F32", "[1]", "[0,4]")+`,`+entry("b", "F32", "[1]", "[0,4]")+`}`, make([]byte, 4)), ErrOffsets, "b"},
	{"bytes after last tensor", file(`{`+entry("w", "F32", "[1]", "[0,4]")+`}`, make([]byte, 8)), ErrOffsets, ""},
	{"data without tensors", file(`{}`, []byte{0}), ErrOffsets, ""},
	{"duplicate name", file(`{`+entry("a", "F32", "[1]", "[0,4]")+`,`+entry("a", "F32", "[1]", "[4,8]")+`}`, make([]byte, 8)), ErrDuplicate, "a"},
	{"duplicate name via escape", file(`{`+entry("a", "F32", "[1]", "[0,4]")+`,`+entry(`\u0061`, "F32", "[1]", "[4,8]")+`}`, make([]byte, 8)), ErrDuplicate, "a"},
}

func TestReadErrors(t *testing.T) {
	for _, tt := range badFiles {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Read(tt.data)
			if err == nil {
				t.Fatalf("Read accepted the file: %q", f.Names())
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("Read error %q does not match %q", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "safetensors: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			var te *TensorError
			switch {
			case tt.tensor == "" && errors.As(err, &te):
				t.Errorf("error %q blames tensor %q, want none", err, te.Name)
			case tt.tensor != "" && !errors.As(err, &te):
				t.Errorf("error %q is not a *TensorError for %q", err, tt.tensor)
			case tt.tensor != "" && te.Name != tt.tensor:
				t.Errorf("error %q blames tensor %q, want %q", err, te.Name, tt.tensor)
			case tt.tensor != "" && !strings.Contains(err.Error(), `tensor "`+tt.tensor+`"`):
				t.Errorf("error %q does not name tensor %q", err, tt.tensor)
			}
		})
	}
}

// TestReadSkipsUnknownFields: an entry's fields other than dtype, shape
// and data_offsets are skipped, whatever JSON they hold.
func TestReadSkipsUnknownFields(t *testing.T) {
	f, err := Read(file(`{"a":{"x":{"y":[1,"z\"]",{"w":null}],"v":true},"dtype":"F32","s":[-1.5e3,[]],"shape":[1],"data_offsets":[0,4],"e":{}}}`, make([]byte, 4)))
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := f.Tensor("a"); !ok || a.DType != F32 || len(a.Data) != 4 {
		t.Errorf("tensor a: %+v", a)
	}
}

func TestTensorErrorMessage(t *testing.T) {
	_, err := Read(file(`{`+entry("rnn.weight_ih_l0", "F12", "[1]", "[0,4]")+`}`, make([]byte, 4)))
	const want = `safetensors: tensor "rnn.weight_ih_l0": unknown dtype: "F12"`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
}

type failingWriter struct{ n int }

var errDiskFull = errors.New("disk full")

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errDiskFull
	}
	w.n--
	return len(p), nil
}

func TestWriteErrors(t *testing.T) {
	ok := FromFloat32("ok", []int{1}, []float32{1})
	tests := []struct {
		name    string
		tensors []Tensor
		md      map[string]string
		want    error
		tensor  string
	}{
		{"duplicate", []Tensor{ok, ok}, nil, ErrDuplicate, "ok"},
		{"reserved name", []Tensor{{Name: "__metadata__", DType: U8, Shape: []int{1}, Data: []byte{1}}}, nil, ErrHeader, "__metadata__"},
		{"invalid UTF-8 name", []Tensor{{Name: "\xff", DType: U8, Shape: []int{1}, Data: []byte{1}}}, nil, ErrHeader, "\xff"},
		{"invalid UTF-8 metadata", []Tensor{ok}, map[string]string{"k": "\xfe"}, ErrHeader, ""},
		{"unknown dtype", []Tensor{{Name: "x", DType: "F4", Shape: []int{2}, Data: []byte{1}}}, nil, ErrDType, "x"},
		{"size mismatch", []Tensor{{Name: "x", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}}, nil, ErrSize, "x"},
		{"negative dimension", []Tensor{{Name: "x", DType: F32, Shape: []int{-1, -4}, Data: make([]byte, 16)}}, nil, ErrShape, "x"},
		{"overflow", []Tensor{{Name: "x", DType: F32, Shape: []int{1 << 62, 8}, Data: nil}}, nil, ErrOverflow, "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Write(&buf, tt.tensors, tt.md)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Write error = %v, want %v", err, tt.want)
			}
			if buf.Len() != 0 {
				t.Errorf("Write wrote %d bytes before failing", buf.Len())
			}
			var te *TensorError
			if tt.tensor != "" && (!errors.As(err, &te) || te.Name != tt.tensor) {
				t.Errorf("error %v does not blame tensor %q", err, tt.tensor)
			}
		})
	}

	for n := range 3 {
		err := Write(&failingWriter{n: n}, []Tensor{ok}, nil)
		if !errors.Is(err, errDiskFull) || !strings.HasPrefix(err.Error(), "safetensors: write") {
			t.Errorf("Write to a writer failing after %d writes = %v", n, err)
		}
	}
}

func TestConversionErrors(t *testing.T) {
	f64 := Tensor{Name: "d", DType: F64, Shape: []int{1}, Data: make([]byte, 8)}
	if _, err := (&Tensor{Name: "i", DType: I64, Shape: []int{1}, Data: make([]byte, 8)}).Float32s(); !errors.Is(err, ErrConvert) {
		t.Errorf("I64 Float32s() error = %v, want ErrConvert", err)
	}
	if _, err := f64.Int64s(); !errors.Is(err, ErrConvert) {
		t.Errorf("F64 Int64s() error = %v, want ErrConvert", err)
	}
	u64 := Tensor{Name: "u", DType: U64, Shape: []int{1}, Data: make([]byte, 8)}
	if _, err := u64.Int64s(); !errors.Is(err, ErrConvert) {
		t.Errorf("U64 Int64s() error = %v, want ErrConvert", err)
	}
	short := Tensor{Name: "s", DType: F32, Shape: []int{3}, Data: make([]byte, 8)}
	if _, err := short.Float32s(); !errors.Is(err, ErrSize) {
		t.Errorf("short Float32s() error = %v, want ErrSize", err)
	}
	if _, err := (&Tensor{Name: "s", DType: I64, Shape: []int{3}, Data: make([]byte, 8)}).Int64s(); !errors.Is(err, ErrSize) {
		t.Errorf("short Int64s() error = %v, want ErrSize", err)
	}
}

func TestFromPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"FromFloat32": func() { FromFloat32("x", []int{2, 2}, make([]float32, 3)) },
		"FromInt64":   func() { FromInt64("x", []int{-1}, make([]int64, 1)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with a mismatched shape did not panic", name)
				}
			}()
			f()
		}()
	}
}

func TestFloat16(t *testing.T) {
	tests := []struct {
		bits uint16
		want float32
	}{
		{0x0000, 0},
		{0x3c00, 1},
		{0xc000, -2},
		{0x7bff, 65504},
		{0x0400, 1.0 / (1 << 14)},       // smallest normal
		{0x0001, 1.0 / (1 << 24)},       // smallest subnormal
		{0x03ff, 1023.0 / (1 << 24)},    // largest subnormal
		{0x8001, -1.0 / (1 << 24)},      // negative subnormal
		{0x3555, 0.333251953125},        // nearest to 1/3
		{0x7c00, float32(math.Inf(1))},  // +Inf
		{0xfc00, float32(math.Inf(-1))}, // -Inf
	}
	for _, tt := range tests {
		if got := float16to32(tt.bits); got != tt.want {
			t.Errorf("float16to32(%#04x) = %v, want %v", tt.bits, got, tt.want)
		}
	}
	if got := float16to32(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("float16to32(0x8000) = %v, want -0", got)
	}
	if got := float16to32(0x7e00); got == got {
		t.Errorf("float16to32(0x7e00) = %v, want NaN", got)
	}
}

func TestFloat64ToFloat32(t *testing.T) {
	in := []float64{0.1, -2.5, 1e300, -1e300, 1e-50, math.Inf(1)}
	data := make([]byte, 8*len(in))
	for i, v := range in {
		binary.LittleEndian.PutUint64(data[8*i:], math.Float64bits(v))
	}
	got, err := (&Tensor{Name: "d", DType: F64, Shape: []int{len(in)}, Data: data}).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{0.1, -2.5, float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Inf(1))}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("element %d: %v to float32 = %v, want %v", i, in[i], got[i], want[i])
		}
	}
}

// TestReadOtherFormats hands Read files of other formats and checks the
// error says what they are instead of a meaningless header length.
func TestReadOtherFormats(t *testing.T) {
	var zipped bytes.Buffer
	zw := zip.NewWriter(&zipped)
	w, _ := zw.Create("archive/data.pkl")
	w.Write([]byte{0x80, 0x02, '}', '.'})
	zw.Close()
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"torch zip", zipped.Bytes(), "this is a PyTorch zip checkpoint"},
		{"pickle", []byte{0x80, 0x04, '}', '.'}, "this is a Python pickle"},
		{"onnx", []byte{0x08, 0x07, 0x12, 0x07, 'p', 'y', 't', 'o', 'r', 'c', 'h'}, "this is an ONNX model"},
	} {
		_, err := Read(c.data)
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Read error %v, want ErrFormat saying %q", c.name, err, c.want)
		}
	}
}

// TestOverlapMessageBound: a tensor overlapping one whose name is 1 MiB
// long names that one clipped, as it names itself; a number from the
// header is clipped as well.
func TestOverlapMessageBound(t *testing.T) {
	long := strings.Repeat("a", 1<<20)
	_, err := Read(file(`{`+entry(long, "F32", "[1]", "[0,4]")+`,`+entry("b", "F32", "[1]", "[0,4]")+`}`, make([]byte, 4)))
	if !errors.Is(err, ErrOffsets) || len(err.Error()) > 1000 || !strings.Contains(err.Error(), "(1048576 bytes)") {
		t.Errorf("overlapping a tensor named by 1 MiB: a message of %d bytes: %.300v", len(err.Error()), err)
	}
	// A dimension of a million digits is quoted clipped too.
	_, err = Read(file(`{`+entry("w", "F32", "["+strings.Repeat("1", 1<<20)+"]", "[0,4]")+`}`, make([]byte, 4)))
	if !errors.Is(err, ErrOverflow) || len(err.Error()) > 1000 || !strings.Contains(err.Error(), "(1048576 bytes)") {
		t.Errorf("a dimension of 1 MiB of digits: a message of %d bytes: %.300v", len(err.Error()), err)
	}
}
