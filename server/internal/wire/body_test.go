package wire

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"runtime"
	"testing"
)

// TestInflaterBytes: what a gzip or zlib reader allocates to inflate a
// body is within inflaterBytes, the charge taken for it beside the
// inflated bytes.
func TestInflaterBytes(t *testing.T) {
	plain := bytes.Repeat([]byte("0123456789abcdef"), 64<<10)
	var zipped bytes.Buffer
	gw := gzip.NewWriter(&zipped)
	gw.Write(plain)
	gw.Close()
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(plain)
	zw.Close()
	buf := make([]byte, 32<<10)
	for _, c := range []struct {
		name string
		open func(io.Reader) (io.ReadCloser, error)
		data []byte
	}{
		{"gzip", func(r io.Reader) (io.ReadCloser, error) { return gzip.NewReader(r) }, zipped.Bytes()},
		{"zlib", zlib.NewReader, z.Bytes()},
	} {
		var before, after runtime.MemStats
		const runs = 20
		runtime.ReadMemStats(&before)
		for range runs {
			zr, err := c.open(bytes.NewReader(c.data))
			if err != nil {
				t.Fatal(err)
			}
			for {
				if _, err := zr.Read(buf); err != nil {
					break
				}
			}
			zr.Close()
		}
		runtime.ReadMemStats(&after)
		if per := int64(after.TotalAlloc-before.TotalAlloc) / runs; per > inflaterBytes {
			t.Errorf("%s: %d bytes allocated per body inflated, over the %d charged", c.name, per, inflaterBytes)
		} else {
			t.Logf("%s: %d bytes allocated per body inflated (%d charged)", c.name, per, inflaterBytes)
		}
	}
}
