package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// conn is one client's HTTP/1.1 connection: the request goes out in one
// write, the response is parsed by net/http (http.ReadResponse: status,
// headers, Content-Length or chunked bodies) on the same goroutine.
// net/http's Client hands each request and response between three
// goroutines per connection (the caller's, the transport's reader and
// writer); on the two cores the servers share with the load generator
// those wake-ups cost about as much CPU again as the requests themselves,
// CPU taken from the server under test. A broken or closed connection is
// dialled again at the next request.
type conn struct {
	addr    string // host:port
	timeout time.Duration
	c       net.Conn
	r       *bufio.Reader
	head    [512]byte // the last answer's first bytes (do's msg)
}

// newConn is a connection to the http:// URL base (not yet dialled).
func newConn(base string, timeout time.Duration) (*conn, string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, "", err
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, "", fmt.Errorf("%q: want http://host:port", base)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &conn{addr: addr, timeout: timeout}, u.Host, nil
}

// postRequest is the bytes of an HTTP/1.1 POST of a JSON body to path.
func postRequest(host, path string, body []byte) []byte {
	b := make([]byte, 0, len(body)+len(host)+len(path)+96)
	b = append(b, "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}

// do sends req (a whole HTTP/1.1 request) and reads the response, keeping
// the body's first 512 bytes for an error message (msg, valid until the
// next call); the connection is
// closed on any error and when the server asks. A kept-alive connection
// the server closed while it was idle fails before any response byte;
// such a request is sent once more on a new connection, as net/http's
// Transport does.
func (c *conn) do(req []byte) (status int, msg []byte, err error) {
	reused := c.c != nil
	status, msg, err = c.once(req)
	if err != nil && reused && errors.Is(err, errIdleClosed) {
		status, msg, err = c.once(req)
	}
	return status, msg, err
}

// errIdleClosed marks a connection that failed before the response began.
var errIdleClosed = errors.New("connection closed before the response")

func (c *conn) once(req []byte) (status int, msg []byte, err error) {
	if c.c == nil {
		nc, err := net.DialTimeout("tcp", c.addr, c.timeout)
		if err != nil {
			return 0, nil, err
		}
		c.c, c.r = nc, bufio.NewReaderSize(nc, 16<<10)
	}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if err := c.c.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, nil, err
	}
	if _, err := c.c.Write(req); err != nil {
		return 0, nil, fmt.Errorf("%w: %w", errIdleClosed, err)
	}
	if _, err := c.r.Peek(1); err != nil {
		return 0, nil, fmt.Errorf("%w: %w", errIdleClosed, err)
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, nil, err
	}
	n, err := io.ReadFull(resp.Body, c.head[:])
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
	} else if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil // a body shorter than 512 bytes
	}
	resp.Body.Close()
	if err != nil {
		return 0, nil, fmt.Errorf("reading the response body: %w", err)
	}
	if resp.Close {
		c.close()
	}
	return resp.StatusCode, c.head[:n], nil
}

func (c *conn) close() {
	if c.c != nil {
		c.c.Close()
		c.c, c.r = nil, nil
	}
}

// statusError is a non-200 answer as an error.
func statusError(status int, msg []byte) error {
	return fmt.Errorf("%d %s: %s", status, http.StatusText(status), msg)
}
