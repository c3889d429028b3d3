package connlimit

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingListener counts the writes on the connections it accepts.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l *countingListener
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.l.writes.Add(1)
	return c.Conn.Write(p)
}

// body is n bytes a test response carries: digits, so a cut shows.
func body(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = '0' + byte(i%10)
	}
	return b
}

// coalesceServer serves, on a Set's REST listener over a counting one,
// GET /?n=N&arm=1: a response of N bytes with its Content-Length, written
// in one Write, the connection armed when arm is set. It returns the
// address and the counting listener.
func coalesceServer(t *testing.T, writeTimeout time.Duration) (string, *countingListener) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: raw}
	ln := newSet(64).Listener(cl, REST)
	hs := &http.Server{ConnState: ConnState, ConnContext: ConnContext,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			if writeTimeout > 0 {
				http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTimeout))
			}
			if r.URL.Query().Get("arm") == "1" && !Coalesce(r) {
				t.Errorf("Coalesce refused an HTTP/1.1 request on a REST connection")
			}
			w.Header().Set("Content-Length", strconv.Itoa(n))
			w.Write(body(n))
		})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return raw.Addr().String(), cl
}

// get sends GET path on c and reads the response.
func get(t *testing.T, c net.Conn, br *bufio.Reader, path string, closeConn bool) (*http.Response, []byte) {
	t.Helper()
	req := "GET " + path + " HTTP/1.1\r\nHost: x\r\n"
	if closeConn {
		req += "Connection: close\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: body: %v", path, err)
	}
	return resp, b
}

// TestCoalesce: an armed response of 4 to 8 KiB goes out in one write
// where net/http makes two, with the same bytes; the connection serves
// the next request (armed or not), a Connection: close response is
// written whole before the close, and one past holdLimit arrives whole.
func TestCoalesce(t *testing.T) {
	addr, cl := coalesceServer(t, 0)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	writes := func(path string, closeConn bool) int64 {
		t.Helper()
		before := cl.writes.Load()
		resp, b := get(t, c, br, path, closeConn)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(path, "&", 2)[0], "/?n="))
		if !bytes.Equal(b, body(n)) {
			t.Fatalf("GET %s: %d bytes, not the %d written", path, len(b), n)
		}
		// The server may still be in the call that releases the held
		// bytes after the client has them all: it is done once it waits
		// for the next request.
		time.Sleep(20 * time.Millisecond)
		return cl.writes.Load() - before
	}
	if w := writes("/?n=4600", false); w != 2 {
		t.Errorf("unarmed 4,600-byte response: %d writes, want net/http's 2 (the test no longer shows the split)", w)
	}
	for range 3 {
		if w := writes("/?n=4600&arm=1", false); w != 1 {
			t.Errorf("armed 4,600-byte response: %d writes, want 1", w)
		}
	}
	if w := writes("/?n=100", false); w != 1 {
		t.Errorf("unarmed 100-byte response after armed ones: %d writes, want 1", w)
	}
	if w := writes("/?n=300000&arm=1", false); w > 10 {
		t.Errorf("armed 300,000-byte response: %d writes", w)
	}
	writes("/?n=7000&arm=1", true)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("after the Connection: close response: read %d, %v, want the close", n, err)
	}
}

// TestCoalesceConcurrent: many connections, each armed for every
// response, all get their bytes (run with -race).
func TestCoalesceConcurrent(t *testing.T) {
	addr, _ := coalesceServer(t, 0)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			for k := range 20 {
				n := 1000 + 997*((i+k)%13)
				_, b := get(t, c, br, fmt.Sprintf("/?n=%d&arm=1", n), false)
				if !bytes.Equal(b, body(n)) {
					t.Errorf("connection %d request %d: %d bytes, want %d", i, k, len(b), n)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestCoalesceStalledReader: held bytes go out under the handler's write
// deadline; a client that reads nothing gets its connection closed when
// the deadline passes, as an unarmed response's would be, and the server
// goes on serving others.
func TestCoalesceStalledReader(t *testing.T) {
	addr, _ := coalesceServer(t, 200*time.Millisecond)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4 << 10)
	}
	// Far more than the socket buffers hold, asked for and never read.
	io.WriteString(c, "GET /?n=60000000&arm=1 HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(time.Second)
	// Now read: the server must have given up and closed; what arrives
	// is cut short of the body.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.Copy(io.Discard, c)
	if got >= 60000000 {
		t.Errorf("a stalled reader got the whole %d bytes past the write deadline", got)
	}
	other, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, b := get(t, other, bufio.NewReader(other), "/?n=5000&arm=1", false); len(b) != 5000 {
		t.Errorf("after a stalled reader: %d bytes, want 5000", len(b))
	}
}
