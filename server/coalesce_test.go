package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// writeCounter counts the writes on the connections it accepts.
type writeCounter struct {
	net.Listener
	writes atomic.Int64
}

func (l *writeCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, n: &l.writes}, nil
}

type countedConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// TestInferOneWrite: served as serve serves it (the server's listener,
// ConnState and ConnContext), an infer response larger than net/http's
// 4 KiB connection buffer goes out in one write, JSON, gzip-compressed or
// with binary tensor data, with the bytes a server without the wrapped
// listener sends; the connection goes on serving.
func TestInferOneWrite(t *testing.T) {
	s, plain := newTestServer(t, nil, true)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wc := &writeCounter{Listener: raw}
	hs := &http.Server{Handler: s.Handler(), ConnState: s.ConnState, ConnContext: s.ConnContext}
	go hs.Serve(s.Listener(wc))
	t.Cleanup(func() { hs.Close() })

	rows := make([][]int64, 24)
	for i := range rows {
		rows[i] = []int64{int64(i % 7), 3, 5, int64(i % 5)}
	}
	// send posts body on c and returns the response's body, with the
	// headers that describe it.
	send := func(c net.Conn, br *bufio.Reader, body, extra string) (string, []byte) {
		t.Helper()
		fmt.Fprintf(c, "POST /v2/models/lm/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s", len(body), extra, body)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%d %v %s", resp.StatusCode, err, b)
		}
		h := resp.Header
		return fmt.Sprint(h.Get("Content-Type"), h.Get("Content-Encoding"), h.Get("Inference-Header-Content-Length"), resp.ContentLength), b
	}
	dial := func(addr string) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	ours, ourBR := dial(raw.Addr().String())
	ref, refBR := dial(strings.TrimPrefix(plain.URL, "http://"))
	for _, tc := range []struct{ name, body, extra string }{
		{"JSON", `{"inputs": [` + tokensJSON(rows) + `], "outputs": [{"name": "hidden"}]}`, ""},
		{"gzip", `{"inputs": [` + tokensJSON(rows) + `], "outputs": [{"name": "hidden"}]}`, "Accept-Encoding: gzip\r\n"},
		{"binary", `{"inputs": [` + tokensJSON(rows) + `], "outputs": [{"name": "hidden", "parameters": {"binary_data": true}}]}`, ""},
		{"JSON again", `{"inputs": [` + tokensJSON(rows) + `], "outputs": [{"name": "hidden"}]}`, ""},
	} {
		before := wc.writes.Load()
		head, got := send(ours, ourBR, tc.body, tc.extra)
		time.Sleep(20 * time.Millisecond) // the write counter is bumped before the bytes leave
		writes := wc.writes.Load() - before
		wantHead, want := send(ref, refBR, tc.body, tc.extra)
		if head != wantHead || !bytes.Equal(got, want) {
			t.Errorf("%s: %s, %d bytes; without the listener %s, %d bytes", tc.name, head, len(got), wantHead, len(want))
		}
		if tc.name == "JSON" && len(got) <= 4<<10 {
			t.Fatalf("the response is %d bytes, within net/http's buffer: the test needs more rows", len(got))
		}
		if writes != 1 {
			t.Errorf("%s: %d-byte response in %d writes, want 1", tc.name, len(got), writes)
		}
	}
}
