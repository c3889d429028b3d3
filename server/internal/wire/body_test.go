package wire

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"rnnserve/server/internal/infer"
	"runtime"
	"strings"
	"testing"
	"time"
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

// slowReader waits before each read.
type slowReader struct {
	wait time.Duration
	data []byte
}

func (r *slowReader) Read(p []byte) (int, error) {
	time.Sleep(r.wait)
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestStallGuard: a body whose bytes keep coming passes; one that waits
// longer than its rate allows fails with ErrSlowBody, even on a writer
// that cannot move the read deadline (the stall is seen once the read
// returns).
func TestStallGuard(t *testing.T) {
	rc := http.NewResponseController(httptest.NewRecorder())
	const rate = 1 << 20 // the first read may take (64 KiB + 0)/rate, 62.5 ms
	fast := newStallGuard(io.NopCloser(bytes.NewReader(make([]byte, 100<<10))), rc, rate)
	if n, err := io.Copy(io.Discard, fast); n != 100<<10 || err != nil {
		t.Errorf("a fast body: %d bytes, %v", n, err)
	}
	slow := newStallGuard(io.NopCloser(&slowReader{wait: 300 * time.Millisecond, data: []byte("abc")}), rc, rate)
	_, err := io.Copy(io.Discard, slow)
	if !errors.Is(err, infer.ErrSlowBody) || !strings.Contains(err.Error(), "min_body_rate") {
		t.Errorf("a stalled body: %v, want ErrSlowBody", err)
	}
	if _, ok := newStallGuard(io.NopCloser(strings.NewReader("x")), rc, 0).(*stallGuard); ok {
		t.Error("rate 0 still guards the body")
	}
}
