package connlimit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"rnnserve/server/internal/limits"
)

// newSet is a set of n connections with its own gauge and counter.
func newSet(n int) *Set {
	b := limits.New(1<<20, 1<<16, time.Second, prometheus.NewGauge(prometheus.GaugeOpts{Name: "used"}), prometheus.NewCounter(prometheus.CounterOpts{Name: "refused"}))
	return New(n, b, prometheus.NewGauge(prometheus.GaugeOpts{Name: "open"}), prometheus.NewCounter(prometheus.CounterOpts{Name: "closed_idle"}))
}

// listen is a listener of protocol p on a local port wrapped by s.
func listen(t *testing.T, s *Set, p Protocol) (wrapped net.Listener, addr string) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := s.Listener(raw, p)
	t.Cleanup(func() { ln.Close() })
	return ln, raw.Addr().String()
}

// connect dials addr and returns the client's end and the end ln accepts
// (accepted: nil while Accept waits for room).
func connect(t *testing.T, ln net.Listener, addr string) (client net.Conn, accepted chan net.Conn) {
	t.Helper()
	client, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	accepted = make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	return client, accepted
}

// waitFor waits up to 10 s for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestMakeRoom: a protocol holds at most three quarters of the cap; at
// its share, a new connection waits until the idlest of that protocol
// has been idle a second and takes its place, never one in use; at the
// cap, it takes the place of the idlest of either protocol.
func TestMakeRoom(t *testing.T) {
	s := newSet(4) // 3 a protocol
	grpcLn, grpcAddr := listen(t, s, GRPC)
	restLn, restAddr := listen(t, s, REST)
	var held [3]*Conn
	for i := range held {
		_, acc := connect(t, grpcLn, grpcAddr)
		held[i] = (<-acc).(*Conn)
	}
	held[0].OpenCall() // in use: never closed to make room
	if s.Open(GRPC) != 3 || testutil.ToFloat64(s.open) != 3 {
		t.Fatalf("%d gRPC connections open (gauge %v), want 3", s.Open(GRPC), testutil.ToFloat64(s.open))
	}
	// A REST connection beside the gRPC share is accepted at once.
	_, acc := connect(t, restLn, restAddr)
	rest := (<-acc).(*Conn)
	ConnState(rest, http.StateActive)
	// A fourth gRPC connection waits for the idlest idle one (held[1])
	// to have been idle a second.
	start := time.Now()
	_, acc = connect(t, grpcLn, grpcAddr)
	fourth := <-acc
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("accepted after %v: an idle connection was closed before it had been idle a second", took)
	}
	if !held[1].closing.Load() || held[0].closing.Load() || held[2].closing.Load() {
		t.Errorf("closed to make room: %v %v %v, want only the idlest idle one (the second)",
			held[0].closing.Load(), held[1].closing.Load(), held[2].closing.Load())
	}
	if got := testutil.ToFloat64(s.closedIdle); got != 1 {
		t.Errorf("closed-idle counter %v, want 1", got)
	}
	// At the cap (3 gRPC, 1 REST in use), a new REST connection takes the
	// place of the idlest connection of either protocol: held[2].
	fourth.(*Conn).OpenCall()
	_, acc = connect(t, restLn, restAddr)
	select {
	case <-acc:
	case <-time.After(5 * time.Second):
		t.Fatal("a REST connection at the cap was not accepted")
	}
	if !held[2].closing.Load() || rest.closing.Load() {
		t.Errorf("at the cap: idle gRPC closed %v, REST in use closed %v; want true, false", held[2].closing.Load(), rest.closing.Load())
	}
	if s.Open(GRPC) != 2 || s.Open(REST) != 2 {
		t.Errorf("open: %d gRPC, %d REST; want 2 and 2", s.Open(GRPC), s.Open(REST))
	}
}

// TestCloseIdle: at shutdown the idle REST connections are closed, but
// not one on which a request has arrived unread (it is served instead of
// reset).
func TestCloseIdle(t *testing.T) {
	s := newSet(8)
	ln, addr := listen(t, s, REST)
	var server, client [2]net.Conn
	for i := range 2 {
		var acc chan net.Conn
		client[i], acc = connect(t, ln, addr)
		server[i] = <-acc
		ConnState(server[i], http.StateActive)
		ConnState(server[i], http.StateIdle)
	}
	fmt.Fprintf(client[1], "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
	waitFor(t, "the request to arrive", func() bool { return pending(server[1].(*Conn).Conn) })
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
	if s.Open(REST) != 0 || testutil.ToFloat64(s.open) != 0 {
		t.Errorf("%d REST connections open after both closed (gauge %v)", s.Open(REST), testutil.ToFloat64(s.open))
	}
}

// TestOwe: response bytes handed to a connection stay charged to the
// budget until the connection writes them, or closes.
func TestOwe(t *testing.T) {
	s := newSet(4)
	ln, addr := listen(t, s, GRPC)
	client, acc := connect(t, ln, addr)
	c := (<-acc).(*Conn)
	if err := s.budget.Acquire(t.Context(), 1000, limits.TierNew, false); err != nil {
		t.Fatal(err)
	}
	c.Owe(1000)
	go io.Copy(io.Discard, client)
	if _, err := c.Write(make([]byte, 300)); err != nil {
		t.Fatal(err)
	}
	if got := s.budget.InUse(); got != 700 {
		t.Errorf("after writing 300 of 1000 bytes owed: %d in use, want 700", got)
	}
	c.Close()
	if got := s.budget.InUse(); got != 0 {
		t.Errorf("after the connection closed: %d in use, want 0", got)
	}
	// A response handed on after the close is given back at once.
	if err := s.budget.Acquire(t.Context(), 50, limits.TierNew, false); err != nil {
		t.Fatal(err)
	}
	c.Owe(50)
	if got := s.budget.InUse(); got != 0 {
		t.Errorf("owed after the close: %d in use, want 0", got)
	}
}
