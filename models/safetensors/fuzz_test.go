package safetensors

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"rnnserve/internal/fuzzbound"
)

// FuzzRead checks that Read never panics, that its errors carry the
// package prefix, and that every file it accepts survives Write and Read
// unchanged, with Write producing its own canonical layout.
//
//	go test ./models/safetensors/ -run '^$' -fuzz FuzzRead -fuzztime 1m
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

	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		got, err := Read(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "safetensors: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
			return
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
