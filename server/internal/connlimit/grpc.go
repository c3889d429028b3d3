package connlimit

import (
	"context"
	"time"

	"rnnserve/server/internal/limits"
)

// What a gRPC connection tells of its calls. grpc-go reads a message
// whole once a handler asks for it and does not say which connection or
// HTTP/2 stream a call is on beyond its peer's addresses (Set.Of), so the
// server keeps per connection what it learns: the calls open, the bytes
// delivered (a read's progress), the largest message read and whether a
// read of its stalled, and the sizes its frames announce (h2frames.go).
// Package server's gRPC front end admits calls and orders and times their
// reads by these.

// ReadsPerConn is the most messages one gRPC connection reads at once
// (more wait their turn, ReadSlots): a connection's stalled reads cannot
// take more than this many reservations, and its progress is theirs to
// share.
const ReadsPerConn = 4

// OpenCall counts a gRPC call opened on the connection, and returns the
// calls open before it.
func (c *Conn) OpenCall() int {
	if c == nil {
		return 0
	}
	n := int(c.calls.Add(1))
	if n == 1 {
		c.busy(true)
	}
	return n - 1
}

// CloseCall counts a gRPC call of the connection ended.
func (c *Conn) CloseCall() {
	if c != nil && c.calls.Add(-1) == 0 {
		c.busy(false)
	}
}

// Calls is the gRPC calls open on the connection.
func (c *Conn) Calls() int {
	if c == nil {
		return 0
	}
	return int(c.calls.Load())
}

// ReadSlots is a gRPC connection's messages being read: a read sends to
// it before it starts and receives once done. Nil (no bound) for a REST
// connection and a nil Conn.
func (c *Conn) ReadSlots() chan struct{} {
	if c == nil {
		return nil
	}
	return c.reads
}

// Received is the bytes read from the connection so far: the progress of
// a gRPC message, which grpc-go reads out of the server's sight.
func (c *Conn) Received() int64 {
	if c == nil {
		return 0
	}
	return c.received.Load()
}

// Trusted reports whether the connection has sent only small messages
// (limits.SmallRequest bytes or less), at least one, and none of them
// stalled; or, before the server has read any, whether every call it has
// open has announced a small message (h2frames.go). A connection that
// has announced a large message is not trusted before grpc-go reads it.
func (c *Conn) Trusted() bool {
	if c == nil || c.distrusted.Load() {
		return false
	}
	m := c.maxMessage.Load()
	if m > limits.SmallRequest {
		return false
	}
	if f := c.frames; f != nil {
		small, known := f.small()
		if !small {
			return false
		}
		if m < 0 {
			return known
		}
	}
	return m >= 0
}

// AnnouncedSmall reports whether every call open on the connection has
// announced its message and each is small: grpc-go reads exactly what a
// message's prefix announces, so the next message read is small, and its
// read needs no more than a small message's reservation.
func (c *Conn) AnnouncedSmall() bool {
	if c == nil || c.frames == nil {
		return false
	}
	small, known := c.frames.small()
	return small && known
}

// AwaitAnnouncement waits, for at most announceWait, for the prefix of a
// message on a connection that has announced only small messages so far
// but has a call whose message has not announced itself: a client may
// send a call's headers and its message in separate writes, and the
// handler may start between them. A connection that has announced a large
// message, or whose calls have all announced theirs, does not wait.
func (c *Conn) AwaitAnnouncement(ctx context.Context) {
	if c == nil || c.frames == nil {
		return
	}
	for deadline := time.Now().Add(announceWait); ; {
		if small, known := c.frames.small(); !small || known || !time.Now().Before(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(announcePoll)
	}
}

// announceWait is the longest a read waits for its message's prefix
// (AwaitAnnouncement), polling every announcePoll.
const (
	announceWait = 50 * time.Millisecond
	announcePoll = 2 * time.Millisecond
)

// SawMessage records a gRPC message of n bytes read from the connection.
func (c *Conn) SawMessage(n int64) {
	if c == nil {
		return
	}
	for {
		m := c.maxMessage.Load()
		if n <= m || c.maxMessage.CompareAndSwap(m, n) {
			return
		}
	}
}

// Distrust takes the connection out of the small clients for good: a
// read of its fell under the minimum rate or past its timeout.
func (c *Conn) Distrust() {
	if c != nil {
		c.distrusted.Store(true)
	}
}
