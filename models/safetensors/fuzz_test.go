package safetensors

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rnnserve/internal/fuzzbound"
)

// FuzzRead checks that Read never panics, that its errors carry the
// package prefix, and that every file it accepts survives Write and Read
// unchanged, with Write producing its own canonical layout.
//
//	go test ./models/safetensors/ -run '^$' -fuzz '^FuzzRead$' -fuzztime 10m -parallel 1
func FuzzRead(f *testing.F) {
	f.Add(mustWrite(f, sampleTensors(), map[string]string{"format": "pt"}))
	f.Add(mustWrite(f, nil, nil))
	f.Add(file(`{"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"I16","shape":[],"data_offsets":[1,3]}}`, []byte{7, 0xff, 0xff}))
	f.Add(file(`{"x":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"z":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, []byte{1, 2, 3, 4}))
	if raw, err := os.ReadFile(fixturePath); err == nil {
		f.Add(raw)
	} else {
		f.Fatalf("seed fixture: %v", err)
	}
	for _, bad := range badFiles {
		f.Add(bad.data)
	}
	// The hostile files but the 3 MB one, whose header a mutation takes a
	// second to read (TestHostileFiles in models reads it whole).
	hostile, _ := filepath.Glob("../testdata/hostile/*.safetensors")
	for _, p := range hostile {
		if raw, err := os.ReadFile(p); err == nil && len(raw) < 512<<10 {
			f.Add(raw)
		}
	}

	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		got, err := Read(data)
		at, errAt := ReadAt(bytes.NewReader(data), int64(len(data)))
		if (err == nil) != (errAt == nil) || err != nil && err.Error() != errAt.Error() {
			t.Fatalf("Read: %v; ReadAt: %v", err, errAt)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "safetensors: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
			if len(err.Error()) > 2000 {
				t.Fatalf("an error of %d bytes", len(err.Error()))
			}
			return
		}
		for _, name := range got.Names() {
			a, _ := got.Tensor(name)
			b, _ := at.Tensor(name)
			bb, err := b.Bytes()
			if err != nil || !bytes.Equal(a.Data, bb) || a.DType != b.DType {
				t.Fatalf("tensor %q: Read and ReadAt differ (%v)", name, err)
			}
			if isFloat(a.DType) {
				x, errX := a.Float32s()
				y := make([]float32, b.NumElements())
				if errY := b.Float32sInto(y); errX != nil || errY != nil || !sameFloats(x, y) {
					t.Fatalf("tensor %q: Float32s of Read and ReadAt differ (%v, %v)", name, errX, errY)
				}
			}
		}
		for _, name := range got.Names() {
			tensor, _ := got.Tensor(name)
			if tensor.NumElements()*tensor.DType.Size() != len(tensor.Data) {
				t.Fatalf("tensor %q: %d elements of %s in %d bytes", name, tensor.NumElements(), tensor.DType, len(tensor.Data))
			}
			// Conversions may refuse the dtype but must not panic.
			_, _ = tensor.Float32s()
			_, _ = tensor.Int64s()
		}

		var buf bytes.Buffer
		if err := Write(&buf, got.Tensors(), got.Metadata); err != nil {
			t.Fatalf("Write of an accepted file: %v", err)
		}
		written := bytes.Clone(buf.Bytes())
		again, err := Read(written)
		if err != nil {
			t.Fatalf("Read of rewritten file: %v\n%q", err, written)
		}
		if diff := equalFiles(got, again); diff != "" {
			t.Fatalf("round trip changed %s", diff)
		}
		buf.Reset()
		if err := Write(&buf, again.Tensors(), again.Metadata); err != nil || !bytes.Equal(buf.Bytes(), written) {
			t.Fatalf("Write is not canonical: %v", err)
		}
	})
}

// sameFloats compares bit patterns, so that NaNs compare equal.
func sameFloats(x, y []float32) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			return false
		}
	}
	return true
}
