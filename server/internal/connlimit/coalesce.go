package connlimit

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// Coalescing a REST response's writes. net/http writes a response
// through a 4 KiB buffer over the connection, so a response of 4 to 8 KiB
// (bytelm's final state as JSON is about 4.6 KB) costs two write system
// calls: the full buffer in the middle of the body, the rest when the
// handler returns. On a loopback or a LAN each write is a segment sent
// and a wake-up of the reader, which is about as dear as the bytes.
//
// Coalesce arms the request's connection: from then on what net/http
// writes is held in a buffer instead, and goes out in one write (a writev
// once it is past holdLimit) at the first thing net/http does on the
// connection after the response is complete. That is always a deadline:
// finishing a request, net/http stops its background read
// (SetReadDeadline) if one is waiting and then clears the write deadline
// (SetWriteDeadline) before anything else, so the held bytes go out under
// the write deadline the handler set, right after the last of them was
// written. A close and a change of the connection's state (ConnState)
// also write them out, so nothing held can be left behind. (A read does
// not: net/http's background read, which watches for the client going
// away, may start after the connection was armed.) A
// failed write of held bytes closes the connection, as net/http does when
// a response's last write fails.
//
// Only an HTTP/1 request on a connection of this package's listener
// (ConnContext) can be armed, and only for a response written whole
// before the handler returns: a streamed response would wait for its end.

// holdLimit is the most a connection holds: past it, the held bytes and
// the write that crosses it go out together.
const holdLimit = 64 << 10

// holdBufs are buffers for held bytes, shared by all connections: a
// connection holds one only while it is armed.
var holdBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// coalescer is a Conn's held writes.
type coalescer struct {
	mu    sync.Mutex
	armed bool
	buf   *[]byte // from holdBufs while armed
	err   error   // the failed write of held bytes, returned by later writes
}

// Coalesce arms the connection of r, when it has one that can be (see
// above), so that the response's writes go out in one system call. Call
// it right before writing a response whole; it reports whether it armed.
func Coalesce(r *http.Request) bool {
	if r.ProtoMajor != 1 || r.TLS != nil {
		return false
	}
	lc, ok := r.Context().Value(connKey{}).(*Conn)
	if !ok || lc.protocol != REST {
		return false
	}
	c := &lc.co
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil || c.armed {
		return false
	}
	c.armed = true
	lc.armed.Store(true)
	c.buf = holdBufs.Get().(*[]byte)
	return true
}

// hold takes p into the held bytes, writing them with p when they would
// pass holdLimit. It is Write on an armed connection.
func (c *Conn) hold(p []byte) (int, error) {
	co := &c.co
	co.mu.Lock()
	defer co.mu.Unlock()
	if !co.armed {
		if co.err != nil {
			return 0, co.err
		}
		return c.write(p)
	}
	b := *co.buf
	if len(b)+len(p) <= holdLimit {
		*co.buf = append(b, p...)
		return len(p), nil
	}
	bufs := net.Buffers{b, p}
	n, err := bufs.WriteTo(c.Conn)
	c.wrote(n)
	*co.buf = b[:0]
	if err != nil {
		c.failHeld(err)
		return max(0, int(n)-len(b)), err
	}
	return len(p), nil
}

// release writes out the held bytes and disarms the connection; it is a
// no-op on one that is not armed.
func (c *Conn) release() {
	if !c.armed.Load() {
		return
	}
	co := &c.co
	co.mu.Lock()
	defer co.mu.Unlock()
	if !co.armed {
		return
	}
	b := *co.buf
	var err error
	if len(b) > 0 {
		var n int
		n, err = c.Conn.Write(b)
		c.wrote(int64(n))
	}
	co.armed = false
	c.armed.Store(false)
	*co.buf = b[:0]
	if cap(b) <= holdLimit*2 {
		holdBufs.Put(co.buf)
	}
	co.buf = nil
	if err != nil {
		c.failHeld(err)
	}
}

// failHeld records a failed write of held bytes and closes the
// connection (the underlying one: net/http closes the Conn itself when
// its next read fails, which gives the slot back). Called with co.mu held.
func (c *Conn) failHeld(err error) {
	c.co.err = err
	c.Conn.Close()
}

// wrote counts n bytes written: what the connection owes is paid back.
func (c *Conn) wrote(n int64) {
	if n > 0 && c.owed.Load() > 0 {
		c.repay(n)
	}
}

// write writes p on the underlying connection.
func (c *Conn) write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.wrote(int64(n))
	return n, err
}

// The calls after which net/http writes nothing more of a response write
// out what is held first.

func (c *Conn) SetDeadline(t time.Time) error {
	c.release()
	return c.Conn.SetDeadline(t)
}

func (c *Conn) SetReadDeadline(t time.Time) error {
	c.release()
	return c.Conn.SetReadDeadline(t)
}

func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.release()
	return c.Conn.SetWriteDeadline(t)
}
