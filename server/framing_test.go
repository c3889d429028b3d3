package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"rnnserve/internal/fuzzbound"
)

// TestContentLengthWithChunked: a request with both Content-Length and
// Transfer-Encoding is refused with 400 and its connection closed, while
// requests framed either way alone (pipelined, chunked with extensions
// and trailers, bodies that hold header-like text) are served.
func TestContentLengthWithChunked(t *testing.T) {
	s, _ := newTestServer(t, nil, true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s.Handler(), ConnState: s.ConnState, ConnContext: s.ConnContext}
	go hs.Serve(s.Listener(ln))
	t.Cleanup(func() { hs.Close() })
	body := `{"inputs": [` + tokensJSON([][]int64{{1, 2}}) + `], "parameters": {"x": "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"}}`
	body = strings.ReplaceAll(body, "\r\n", `\r\n`)
	chunked := func(b string) string {
		return fmt.Sprintf("%x;ext=1\r\n%s\r\n%x\r\n%s\r\n0\r\nX-Trailer: Content-Length: 9\r\n\r\n", 10, b[:10], len(b)-10, b[10:])
	}
	exchange := func(raw string, n int) []*http.Response {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, raw)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(conn)
		var out []*http.Response
		for range n {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("response %d of %d: %v", len(out)+1, n, err)
			}
			io.Copy(io.Discard, resp.Body)
			out = append(out, resp)
		}
		return out
	}
	post := "POST /v2/models/lm/infer HTTP/1.1\r\nHost: x\r\n"
	good := post + fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body) +
		post + "Transfer-Encoding: chunked\r\n\r\n" + chunked(body) +
		"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n" +
		post + fmt.Sprintf("content-length: %d\r\n\r\n%s", len(body), body)
	for i, resp := range exchange(good, 4) {
		if resp.StatusCode != http.StatusOK {
			t.Errorf("request %d of a good pipeline: %d", i+1, resp.StatusCode)
		}
	}
	bad := post + fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n", len(body)) + chunked(body)
	resp := exchange(bad, 1)[0]
	if resp.StatusCode != http.StatusBadRequest || !resp.Close {
		t.Errorf("Content-Length with Transfer-Encoding: %d (close %v), want 400 closing the connection", resp.StatusCode, resp.Close)
	}
}

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
