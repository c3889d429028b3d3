package server

import (
	"bytes"
	"compress/zlib"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"

	pb "rnnserve/server/inferencepb"
)

// TestGRPCCompressionRoundTrip: requests compressed with gzip and deflate
// are served, answered the same as uncompressed ones; a compressed
// message that inflates past the limit is refused with
// RESOURCE_EXHAUSTED and the server goes on. (The e2e suite checks both
// directions on the wire with Python's grpcio.)
func TestGRPCCompressionRoundTrip(t *testing.T) {
	g := newGRPCTest(t, func(o *Options) { o.MaxBodyBytes = 1 << 20 })
	req := &pb.ModelInferRequest{ModelName: "lm", Inputs: []*pb.ModelInferRequest_InferInputTensor{tokensInput([][]int64{{1, 2, 3, 4}})}}
	plain, err := g.c.ModelInfer(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gzip", "deflate"} {
		resp, err := g.c.ModelInfer(t.Context(), req, grpc.UseCompressor(name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(bytes.Join(resp.RawOutputContents, nil), bytes.Join(plain.RawOutputContents, nil)) {
			t.Errorf("%s: outputs differ from the uncompressed request's", name)
		}
		// Zeros past the limit compress to almost nothing.
		big := &pb.ModelInferRequest{ModelName: "lm", RawInputContents: [][]byte{make([]byte, 2<<20)},
			Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "tokens", Datatype: "INT64", Shape: []int64{1, 1 << 18}}}}
		_, err = g.c.ModelInfer(t.Context(), big, grpc.UseCompressor(name))
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("%s: a message inflating past the limit: %v", name, err)
		}
	}
	if _, err := g.c.ModelInfer(t.Context(), req); err != nil {
		t.Errorf("after the refusals: %v", err)
	}
}

// TestDeflateIsZlib: gRPC's deflate is zlib's format, as gRPC's C core
// and grpc-js write it: what ours writes, zlib reads, and the reverse,
// with the pooled readers and writers used again.
func TestDeflateIsZlib(t *testing.T) {
	c := encoding.GetCompressor("deflate")
	if c == nil {
		t.Fatal("no deflate compressor registered")
	}
	for i := range 3 {
		msg := []byte(strings.Repeat("rnnserve ", 100*(i+1)))
		var buf bytes.Buffer
		w, err := c.Compress(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(msg)
		w.Close()
		zr, err := zlib.NewReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("zlib reads what deflate wrote: %v", err)
		}
		if got, err := io.ReadAll(zr); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("round %d: %v", i, err)
		}
		buf.Reset()
		zw := zlib.NewWriter(&buf)
		zw.Write(msg)
		zw.Close()
		r, err := c.Decompress(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("round %d: deflate reads zlib's: %v", i, err)
		}
	}
	if _, err := c.Decompress(strings.NewReader("not zlib")); err == nil {
		t.Error("a stream that is not zlib: no error")
	}
}
