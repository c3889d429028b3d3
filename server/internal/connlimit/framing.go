package connlimit

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync/atomic"
)

// framing follows the HTTP/1.1 requests of a REST connection as their
// bytes are read, to find a request head with both Content-Length and
// Transfer-Encoding. net/http accepts one (it drops the Content-Length and
// reads the body chunked, as RFC 9112 section 6.3 says a recipient must),
// but the RFC adds that such a message "ought to be handled as an error"
// (section 6.1): a proxy in front that trusts the other header would see
// a different request boundary, which is how requests are smuggled. And
// net/http removes both headers before a handler sees the request, so the
// check has to be made on the bytes: the connection is marked
// (Smuggling), and the REST front end refuses its requests with 400 and
// closes it.
//
// It frames requests as net/http does: a head ends at an empty line
// (lines end in LF, with or without CR); the body is chunked when an
// HTTP/1.1 head has Transfer-Encoding, else Content-Length bytes, else
// empty; a chunk is a hex size line, the data and CRLF, the last one of
// size 0 followed by trailer lines and an empty line. At anything it
// cannot follow (a head over maxHeaderBytes, a size it cannot read) it
// stops following the connection without marking it: net/http refuses
// such requests itself. A folded header line, which net/http joins to
// the line before, marks the connection as a conflict does.
type framing struct {
	state    int
	head     []byte // the head read so far
	left     int64  // bytes left in a body or a chunk
	off      bool   // stopped following
	conflict atomic.Bool
}

const (
	frameHead = iota
	frameBody
	frameChunkSize
	frameChunkData
	frameChunkEnd
	frameTrailer
)

// maxHeadBytes is the longest head framing follows (net/http refuses
// longer ones with the server's MaxHeaderBytes, 64 KiB in serve).
const maxHeadBytes = 1 << 20

// read follows the bytes b, the next read from the connection.
func (f *framing) read(b []byte) {
	for len(b) > 0 && !f.off {
		switch f.state {
		case frameBody, frameChunkData:
			n := min(int64(len(b)), f.left)
			b, f.left = b[n:], f.left-n
			if f.left == 0 {
				if f.state == frameBody {
					f.state = frameHead
				} else {
					f.state = frameChunkEnd
				}
			}
		case frameChunkEnd:
			// CRLF after the data, byte by byte across reads.
			f.head = append(f.head, b[0])
			b = b[1:]
			if len(f.head) == 2 {
				if string(f.head) != "\r\n" {
					f.off = true
				}
				f.head, f.state = f.head[:0], frameChunkSize
			}
		default: // lines: a head, a chunk size, a trailer
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				f.head = append(f.head, b...)
				if len(f.head) > maxHeadBytes {
					f.off = true
				}
				return
			}
			f.head = append(f.head, b[:i+1]...)
			b = b[i+1:]
			f.line()
		}
	}
}

// line takes the complete line at the end of f.head.
func (f *framing) line() {
	switch f.state {
	case frameChunkSize:
		line := bytes.TrimRight(f.head, "\r\n \t")
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = bytes.TrimRight(line[:i], " \t")
		}
		f.head = f.head[:0]
		n, err := strconv.ParseUint(string(line), 16, 62)
		switch {
		case err != nil:
			f.off = true
		case n == 0:
			f.state = frameTrailer
		default:
			f.state, f.left = frameChunkData, int64(n)
		}
	case frameTrailer:
		if blank(f.head) {
			f.state = frameHead
		}
		f.head = f.head[:0]
	default: // frameHead
		if n := len(f.head); n >= 2 && blank(f.head[bytes.LastIndexByte(f.head[:n-1], '\n')+1:]) {
			f.endHead()
		}
	}
}

// blank reports whether line (ending in LF) is empty.
func blank(line []byte) bool { return len(bytes.TrimRight(line, "\r\n")) == 0 }

// endHead takes a complete head: it notes a conflict and starts its body.
func (f *framing) endHead() {
	lines := bytes.Split(bytes.TrimRight(f.head, "\r\n"), []byte{'\n'})
	f.head = f.head[:0]
	http11 := bytes.HasSuffix(bytes.TrimRight(lines[0], "\r"), []byte("HTTP/1.1"))
	var length int64
	var hasLength, hasEncoding bool
	for _, l := range lines[1:] {
		l = bytes.TrimRight(l, "\r")
		if len(l) > 0 && (l[0] == ' ' || l[0] == '\t') {
			// A folded line (obsolete line folding), which net/http
			// joins to the line before: a proxy may read it otherwise,
			// and RFC 9112 section 5.2 lets a server refuse it. Marked,
			// and not followed further.
			f.conflict.Store(true)
			f.off = true
			return
		}
		name, value, ok := bytes.Cut(l, []byte{':'})
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
			if err != nil || n < 0 {
				f.off = true
				return
			}
			length, hasLength = n, true
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			hasEncoding = true
		}
	}
	if hasLength && hasEncoding {
		f.conflict.Store(true)
	}
	switch {
	case hasEncoding && http11:
		f.state = frameChunkSize
	case length > 0:
		f.state, f.left = frameBody, length
	}
}

type connKey struct{}

// ConnContext puts a REST connection in its requests' contexts, for the
// checks made on its bytes (Smuggling): set it as the http.Server's
// ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*Conn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// Smuggling reports whether the connection of a request with context ctx
// sent a request head with both Content-Length and Transfer-Encoding.
func Smuggling(ctx context.Context) bool {
	lc, ok := ctx.Value(connKey{}).(*Conn)
	return ok && lc.framing != nil && lc.framing.conflict.Load()
}
