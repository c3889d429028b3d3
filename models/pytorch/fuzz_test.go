package pytorch

import (
	"errors"
	"testing"

	"rnnserve/internal/fuzzbound"
)

// FuzzRead feeds Read arbitrary bytes: it must return tensors or an error
// matching one of the package's sentinels, and never panic. Seeds are the
// fixtures plus testdata/fuzz/FuzzRead.
//
//	go test -run '^$' -fuzz FuzzRead -fuzztime 60s ./models/pytorch
func FuzzRead(f *testing.F) {
	for _, name := range []string{"state_dict.pt", "legacy.pt", "training.pt", "whole_module.pt"} {
		f.Add(readFixture(f, name))
	}
	f.Add(zipWithPickle("\x80\x02}q\x00X\x01\x00\x00\x00aK\x01s."))
	sentinels := []error{ErrFormat, ErrCorrupt, ErrTruncated, ErrMissingRecord, ErrClass, ErrContent, ErrTooLarge}
	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		file, err := Read(data)
		if err != nil {
			for _, s := range sentinels {
				if errors.Is(err, s) {
					return
				}
			}
			t.Fatalf("error %v matches no sentinel", err)
		}
		for _, name := range file.Names() {
			tn, ok := file.Tensor(name)
			if !ok || tn.Name != name {
				t.Fatalf("tensor %q listed but not returned", name)
			}
			if n := tn.NumElements() * tn.DType.Size(); n != len(tn.Data) {
				t.Fatalf("tensor %q: %d bytes for shape %v of %s", name, len(tn.Data), tn.Shape, tn.DType)
			}
		}
	})
}
