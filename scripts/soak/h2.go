package main

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2conn is a raw HTTP/2 connection to the gRPC port that plays by the
// protocol's framing but not by a polite client's habits: it opens calls
// and sends as much or as little of their messages as an attack wants,
// within the server's flow-control windows (so the server cannot refuse
// it for a protocol error), and holds them.
type h2conn struct {
	conn net.Conn
	fr   *http2.Framer

	mu      sync.Mutex // guards the framer's writes and what follows
	hbuf    bytes.Buffer
	henc    *hpack.Encoder
	nextID  uint32
	connWin int64            // bytes the server lets us send on the connection
	streams map[uint32]*call // open calls
	initWin int64            // the server's initial call window
	cond    *sync.Cond
	closed  bool
	ended   map[string]int // how calls ended: grpc-status, REFUSED_STREAM, ...
	reads   bool           // reads responses (gives the server window back)
}

// call is one open call: the bytes it still wants to send now and its
// window.
type call struct {
	win     int64
	pending []byte
	end     bool // the message is whole: END_STREAM after it
}

// dialH2 connects and sends the preface; a goroutine reads the server's
// frames until the connection ends. With reads false the responses are
// never read: their flow-control window is never given back.
func dialH2(addr string, reads bool) (*h2conn, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c := &h2conn{conn: conn, fr: http2.NewFramer(conn, conn), nextID: 1, connWin: 65535, initWin: 65535,
		streams: map[uint32]*call{}, ended: map[string]int{}, reads: reads}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.cond = sync.NewCond(&c.mu)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		conn.Close()
		return nil, err
	}
	win := uint32(1 << 20)
	if !reads {
		win = 65535
	}
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: win}); err != nil {
		conn.Close()
		return nil, err
	}
	go c.read()
	return c, nil
}

// read takes the server's frames: settings, window updates, pings (to
// stay alive), and the ends of calls.
func (c *h2conn) read() {
	defer func() {
		c.mu.Lock()
		c.closed = true
		c.cond.Broadcast()
		c.mu.Unlock()
	}()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		c.mu.Lock()
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					d := int64(v) - c.initWin
					c.initWin = int64(v)
					for _, s := range c.streams {
						s.win += d
					}
				}
				c.fr.WriteSettingsAck()
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.connWin += int64(f.Increment)
			} else if s := c.streams[f.StreamID]; s != nil {
				s.win += int64(f.Increment)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.fr.WritePing(true, f.Data)
			}
		case *http2.DataFrame:
			// Read what the server sends, giving the window back.
			if n := len(f.Data()); n > 0 && c.reads {
				c.fr.WriteWindowUpdate(0, uint32(n))
				c.fr.WriteWindowUpdate(f.StreamID, uint32(n))
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				c.end(f.StreamID, "grpc-status "+grpcStatusName(field(f, "grpc-status")))
			}
		case *http2.RSTStreamFrame:
			c.end(f.StreamID, "RST_STREAM "+f.ErrCode.String())
		case *http2.GoAwayFrame:
			c.ended["GOAWAY "+f.ErrCode.String()]++
		}
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

// end records how call id ended; c.mu is held.
func (c *h2conn) end(id uint32, how string) {
	if _, ok := c.streams[id]; ok {
		delete(c.streams, id)
		c.ended[how]++
	}
}

func field(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.Fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// grpcStatusName names a grpc-status value.
func grpcStatusName(v string) string {
	names := map[string]string{"0": "OK", "1": "CANCELED", "4": "DEADLINE_EXCEEDED", "8": "RESOURCE_EXHAUSTED", "13": "INTERNAL", "14": "UNAVAILABLE"}
	if n, ok := names[v]; ok {
		return n
	}
	return v
}

// open starts a call of method whose message announces size bytes and
// sends the first part bytes of it, as the windows allow (pump goes on
// with the rest). It returns false when the connection is gone.
func (c *h2conn) open(method string, size, part int) (uint32, bool) {
	return c.start(method, size, make([]byte, part), false)
}

// send starts a call of method with the whole message msg.
func (c *h2conn) send(method string, msg []byte) (uint32, bool) {
	return c.start(method, len(msg), msg, true)
}

func (c *h2conn) start(method string, size int, part []byte, end bool) (uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, false
	}
	id := c.nextID
	c.nextID += 2
	c.hbuf.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", "x"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		c.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		c.closed = true
		return 0, false
	}
	msg := append([]byte{0, byte(size >> 24), byte(size >> 16), byte(size >> 8), byte(size)}, part...)
	c.streams[id] = &call{win: c.initWin, pending: msg, end: end}
	c.flush()
	return id, true
}

// flush sends what the open calls want to send, as far as the windows
// allow; c.mu is held.
func (c *h2conn) flush() {
	for id, s := range c.streams {
		for len(s.pending) > 0 && s.win > 0 && c.connWin > 0 {
			n := min(int64(len(s.pending)), s.win, c.connWin, 16<<10)
			if err := c.fr.WriteData(id, s.end && n == int64(len(s.pending)), s.pending[:n]); err != nil {
				c.closed = true
				return
			}
			s.pending, s.win, c.connWin = s.pending[n:], s.win-n, c.connWin-n
		}
	}
}

// pump sends what the calls want to send as windows open, until stop.
func (c *h2conn) pump(stop <-chan struct{}) {
	go func() {
		<-stop
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.closed {
		select {
		case <-stop:
			return
		default:
		}
		c.flush()
		c.cond.Wait()
	}
}

// open is the number of calls open.
func (c *h2conn) openCalls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.streams)
}

// alive reports whether the connection is still up.
func (c *h2conn) alive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed
}

// outcomes moves the counts of how calls ended into into.
func (c *h2conn) outcomes(into map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.ended {
		into[k] += n
	}
	clear(c.ended)
}

func (c *h2conn) close() { c.conn.Close() }

// itoa is strconv.Itoa.
func itoa(n int) string { return strconv.Itoa(n) }
