package onnx

import (
	"errors"
	"testing"
)

// FuzzRead feeds Read arbitrary bytes: it must return a model or an error
// matching one of the package's sentinels, never panic, and never ask for
// external data outside the folder. Seeds: the golden exports, the tiny
// graph and testdata/fuzz/FuzzRead.
//
//	go test -run '^$' -fuzz FuzzRead -fuzztime 60s ./models/onnx
func FuzzRead(f *testing.F) {
	f.Add(golden(f, "onnx_lstm_lm"))
	f.Add(golden(f, "onnx_gru_bidir"))
	f.Add(tiny(nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Read(data, func(loc string) ([]byte, error) {
			if loc == "" || loc[0] == '/' || len(loc) >= 2 && loc[:2] == ".." {
				t.Fatalf("asked for %q", loc)
			}
			return nil, errors.New("no such file")
		})
		if err != nil {
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrExternalData) {
				t.Fatalf("error %v matches no sentinel", err)
			}
			return
		}
		if len(m.Layers) == 0 {
			t.Fatal("a model without layers")
		}
	})
}
