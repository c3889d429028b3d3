package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestUnreadResponsesCloseConnection: a client that sends requests
// (pipelined: gin's trailing-slash redirects and the OpenAPI document,
// answers no handler of the server sets a write deadline for) and reads
// none of the answers loses its connection once a response has taken the
// read and write timeouts from its request's head: net/http clears the
// deadline after each response, and without one the write would wait for
// the client for ever, holding the connection and its slot under
// max_connections.
func TestUnreadResponsesCloseConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	bin := buildServe(t)
	srv := startServe(t, bin, nil, "-listen", "127.0.0.1:0", "-grpc-listen", "off", "-cache-bytes", "1048576",
		"-read-timeout", "500ms", "-write-timeout", "300ms", "-log-access=false")
	open := func() string {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get(srv.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		for l := range strings.Lines(string(b)) {
			l = strings.TrimSuffix(l, "\n")
			if strings.HasPrefix(l, "rnnserve_open_connections ") {
				return strings.TrimPrefix(l, "rnnserve_open_connections ")
			}
		}
		return ""
	}
	for _, path := range []string{"/v2/models/", "/v2/openapi.yaml"} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(srv.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.(*net.TCPConn).SetReadBuffer(4 << 10)
		// More answers than any socket buffers hold.
		reqs := strings.Repeat("GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n", 50000)
		// The write blocks once the server stops reading; it ends with the
		// connection. The connection is counted open with the scrape's.
		go fmt.Fprint(conn, reqs)
		for start := time.Now(); open() != "2"; time.Sleep(5 * time.Millisecond) {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("GET %s pipelined: the connection is not counted open", path)
			}
		}
		// The server answers until the socket buffers are full (some
		// megabytes: tens of thousands of redirects, which take seconds
		// under the race detector on a busy machine), then the write waits
		// out the 800 ms of the read and write timeouts. Without a write
		// deadline it would wait for ever.
		start := time.Now()
		for open() != "1" { // the scrape's own connection
			if time.Since(start) > time.Minute {
				t.Fatalf("GET %s pipelined: the connection is still open a minute after its client stopped reading (%s open), want it closed once the buffers are full and the read and write timeouts have passed",
					path, open())
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("GET %s pipelined: closed %v after it was counted open", path, time.Since(start).Round(time.Millisecond))
	}
	stopServe(t, srv)
}
