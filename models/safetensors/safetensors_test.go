package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fixturePath is written by scripts/torch_golden.py --reader-fixture; see
// testdata/README.md.
const fixturePath = "testdata/torch_writer.safetensors"

// file assembles a safetensors file from a header and a data section.
func file(header string, body []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, body...)
}

func sampleTensors() []Tensor {
	bf16 := Tensor{Name: "emb.bf16", DType: BF16, Shape: []int{3}, Data: []byte{0x80, 0x3f, 0x00, 0xc0, 0x80, 0x7f}}
	return []Tensor{
		FromFloat32("rnn.weight_ih_l0", []int{2, 3}, []float32{1, -2, 3.5, float32(math.Inf(1)), 0, -0.125}),
		FromInt64("tokens", []int{2, 2}, []int64{math.MinInt64, -1, 0, math.MaxInt64}),
		bf16,
		FromFloat32("scalar", nil, []float32{42}),
		FromFloat32("empty", []int{0, 5}, nil),
		{Name: "mask", DType: U8, Shape: []int{4}, Data: []byte{0, 1, 2, 255}},
	}
}

func mustWrite(t testing.TB, tensors []Tensor, md map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, tensors, md); err != nil {
		t.Fatalf("Write: %v", err)
	}
	return buf.Bytes()
}

// equalFiles reports how a and b differ, or "" if they hold the same
// tensors and metadata.
func equalFiles(a, b *File) string {
	if !slices.Equal(a.Names(), b.Names()) {
		return "names " + strings.Join(a.Names(), ",") + " vs " + strings.Join(b.Names(), ",")
	}
	if len(a.Metadata) != len(b.Metadata) {
		return "metadata length"
	}
	for k, v := range a.Metadata {
		if w, ok := b.Metadata[k]; !ok || w != v {
			return "metadata " + k
		}
	}
	for _, name := range a.Names() {
		x, _ := a.Tensor(name)
		y, ok := b.Tensor(name)
		switch {
		case !ok:
			return "missing " + name
		case x.Name != name || y.Name != name:
			return "Name field of " + name
		case x.DType != y.DType:
			return "dtype of " + name
		case !slices.Equal(x.Shape, y.Shape):
			return "shape of " + name
		case !bytes.Equal(x.Data, y.Data):
			return "data of " + name
		}
	}
	return ""
}

func TestRoundTrip(t *testing.T) {
	tensors := sampleTensors()
	md := map[string]string{"format": "pt", "note": `quotes " and <tags> & ünïcode`}
	data := mustWrite(t, tensors, md)

	n := binary.LittleEndian.Uint64(data)
	if (8+n)%8 != 0 {
		t.Errorf("data section starts at %d, not a multiple of 8", 8+n)
	}
	f, err := Read(data)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if got, want := f.Names(), []string{"emb.bf16", "empty", "mask", "rnn.weight_ih_l0", "scalar", "tokens"}; !slices.Equal(got, want) {
		t.Fatalf("Names() = %q, want %q", got, want)
	}
	if f.Metadata["note"] != md["note"] || len(f.Metadata) != 2 {
		t.Errorf("Metadata = %q, want %q", f.Metadata, md)
	}
	for _, want := range tensors {
		got, ok := f.Tensor(want.Name)
		if !ok {
			t.Fatalf("tensor %q missing", want.Name)
		}
		if got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) || !bytes.Equal(got.Data, want.Data) {
			t.Errorf("tensor %q = %+v, want %+v", want.Name, got, want)
		}
	}

	w, _ := f.Tensor("rnn.weight_ih_l0")
	if v, err := w.Float32s(); err != nil || !slices.Equal(v, []float32{1, -2, 3.5, float32(math.Inf(1)), 0, -0.125}) {
		t.Errorf("Float32s() = %v, %v", v, err)
	}
	tok, _ := f.Tensor("tokens")
	if v, err := tok.Int64s(); err != nil || !slices.Equal(v, []int64{math.MinInt64, -1, 0, math.MaxInt64}) {
		t.Errorf("Int64s() = %v, %v", v, err)
	}
	bf, _ := f.Tensor("emb.bf16")
	if v, err := bf.Float32s(); err != nil || !slices.Equal(v, []float32{1, -2, float32(math.Inf(1))}) {
		t.Errorf("BF16 Float32s() = %v, %v", v, err)
	}
	s, _ := f.Tensor("scalar")
	if s.NumElements() != 1 || len(s.Shape) != 0 {
		t.Errorf("scalar: NumElements() = %d, Shape = %v", s.NumElements(), s.Shape)
	}
	e, _ := f.Tensor("empty")
	if v, err := e.Float32s(); e.NumElements() != 0 || err != nil || len(v) != 0 {
		t.Errorf("empty: NumElements() = %d, Float32s() = %v, %v", e.NumElements(), v, err)
	}

	// Writing what was read reproduces the file byte for byte.
	if again := mustWrite(t, f.Tensors(), f.Metadata); !bytes.Equal(again, data) {
		t.Errorf("rewrite differs:\n%q\n%q", again, data)
	}
}

func TestWriteLayout(t *testing.T) {
	data := mustWrite(t, []Tensor{
		FromFloat32("b", []int{1}, []float32{2}),
		FromFloat32("a", []int{2}, []float32{0, 1}),
	}, nil)
	header := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`
	header += strings.Repeat(" ", -len(header)&7)
	want := file(header, []byte{0, 0, 0, 0, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40})
	if !bytes.Equal(data, want) {
		t.Errorf("Write =\n%q\nwant\n%q", data, want)
	}
	empty := mustWrite(t, nil, map[string]string{})
	if want := file("{}      ", nil); !bytes.Equal(empty, want) {
		t.Errorf("empty Write = %q, want %q", empty, want)
	}
}

// TestTorchFixture reads a file written by the Python writer in
// scripts/torch_golden.py and compares the conversions with torch's own.
func TestTorchFixture(t *testing.T) {
	raw, err := os.ReadFile(fixturePath)
	if err != nil {
		t.Fatalf("fixture missing; regenerate it as testdata/README.md says: %v", err)
	}
	f, err := Read(raw)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if f.Metadata["format"] != "pt" {
		t.Errorf("Metadata = %q", f.Metadata)
	}
	get := func(name string) *Tensor {
		t.Helper()
		x, ok := f.Tensor(name)
		if !ok {
			t.Fatalf("tensor %q missing", name)
		}
		return x
	}
	floats := func(name string) []float32 {
		t.Helper()
		v, err := get(name).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ints := func(name string) []int64 {
		t.Helper()
		v, err := get(name).Int64s()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	sameBits := func(a, b []float32) bool {
		return slices.EqualFunc(a, b, func(x, y float32) bool {
			if x != x || y != y {
				return x != x && y != y
			}
			return math.Float32bits(x) == math.Float32bits(y)
		})
	}
	for _, pair := range [][2]string{{"f16", "f16_as_f32"}, {"bf16", "bf16_as_f32"}} {
		if a, b := floats(pair[0]), floats(pair[1]); !sameBits(a, b) {
			t.Errorf("%s converted:\n%v\ntorch:\n%v", pair[0], a, b)
		}
	}
	if f16 := floats("f16"); !slices.Contains(f16, float32(math.Ldexp(1, -24))) || !slices.Contains(f16, 65504) {
		t.Errorf("fixture lacks F16 edge values: %v", f16)
	}
	if got, want := ints("i32"), ints("i32_as_i64"); !slices.Equal(got, want) {
		t.Errorf("I32 Int64s() = %v, want %v", got, want)
	}
	if got, want := ints("i64"), []int64{math.MinInt64, -1, 0, 1, math.MaxInt64, 60}; !slices.Equal(got, want) {
		t.Errorf("I64 Int64s() = %v, want %v", got, want)
	}
	if got, want := ints("u8"), []int64{0, 1, 255}; !slices.Equal(got, want) {
		t.Errorf("U8 Int64s() = %v, want %v", got, want)
	}
	f32 := floats("f32")
	if len(f32) != 10 || f32[2] != 1 || f32[3] != -2.5 || !math.IsInf(float64(f32[4]), 1) || f32[7] != math.SmallestNonzeroFloat32 {
		t.Errorf("f32 = %v", f32)
	}
	if s := get("scalar"); len(s.Shape) != 0 || floats("scalar")[0] != 0.25 {
		t.Errorf("scalar = %+v", s)
	}
	if e := get("empty"); !slices.Equal(e.Shape, []int{0, 4}) || len(e.Data) != 0 {
		t.Errorf("empty = %+v", e)
	}
	if got, want := get("bf16").Shape, []int{2, 3, 4}; !slices.Equal(got, want) {
		t.Errorf("bf16 shape = %v, want %v", got, want)
	}

	// Both writers lay files out the same way, so the Go writer reproduces
	// the Python one byte for byte.
	if again := mustWrite(t, f.Tensors(), f.Metadata); !bytes.Equal(again, raw) {
		t.Errorf("Go writer differs from the Python writer:\n%q\n%q", again, raw)
	}
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := os.WriteFile(path, mustWrite(t, sampleTensors(), nil), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatalf("ReadFile: %v", err)
	}
	if len(f.Names()) != len(sampleTensors()) || f.Metadata != nil {
		t.Errorf("ReadFile: names %q, metadata %v", f.Names(), f.Metadata)
	}

	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) ||
		!strings.HasPrefix(err.Error(), "safetensors: ") {
		t.Errorf("ReadFile(missing) = %v, want a prefixed os.ErrNotExist", err)
	}
	if err := os.WriteFile(path, []byte{1, 2, 3}, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path); !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), path) {
		t.Errorf("ReadFile(short) = %v, want ErrTruncated naming the file", err)
	}
}

func TestReadValidEdgeCases(t *testing.T) {
	f4 := []byte{1, 0, 0, 0}
	tests := []struct {
		name   string
		data   []byte
		names  []string
		hasMD  bool
		checks func(t *testing.T, f *File)
	}{
		{name: "no tensors", data: file("{}", nil)},
		{name: "null metadata", data: file(`{"__metadata__":null}`, nil)},
		{name: "empty metadata", data: file(`{"__metadata__":{}}`, nil), hasMD: true},
		{
			name:  "unknown fields ignored, whitespace tolerated",
			data:  file("{\"a\" : {\"x\":[1], \"dtype\":\"I32\",\n\"shape\":[ 1 ],\"data_offsets\":[0,4]}}\n\t ", f4),
			names: []string{"a"},
		},
		{
			name:  "data order differs from name order",
			data:  file(`{"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"I16","shape":[],"data_offsets":[1,3]}}`, []byte{7, 0xff, 0xff}),
			names: []string{"a", "b"},
			checks: func(t *testing.T, f *File) {
				a, _ := f.Tensor("a")
				if v, err := a.Int64s(); err != nil || v[0] != -1 {
					t.Errorf("a = %v, %v", v, err)
				}
			},
		},
		{
			name:  "zero-size tensors share an offset",
			data:  file(`{"x":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"y":{"dtype":"F64","shape":[3,0],"data_offsets":[4,4]},"z":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, f4),
			names: []string{"x", "y", "z"},
		},
		{
			name:  "zero dimension beside huge ones",
			data:  file(`{"x":{"dtype":"F32","shape":[0,9223372036854775807,9223372036854775807],"data_offsets":[0,0]}}`, nil),
			names: []string{"x"},
		},
		{
			name:  "escaped name",
			data:  file(`{"r\u00e9seau\n":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}}`, []byte{1}),
			names: []string{"réseau\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Read(tt.data)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if got := f.Names(); !slices.Equal(got, tt.names) {
				t.Errorf("Names() = %q, want %q", got, tt.names)
			}
			if (f.Metadata != nil) != tt.hasMD {
				t.Errorf("Metadata = %#v", f.Metadata)
			}
			if tt.checks != nil {
				tt.checks(t, f)
			}
		})
	}
}
