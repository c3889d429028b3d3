package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
)

// isClosed reports whether a read ended because the peer closed.
func isClosed(err error) bool {
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestIdleConnectionsMakeRoom: idle gRPC connections hold at most their
// protocol's share of the cap, so REST connections are still accepted;
// at the share or the cap, the connection idle longest (a second or more)
// is closed to make room, and one in use is not.
func TestIdleConnectionsMakeRoom(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) { o.MaxConnections = 4 }, true) // 3 a protocol
	grpcAddr, _ := grpcServed(t, s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s.Handler(), ConnState: s.ConnState}
	go hs.Serve(s.Listener(ln))
	t.Cleanup(func() { hs.Close() })
	live := func(c net.Conn, wait time.Duration) error {
		fmt.Fprintf(c, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(wait))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return err
	}
	// Three idle gRPC connections: the gRPC share.
	idle := []*h2Client{dialH2(t, grpcAddr), dialH2(t, grpcAddr), dialH2(t, grpcAddr)}
	waitFor(t, "three connections", func() bool { return testutil.ToFloat64(s.metrics.connections) == 3 })
	// REST is not locked out.
	rest, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer rest.Close()
	if err := live(rest, 2*time.Second); err != nil {
		t.Fatalf("a REST connection beside three idle gRPC ones: %v", err)
	}
	// A fourth gRPC connection: the idlest gRPC one is closed for it
	// once idle a second.
	start := time.Now()
	fourth := dialH2(t, grpcAddr)
	if err := fourth.until(5*time.Second, func(f http2.Frame) bool { _, ok := f.(*http2.SettingsFrame); return ok }); err != nil {
		t.Fatalf("a fourth gRPC connection at the share: %v", err)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("served after %v: an idle connection was closed before it had been idle a second", took)
	}
	closed := 0
	for _, c := range idle {
		if err := c.until(100*time.Millisecond, func(http2.Frame) bool { return false }); isClosed(err) {
			closed++
		}
	}
	if closed != 1 || testutil.ToFloat64(s.metrics.connectionsClosedIdle) != 1 {
		t.Errorf("%d idle gRPC connections closed (metric %v), want 1", closed, testutil.ToFloat64(s.metrics.connectionsClosedIdle))
	}
	// At the cap a new REST connection takes the place of the idlest
	// connection of either protocol, while the REST one in use (a request
	// just answered) stays.
	for range 2 {
		if err := live(rest, 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	second, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if err := live(second, 5*time.Second); err != nil {
		t.Errorf("a REST connection at the cap: %v", err)
	}
	if err := live(rest, 2*time.Second); err != nil {
		t.Errorf("the REST connection in use was closed: %v", err)
	}
}

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
	// A folded header line, which net/http joins to the line before (a
	// proxy may not), is refused as well: it would otherwise stop the
	// check for the rest of the connection.
	folded := "GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n continued\r\n\r\n"
	if resp := exchange(folded, 1)[0]; resp.StatusCode != http.StatusBadRequest || !resp.Close {
		t.Errorf("a folded header line: %d (close %v), want 400 closing the connection", resp.StatusCode, resp.Close)
	}
}

// TestManagementConnsApart: the management listener's connections count
// against a cap of their own, so with every public REST slot taken, an
// operator's connection is served at once, not after one of the public
// ones has been idle the second it takes to be closed for room.
func TestManagementConnsApart(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) { o.MaxConnections = 4 }, true) // 3 a protocol
	serve := func(h http.Handler, wrap func(net.Listener) net.Listener) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := &http.Server{Handler: h, ConnState: s.ConnState, ConnContext: s.ConnContext}
		go hs.Serve(wrap(ln))
		t.Cleanup(func() { hs.Close() })
		return ln.Addr().String()
	}
	public, mgmt := serve(s.Handler(), s.Listener), serve(s.ManagementHandler(), s.ManagementListener)
	for range 3 { // the REST share, each in a request head: not idle
		c, err := net.Dial("tcp", public)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "GET /v2/health/live HTTP/1.1\r\n")
	}
	waitFor(t, "three connections", func() bool { return testutil.ToFloat64(s.metrics.connections) == 3 })
	c, err := net.Dial("tcp", mgmt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the management port with the public REST share taken: %v", err)
	}
	resp.Body.Close()
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("the management port with the public REST share taken answered after %v", took)
	}
}
