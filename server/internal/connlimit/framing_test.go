package connlimit

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"testing"

	"rnnserve/internal/fuzzbound"
)

// FuzzFraming: framing follows a stream of requests that net/http reads
// as the same requests, however the stream is cut into reads: it marks
// the stream exactly when a head has both Content-Length and
// Transfer-Encoding. The streams are made from the seed: requests framed
// by length or chunked (with extensions and trailers), bodies holding
// header-like text, read sizes.
func FuzzFraming(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seed, uint8(seed%3))
	}
	f.Fuzz(func(t *testing.T, seed uint64, conflictAt uint8) {
		fuzzbound.Run(t, 0, func() {
			rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
			n := 1 + rng.IntN(5)
			var stream bytes.Buffer
			want := false
			for i := range n {
				body := make([]byte, rng.IntN(300))
				const alphabet = "ab\r\n:Content-Length: 7Transfer-Encoding\r\n\r\n0"
				for j := range body {
					body[j] = alphabet[rng.IntN(len(alphabet))]
				}
				fmt.Fprintf(&stream, "POST /x HTTP/1.1\r\nHost: x\r\nX-A: %d\r\n", i)
				chunked := rng.IntN(2) == 0
				both := int(conflictAt) == i+1
				want = want || both
				if chunked || both {
					stream.WriteString("Transfer-Encoding: chunked\r\n")
				}
				if !chunked || both {
					fmt.Fprintf(&stream, "Content-Length: %d\r\n", len(body))
				}
				stream.WriteString("\r\n")
				if !chunked && !both {
					stream.Write(body)
					continue
				}
				for rest := body; ; {
					k := min(len(rest), rng.IntN(120))
					if k == 0 {
						stream.WriteString("0\r\n")
						if rng.IntN(2) == 0 {
							stream.WriteString("X-T: 1\r\n")
						}
						stream.WriteString("\r\n")
						break
					}
					fmt.Fprintf(&stream, "%X;e=%d\r\n", k, k)
					stream.Write(rest[:k])
					stream.WriteString("\r\n")
					rest = rest[k:]
				}
			}
			// net/http reads the same n requests, bodies whole.
			br := bufio.NewReader(bytes.NewReader(stream.Bytes()))
			for i := range n {
				req, err := http.ReadRequest(br)
				if err != nil {
					t.Fatalf("request %d of %d: net/http: %v", i+1, n, err)
				}
				if _, err := io.Copy(io.Discard, req.Body); err != nil {
					t.Fatalf("request %d body: %v", i+1, err)
				}
			}
			var fr framing
			for b := stream.Bytes(); len(b) > 0; {
				k := min(len(b), 1+rng.IntN(64))
				fr.read(b[:k])
				b = b[k:]
			}
			if fr.off || fr.state != frameHead || len(fr.head) != 0 {
				t.Fatalf("framing lost the stream: off %v, state %d, %d head bytes", fr.off, fr.state, len(fr.head))
			}
			if fr.conflict.Load() != want {
				t.Fatalf("marked %v, want %v", fr.conflict.Load(), want)
			}
		})
	})
}
