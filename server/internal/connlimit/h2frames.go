package connlimit

import (
	"encoding/binary"
	"sync/atomic"

	"rnnserve/server/internal/limits"
)

// h2frames follows a gRPC connection's HTTP/2 frames as their bytes are
// read, to learn the size of each message from its 5-byte prefix before
// grpc-go reads the message. grpc-go offers no hook between reading a
// prefix and reading the message, and does not say which HTTP/2 stream a
// call is, so what is learnt is the connection's: the largest message it
// has announced, and whether every call it has open has announced its
// message. A connection whose calls have all announced small messages
// (limits.SmallRequest or less, uncompressed) is a small client before the
// server has read any of its messages (Conn.Trusted): a new
// connection's first small call no longer queues behind a flood of
// unknown-size reads. It decides only the order of waiting and the use
// of the budget's share for small requests; a read is still charged the
// most a message can be.
//
// It follows what RFC 9113 section 4 frames: a 9-byte head (length, type,
// flags, stream), DATA payloads (less their padding) carrying each
// stream's messages, each a flag byte, a 4-byte big-endian length and
// the bytes; a stream opens with its first HEADERS frame and closes with
// END_STREAM or RST_STREAM. It runs on grpc-go's reading goroutine alone
// (Conn.Read); what it has learnt is read through atomics. It
// follows at most h2MaxStreams streams at once and stops (learning
// nothing more, so trusting nothing) past that or at anything it cannot
// follow.
type h2frames struct {
	preface int // bytes of the client preface still to skip
	head    [9]byte
	have    int    // bytes of head read
	left    uint32 // payload bytes of the current frame still to come
	typ     byte
	flags   byte
	stream  uint32
	pad     int  // padding bytes at the end of the current DATA frame
	padRead bool // the current DATA frame's pad length is read (or none)
	cur     *h2stream
	streams map[uint32]*h2stream

	// announced is the largest message announced so far (-1: none; a
	// compressed one counts as h2Unknown); pending counts the open
	// streams whose current message has not announced its size; off is
	// set once it stopped following.
	announced atomic.Int64
	pending   atomic.Int32
	off       atomic.Bool
}

// h2stream is a stream's message framing: the prefix read so far, then
// the bytes left of its message; pending while its next message has not
// announced its size (a new stream, a prefix begun).
type h2stream struct {
	prefix  [5]byte
	have    int
	left    uint32
	pending bool
}

// h2MaxStreams is the most streams followed at once: past it (a client
// that opens streams the server refuses and never ends them) the
// connection is no longer followed.
const h2MaxStreams = 1024

// h2Unknown is the size recorded for a message whose size the prefix does
// not tell (compressed: it may inflate to the limit).
const h2Unknown = 1 << 62

// HTTP/2 frame types and flags followed (RFC 9113 section 6).
const (
	h2Data      = 0x0
	h2Headers   = 0x1
	h2RST       = 0x3
	h2EndStream = 0x1
	h2Padded    = 0x8
)

func newH2Frames() *h2frames {
	f := &h2frames{preface: 24, streams: map[uint32]*h2stream{}}
	f.announced.Store(-1)
	return f
}

// small reports whether every message the connection has announced is at
// most limits.SmallRequest bytes, and whether it has announced one and every
// open stream has announced its message.
func (f *h2frames) small() (small, known bool) {
	if f.off.Load() {
		return false, false
	}
	a := f.announced.Load()
	return a <= limits.SmallRequest, a >= 0 && f.pending.Load() == 0
}

// read follows b, the next bytes read from the connection.
func (f *h2frames) read(b []byte) {
	for len(b) > 0 && !f.off.Load() {
		if f.preface > 0 {
			n := min(f.preface, len(b))
			f.preface -= n
			b = b[n:]
			continue
		}
		if f.have < len(f.head) {
			n := copy(f.head[f.have:], b)
			f.have += n
			b = b[n:]
			if f.have == len(f.head) {
				f.begin()
			}
			continue
		}
		if f.typ == h2Data && !f.padRead {
			f.padRead = true
			f.pad = int(b[0])
			b = b[1:]
			f.left--
			if uint32(f.pad) > f.left {
				f.stop() // a protocol error: grpc-go closes the connection
				return
			}
			continue
		}
		n := min(uint32(len(b)), f.left)
		if f.typ == h2Data && f.cur != nil {
			if data := int(f.left) - f.pad; data > 0 {
				f.message(b[:min(int(n), data)])
			}
		}
		b = b[n:]
		f.left -= n
		if f.left == 0 {
			f.end()
		}
	}
}

// begin starts a frame whose head is read.
func (f *h2frames) begin() {
	h := f.head[:]
	f.left = uint32(h[0])<<16 | uint32(h[1])<<8 | uint32(h[2])
	f.typ, f.flags = h[3], h[4]
	f.stream = binary.BigEndian.Uint32(h[5:9]) & (1<<31 - 1)
	f.pad, f.padRead, f.cur = 0, f.flags&h2Padded == 0, nil
	switch f.typ {
	case h2Headers:
		if _, ok := f.streams[f.stream]; !ok && f.stream != 0 {
			if len(f.streams) >= h2MaxStreams {
				f.stop()
				return
			}
			st := &h2stream{}
			f.streams[f.stream] = st
			f.setPending(st, true)
		}
	case h2Data:
		f.cur = f.streams[f.stream]
	default:
		f.padRead = true
	}
	if f.left == 0 {
		f.end()
	}
}

// end finishes the current frame.
func (f *h2frames) end() {
	f.have = 0
	closes := f.typ == h2RST || (f.typ == h2Headers || f.typ == h2Data) && f.flags&h2EndStream != 0
	if st, ok := f.streams[f.stream]; ok && closes {
		f.setPending(st, false)
		delete(f.streams, f.stream)
	}
}

func (f *h2frames) setPending(st *h2stream, p bool) {
	if st.pending != p {
		st.pending = p
		if p {
			f.pending.Add(1)
		} else {
			f.pending.Add(-1)
		}
	}
}

// message follows data, DATA payload bytes of the current stream.
func (f *h2frames) message(data []byte) {
	st := f.cur
	for len(data) > 0 {
		if st.left > 0 {
			n := min(uint32(len(data)), st.left)
			st.left -= n
			data = data[n:]
			continue
		}
		if st.have == 0 {
			f.setPending(st, true)
		}
		n := copy(st.prefix[st.have:], data)
		st.have += n
		data = data[n:]
		if st.have < len(st.prefix) {
			continue
		}
		length := binary.BigEndian.Uint32(st.prefix[1:])
		size := int64(length)
		if st.prefix[0] != 0 {
			size = h2Unknown
		}
		for {
			a := f.announced.Load()
			if size <= a || f.announced.CompareAndSwap(a, size) {
				break
			}
		}
		f.setPending(st, false)
		st.have, st.left = 0, length
	}
}

// stop stops following the connection.
func (f *h2frames) stop() {
	f.off.Store(true)
	f.streams = nil
	f.cur = nil
}
