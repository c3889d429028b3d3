package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
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

// TestCloseIdle: at shutdown the idle REST connections are closed, but
// not one on which a request has arrived unread (it is served instead of
// reset).
func TestCloseIdle(t *testing.T) {
	s, _ := newTestServer(t, nil, false)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := s.Listener(raw)
	defer ln.Close()
	var server [2]net.Conn
	var client [2]net.Conn
	for i := range 2 {
		if client[i], err = net.Dial("tcp", raw.Addr().String()); err != nil {
			t.Fatal(err)
		}
		defer client[i].Close()
		if server[i], err = ln.Accept(); err != nil {
			t.Fatal(err)
		}
		s.ConnState(server[i], http.StateActive)
		s.ConnState(server[i], http.StateIdle)
	}
	fmt.Fprintf(client[1], "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
	waitFor(t, "the request to arrive", func() bool { return pending(server[1].(*limitConn).Conn) })
	s.CloseIdle()
	var one [1]byte
	client[0].SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := client[0].Read(one[:]); err != io.EOF {
		t.Errorf("the idle connection: %v, want it closed (EOF)", err)
	}
	client[1].SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := client[1].Read(one[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the connection with a request unread: %v, want it left open", err)
	}
	server[1].Close()
}
