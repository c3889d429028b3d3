package server

import (
	"compress/flate"
	"compress/zlib"
	"io"
	"sync"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/gzip" // registers gRPC's gzip compressor
)

// gRPC message compression: gzip (grpc-go's own package, imported above)
// and deflate, the two that Triton's clients offer
// (tritonclient.grpc's compression_algorithm) and that gRPC's C core and
// grpc-js implement. A request compressed with either is inflated by the
// transport, which checks the inflated size against the message limit
// (max_body_bytes) as it reads, so a small compressed message cannot
// become a large one; the response goes back compressed the same way.
//
// gRPC's "deflate" is zlib's format (RFC 1950: the deflate stream in a
// two-byte header and an Adler-32 trailer), as the C core writes it with
// zlib's default window, not raw deflate; grpc-go ships no compressor for
// it, so this one is ours, over compress/zlib with pooled writers and
// readers.

func init() { encoding.RegisterCompressor(deflateCompressor{}) }

// deflateCompressor is gRPC's deflate message encoding.
type deflateCompressor struct{}

func (deflateCompressor) Name() string { return "deflate" }

// deflateWriters pools zlib writers at BestSpeed: responses are
// compressed on the serving path, one message at a time per writer.
var deflateWriters = sync.Pool{New: func() any {
	w, _ := zlib.NewWriterLevel(nil, flate.BestSpeed)
	return w
}}

func (deflateCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	z := deflateWriters.Get().(*zlib.Writer)
	z.Reset(w)
	return &deflateWriter{Writer: z}, nil
}

// deflateWriter returns its zlib writer to the pool on Close.
type deflateWriter struct {
	*zlib.Writer
}

func (d *deflateWriter) Close() error {
	defer deflateWriters.Put(d.Writer)
	return d.Writer.Close()
}

// deflateReaders pools zlib readers; a reader goes back once the
// transport has read it to the end.
var deflateReaders sync.Pool

func (deflateCompressor) Decompress(r io.Reader) (io.Reader, error) {
	if z, ok := deflateReaders.Get().(io.ReadCloser); ok {
		if err := z.(zlib.Resetter).Reset(r, nil); err != nil {
			deflateReaders.Put(z)
			return nil, err
		}
		return &deflateReader{ReadCloser: z}, nil
	}
	z, err := zlib.NewReader(r)
	if err != nil {
		return nil, err
	}
	return &deflateReader{ReadCloser: z}, nil
}

// deflateReader returns its zlib reader to the pool at EOF, once.
type deflateReader struct {
	io.ReadCloser
	done bool
}

func (d *deflateReader) Read(p []byte) (int, error) {
	if d.done {
		return 0, io.EOF
	}
	n, err := d.ReadCloser.Read(p)
	if err == io.EOF {
		d.done = true
		deflateReaders.Put(d.ReadCloser)
	}
	return n, err
}
