package server

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestLongMethodClipped: a request whose method is a 60 KB token (net/http
// takes any token, within the header limit) is answered 405 and logged
// with its method clipped, as its path is: neither the answer nor the
// access log line repeats kilobytes a client chose.
func TestLongMethodClipped(t *testing.T) {
	s, _ := newTestServer(t, nil, true)
	lines := &logLines{}
	al := NewAccessLog(slog.New(slog.NewJSONHandler(lines, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: al.Handler(s.Handler()), MaxHeaderBytes: 64 << 10} // serve's header limit
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	method := strings.Repeat("M", 60000)
	fmt.Fprintf(conn, "%s /v2/models HTTP/1.1\r\nHost: x\r\nX-Request-Id: long-method\r\n\r\n", method)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || len(body) > 1024 {
		t.Errorf("a 60 KB method: %d with a %d-byte body, want 405 with a short one", resp.StatusCode, len(body))
	}
	line := lines.waitFor(t, "long-method")
	if m, _ := line["method"].(string); len(m) > 1024 {
		t.Errorf("the access log line holds a %d-byte method, want it clipped", len(m))
	}
}
