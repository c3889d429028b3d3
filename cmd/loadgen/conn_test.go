package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestConnBodies: a kept-alive connection reads Content-Length and chunked
// bodies alike, keeps an error body's first bytes, and sends the request
// whole (method, path, host, body).
func TestConnBodies(t *testing.T) {
	var conns atomic.Int64
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/p" || r.Host == "" || string(b) != `{"x": 1}` ||
			r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad request: "+r.Method+" "+r.URL.Path+" "+string(b), 400)
			return
		}
		if r.Header.Get("X-Chunked") != "" {
			// A flush before the body is done: net/http answers chunked.
			w.Write([]byte("o"))
			w.(http.Flusher).Flush()
			w.Write([]byte("k"))
			return
		}
		w.Write([]byte("ok"))
	}))
	hs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	hs.Start()
	defer hs.Close()
	c, host, err := newConn(hs.URL, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	good := postRequest(host, "/p", []byte(`{"x": 1}`))
	chunked := []byte(strings.Replace(string(good), "\r\n\r\n", "\r\nX-Chunked: 1\r\n\r\n", 1))
	for i, req := range [][]byte{good, chunked, good, chunked} {
		status, msg, err := c.do(req)
		if err != nil || status != 200 || string(msg) != "ok" {
			t.Fatalf("request %d: %d %q %v", i, status, msg, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for four requests, want one kept alive", n)
	}
	status, msg, err := c.do(postRequest(host, "/other", []byte(strings.Repeat("y", 2000))))
	if err != nil || status != 400 || len(msg) != 512 || !strings.HasPrefix(string(msg), "bad request: POST /other yyy") {
		t.Errorf("error answer: %d %q %v", status, msg, err)
	}
	if err := statusError(status, msg); !strings.Contains(err.Error(), "400 Bad Request: bad request") {
		t.Errorf("statusError: %v", err)
	}
}

// TestConnReconnects: a server that closes the connection after each
// answer (Connection: close), or closes an idle one without answering, is
// dialled again; a server that closes before answering a fresh connection
// is an error.
func TestConnReconnects(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	// Each connection answers its first request, with "Connection: close"
	// on every odd connection; an even connection's second request gets
	// no answer, the connection closed as an idle timeout would.
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			n := accepted.Add(1)
			go func() {
				defer nc.Close()
				r := bufio.NewReader(nc)
				req, err := http.ReadRequest(r)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				if n%2 == 1 {
					io.WriteString(nc, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
					return
				}
				io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				if _, err := http.ReadRequest(r); err == nil {
					return // closed unanswered
				}
			}()
		}
	}()
	c, host, err := newConn("http://"+ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	req := postRequest(host, "/p", []byte("{}"))
	for i := range 6 {
		status, msg, err := c.do(req)
		if err != nil || status != 200 || string(msg) != "ok" {
			t.Fatalf("request %d: %d %q %v", i, status, msg, err)
		}
	}
	if n := accepted.Load(); n < 6 {
		t.Errorf("%d connections for six requests on a server that never keeps one", n)
	}

	// A fresh connection closed before the answer is the request's error.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() {
		for {
			nc, err := mute.Accept()
			if err != nil {
				return
			}
			http.ReadRequest(bufio.NewReader(nc))
			nc.Close()
		}
	}()
	m, host, _ := newConn("http://"+mute.Addr().String(), 5*time.Second)
	if _, _, err := m.do(postRequest(host, "/p", []byte("{}"))); err == nil {
		t.Error("a server that closes without answering: no error")
	}
}

func TestNewConnURL(t *testing.T) {
	for _, u := range []string{"https://127.0.0.1:1", "127.0.0.1:80", "http://", "ftp://x"} {
		if _, _, err := newConn(u, time.Second); err == nil {
			t.Errorf("%q: no error", u)
		}
	}
	c, host, err := newConn("http://localhost", time.Second)
	if err != nil || c.addr != "localhost:80" || host != "localhost" {
		t.Errorf("default port: %q %q %v", c.addr, host, err)
	}
}
