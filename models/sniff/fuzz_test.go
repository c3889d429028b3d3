package sniff

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"rnnserve/internal/fuzzbound"
)

// countingReader records the furthest byte read.
type countingReader struct {
	r   *bytes.Reader
	end int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.end = max(c.end, off+int64(n))
	return n, err
}

// FuzzDetect: Detect never panics, DetectAt agrees with it, and reads no
// further than HeadSize bytes into a file that does not start like a zip
// archive (a zip archive's directory is at its end).
//
//	go test -run '^$' -fuzz '^FuzzDetect$' -fuzztime 10m -parallel 1 ./models/sniff
func FuzzDetect(f *testing.F) {
	for _, glob := range []string{"../testdata/hostile/*", "../pytorch/testdata/*.pt", "../pytorch/testdata/interop/*", "../safetensors/testdata/*.safetensors"} {
		paths, _ := filepath.Glob(glob)
		for _, p := range paths {
			if data, err := os.ReadFile(p); err == nil && len(data) < 1<<20 {
				f.Add(data)
			}
		}
	}
	f.Add([]byte{0x08, 0x07, 0x12, 0x07, 'p', 'y', 't', 'o', 'r', 'c', 'h'})
	fuzzbound.Bytes(f, fuzzbound.Limits{}, func(t *testing.T, data []byte) {
		want := Detect(data)
		c := &countingReader{r: bytes.NewReader(data)}
		if got := DetectAt(c, int64(len(data))); got != want {
			t.Fatalf("DetectAt %v, Detect %v", got, want)
		}
		if want != Zip && want != TorchZip && want != TorchScript && c.end > HeadSize {
			t.Fatalf("read %d bytes to tell %v", c.end, want)
		}
		if want.String() == "" || want.Name() == "" {
			t.Fatalf("format %d has no name", want)
		}
	})
}
