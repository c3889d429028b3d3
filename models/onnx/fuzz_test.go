package onnx

import (
	"errors"
	"path/filepath"
	"testing"

	"rnnserve/internal/fuzzbound"
	b "rnnserve/models/internal/onnxbuild"
)

// fuzzBound is what Read may take on one fuzz input: fuzzbound's default
// time (1 s), and 32 MiB plus 16 bytes per input byte allocated; an input
// over either ends the worker and is recorded under testdata/fuzz.
var fuzzBound = fuzzbound.Limits{Bytes: 32 << 20, PerByte: 16}

// FuzzRead feeds Read arbitrary bytes under fuzzBound: it must return a
// model or an error matching one of the package's sentinels, never
// panic, and never ask for external data outside the folder. Seeds: every
// golden export, the tiny graph, and every hostile kind (onnxbuild) at a
// size small enough for a seed.
//
//	go test -run '^$' -fuzz FuzzRead -fuzztime 10m -parallel 1 ./models/onnx
func FuzzRead(f *testing.F) {
	goldens, _ := filepath.Glob("../testdata/golden/onnx_*")
	for _, g := range goldens {
		f.Add(golden(f, filepath.Base(g)))
	}
	f.Add(tiny(nil))
	for _, h := range []b.Hostile{b.IdentityCycle(), b.DanglingReverse(200), b.DataCycle(), b.ManyNodes(1000),
		b.ManyOutputs(1000), b.PackedVarints(1000), b.DeepGroups(1000), b.HugeDims(), b.SharedExternal(2, 4), b.LongName(1000)} {
		f.Add(h.Data)
	}
	f.Add(b.DanglingForward(200))
	fuzzbound.Bytes(f, fuzzBound, func(t *testing.T, data []byte) {
		m, err := Read(data, func(loc string) ([]byte, error) {
			if loc == "" || loc[0] == '/' || len(loc) >= 2 && loc[:2] == ".." {
				t.Fatalf("asked for %q", loc)
			}
			return make([]byte, 64), nil
		})
		if err != nil {
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrExternalData) && !errors.Is(err, ErrLimit) {
				t.Fatalf("error %v matches no sentinel", err)
			}
			if len(err.Error()) > 2000 {
				t.Fatalf("an error of %d bytes", len(err.Error()))
			}
			return
		}
		if len(m.Layers) == 0 {
			t.Fatal("a model without layers")
		}
	})
}
