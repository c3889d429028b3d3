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
// readers. grpc-go keeps its compressors in a registry of the process
// (encoding.RegisterCompressor, by name), so there is one deflate
// compressor per process, registered here, and its pools are its own.

func init() { encoding.RegisterCompressor(&deflateCompressor{}) }

// deflateCompressor is gRPC's deflate message encoding. Its writers pool
// zlib writers at BestSpeed (responses are compressed on the serving
// path, one message at a time per writer); its readers pool zlib
// readers, each back once the transport has read it to the end.
type deflateCompressor struct {
	writers sync.Pool // *zlib.Writer
	readers sync.Pool // io.ReadCloser from zlib.NewReader
}

func (*deflateCompressor) Name() string { return "deflate" }

func (c *deflateCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	z, ok := c.writers.Get().(*zlib.Writer)
	if !ok {
		z, _ = zlib.NewWriterLevel(nil, flate.BestSpeed)
	}
	z.Reset(w)
	return &deflateWriter{Writer: z, pool: &c.writers}, nil
}

// deflateWriter returns its zlib writer to the pool on Close.
type deflateWriter struct {
	*zlib.Writer
	pool *sync.Pool
}

func (d *deflateWriter) Close() error {
	defer d.pool.Put(d.Writer)
	return d.Writer.Close()
}

func (c *deflateCompressor) Decompress(r io.Reader) (io.Reader, error) {
	if z, ok := c.readers.Get().(io.ReadCloser); ok {
		if err := z.(zlib.Resetter).Reset(r, nil); err != nil {
			c.readers.Put(z)
			return nil, err
		}
		return &deflateReader{ReadCloser: z, pool: &c.readers}, nil
	}
	z, err := zlib.NewReader(r)
	if err != nil {
		return nil, err
	}
	return &deflateReader{ReadCloser: z, pool: &c.readers}, nil
}

// deflateReader returns its zlib reader to the pool at EOF, once.
type deflateReader struct {
	io.ReadCloser
	pool *sync.Pool
	done bool
}

func (d *deflateReader) Read(p []byte) (int, error) {
	if d.done {
		return 0, io.EOF
	}
	n, err := d.ReadCloser.Read(p)
	if err == io.EOF {
		d.done = true
		d.pool.Put(d.ReadCloser)
	}
	return n, err
}
