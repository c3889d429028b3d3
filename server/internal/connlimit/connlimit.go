// Package connlimit bounds and follows the server's open connections:
// one cap over the REST and gRPC listeners together, idle connections
// closed to make room, and what is learnt from a connection's bytes as
// they are read (an HTTP/1.1 request head that could be smuggled, the
// sizes gRPC messages announce before grpc-go reads them). It knows
// connections, bytes and the memory budget (package limits), not
// requests: package server wraps its listeners in a Set and asks a Conn
// what it knows when it admits a gRPC call or reads its message.
package connlimit

import (
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rnnserve/server/internal/limits"
)

// Connections: every listener wrapped by Set.Listener counts its
// connections against one cap (the server's max_connections), REST and
// gRPC together, and no protocol may hold more than three quarters of
// it, so idle connections of one cannot lock the other out. At its
// limit, Accept closes the connection of that protocol (or, when the cap
// in all is reached, of either) that has been idle longest, if it has
// been idle for at least minIdleToClose (a REST keep-alive connection
// between requests, a gRPC connection without calls, or one that has
// sent nothing yet), to make room, as nginx reuses its idle keep-alive
// connections; with none idle that long it waits for a connection to
// close or to have been idle long enough, and new clients wait in the
// kernel's accept queue (their connect completes there; their requests
// are read once a slot frees). golang.org/x/net/netutil.LimitListener
// caps one listener and waits; this cap spans listeners, makes room, and
// feeds the rnnserve_open_connections gauge.
//
// A per-address cap is not kept: behind a load balancer or a NAT every
// client has the balancer's few addresses, and a cap on them would lock
// everyone out together.

// Protocol is what a listener serves.
type Protocol int

const (
	REST Protocol = iota // HTTP/1.1 (and h2c) requests, read by net/http
	GRPC                 // HTTP/2 gRPC calls, read by grpc-go
)

// minIdleToClose is how long a connection must have been idle before it
// may be closed to make room: a client between two requests in a row
// keeps its connection, and does not meet the close (HTTP/1.1 cannot warn
// it).
const minIdleToClose = time.Second

// Set is the server's open connections.
type Set struct {
	cap   int // in all
	share int // the most one protocol may hold

	budget     *limits.Budget     // what responses handed to a connection are charged to (Conn.Owe)
	open       prometheus.Gauge   // connections open
	closedIdle prometheus.Counter // idle connections closed to make room

	mu     sync.Mutex
	total  int
	counts [2]int             // open, by protocol
	conns  map[*Conn]struct{} // open, for the choice of an idle one to close
	byAddr map[string]*Conn   // by remote and local address (addrKey), for a gRPC call's connection
	freed  chan struct{}      // closed and replaced when a slot frees
}

// New makes a set of at most n connections (n >= 1). A response handed
// to a connection (Conn.Owe) is given back to budget as it is written;
// open follows the connections open and closedIdle counts those closed to
// make room.
func New(n int, budget *limits.Budget, open prometheus.Gauge, closedIdle prometheus.Counter) *Set {
	return &Set{cap: n, share: max(1, n-n/4), budget: budget, open: open, closedIdle: closedIdle,
		conns: map[*Conn]struct{}{}, byAddr: map[string]*Conn{}, freed: make(chan struct{})}
}

// Listener wraps ln, a listener of protocol p, so that its connections
// count against the set's cap and are Conns. Set a REST listener's
// http.Server's ConnState to ConnState, so that idle connections are
// known, and its ConnContext to ConnContext, for Smuggling.
func (cs *Set) Listener(ln net.Listener, p Protocol) net.Listener {
	return &listener{Listener: ln, s: cs, protocol: p, done: make(chan struct{})}
}

type listener struct {
	net.Listener
	s         *Set
	protocol  Protocol
	done      chan struct{}
	closeOnce sync.Once
}

// Accept accepts the next connection and takes a slot for it, making
// room or waiting (see Set); while it waits, the connection is open
// but not read, and further clients wait in the kernel's accept queue.
func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cs := l.s
	for {
		cs.mu.Lock()
		if cs.total < cs.cap && cs.counts[l.protocol] < cs.share {
			cs.total++
			cs.counts[l.protocol]++
			cs.mu.Unlock()
			break
		}
		victim, next := cs.idlest(l.protocol, time.Now())
		freed := cs.freed
		cs.mu.Unlock()
		if victim != nil {
			cs.closedIdle.Inc()
			victim.Close()
			continue
		}
		if next <= 0 {
			next = time.Hour // nothing idle: wait for a close
		}
		t := time.NewTimer(next)
		select {
		case <-freed:
		case <-t.C:
		case <-l.done:
			t.Stop()
			c.Close()
			return nil, net.ErrClosed
		}
		t.Stop()
	}
	lc := &Conn{Conn: c, s: cs, protocol: l.protocol, addr: addrKey(c.RemoteAddr(), c.LocalAddr())}
	if l.protocol == REST {
		lc.framing = &framing{}
	} else {
		lc.reads = make(chan struct{}, ReadsPerConn)
		lc.frames = newH2Frames()
	}
	lc.idleSince.Store(time.Now().UnixNano())
	lc.maxMessage.Store(-1)
	cs.mu.Lock()
	cs.conns[lc] = struct{}{}
	cs.byAddr[lc.addr] = lc
	cs.mu.Unlock()
	cs.open.Inc()
	return lc, nil
}

// idlest is the open connection idle longest, for at least
// minIdleToClose, whose closing makes room for a connection of protocol:
// one of the same protocol when that protocol holds its share, else one
// of any protocol. Without one, next is how long until the one idle
// longest will have been idle long enough (0: none is idle). cs.mu is
// held.
func (cs *Set) idlest(protocol Protocol, now time.Time) (victim *Conn, next time.Duration) {
	own := cs.counts[protocol] >= cs.share
	var since int64
	for c := range cs.conns {
		if own && c.protocol != protocol || c.closing.Load() {
			continue
		}
		if t := c.idleSince.Load(); t != 0 && (victim == nil || t < since) {
			victim, since = c, t
		}
	}
	if victim == nil {
		return nil, 0
	}
	if wait := time.Unix(0, since).Add(minIdleToClose).Sub(now); wait > 0 {
		return nil, wait
	}
	victim.closing.Store(true)
	return victim, 0
}

// release frees a slot of protocol; cs.mu is held.
func (cs *Set) release(protocol Protocol) {
	cs.total--
	cs.counts[protocol]--
	close(cs.freed)
	cs.freed = make(chan struct{})
}

// Open is the number of open connections of protocol p.
func (cs *Set) Open(p Protocol) int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.counts[p]
}

// Of is the open connection from remote address addr to local address
// local (a gRPC call's peer), or nil.
func (cs *Set) Of(addr, local net.Addr) *Conn {
	if addr == nil || local == nil {
		return nil
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.byAddr[addrKey(addr, local)]
}

// addrKey names a connection by both its ends: a client may use one port
// for connections to the REST and the gRPC port at once (TCP needs only
// the four together to differ), so the remote address alone may name
// another connection.
func addrKey(remote, local net.Addr) string {
	return remote.String() + " " + local.String()
}

func (l *listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// Conn is one open connection: it gives its slot back when closed, and
// keeps what the server knows of it. A gRPC call's state asks its Conn
// (Set.Of); the methods of a nil *Conn answer as for a connection the
// server knows nothing of (a listener it did not wrap).
type Conn struct {
	net.Conn
	s        *Set
	protocol Protocol
	addr     string
	once     sync.Once
	closing  atomic.Bool  // chosen to be closed to make room
	state    atomic.Int32 // a REST connection's http.ConnState

	// idleSince is when the connection last had nothing in flight (unix
	// nanoseconds), 0 while it has something.
	idleSince atomic.Int64
	// received counts the bytes read from it: the progress of a gRPC
	// message, which grpc-go reads out of the server's sight.
	received atomic.Int64
	// calls is its gRPC calls open; maxMessage the largest gRPC message
	// it has sent (-1: none yet), and distrusted is set once a message of
	// its stalled: see Trusted.
	calls      atomic.Int32
	maxMessage atomic.Int64
	distrusted atomic.Bool
	reads      chan struct{} // a gRPC connection's messages being read (ReadsPerConn)
	// owed is budget bytes of responses handed to grpc-go and not yet
	// written (Owe); shut is set once the connection is closed.
	owed atomic.Int64
	shut atomic.Bool
	// repaid counts the owed bytes written; owing is when the current
	// stretch of owing began (unix nanoseconds, 0: owes nothing) and
	// repaidAt what repaid was then (CloseStalled).
	repaid   atomic.Int64
	owing    atomic.Int64
	repaidAt atomic.Int64
	// framing follows a REST connection's requests (framing.go), frames
	// a gRPC connection's messages (h2frames.go).
	framing *framing
	frames  *h2frames
	// co holds a REST response's writes while armed (Coalesce).
	co    coalescer
	armed atomic.Bool
}

// Write writes p and gives back to the budget as much as it wrote of
// what the connection owes (Owe).
func (c *Conn) Write(p []byte) (int, error) {
	if c.armed.Load() {
		return c.hold(p)
	}
	return c.write(p)
}

// Owe charges the connection n bytes of the budget that are already
// taken (a response handed to grpc-go), to be given back as it writes.
func (c *Conn) Owe(n int64) {
	if c == nil || n <= 0 {
		return
	}
	c.owed.Add(n)
	if c.shut.Load() {
		c.repay(math.MaxInt64)
	}
}

// repay gives back up to n bytes of what the connection owes.
func (c *Conn) repay(n int64) {
	for {
		o := c.owed.Load()
		r := min(o, n)
		if r <= 0 {
			return
		}
		if c.owed.CompareAndSwap(o, o-r) {
			c.repaid.Add(r)
			c.s.budget.Release(r)
			return
		}
	}
}

func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.received.Add(int64(n))
	if c.framing != nil {
		c.framing.read(p[:n])
	}
	if c.frames != nil {
		c.frames.read(p[:n])
	}
	return n, err
}

// busy marks the connection as having something in flight (true) or
// nothing (false).
func (c *Conn) busy(b bool) {
	if b {
		c.idleSince.Store(0)
	} else {
		c.idleSince.Store(time.Now().UnixNano())
	}
}

func (c *Conn) Close() error {
	c.release()
	err := c.Conn.Close()
	c.shut.Store(true)
	c.repay(math.MaxInt64)
	c.once.Do(func() {
		cs := c.s
		cs.mu.Lock()
		delete(cs.conns, c)
		if cs.byAddr[c.addr] == c {
			delete(cs.byAddr, c.addr)
		}
		cs.release(c.protocol)
		cs.mu.Unlock()
		cs.open.Dec()
	})
	return err
}

// CloseIdle closes the REST connections that are idle between requests,
// once the REST listener has closed, before the http.Server's Shutdown
// (which would close them too, whether or not a request is arriving on
// one): a connection on which a request has arrived unread is left to be
// served (with Connection: close, in the lame-duck period), so a request
// a client wrote in full is answered, not reset.
func (cs *Set) CloseIdle() {
	cs.mu.Lock()
	var idle []*Conn
	for c := range cs.conns {
		if c.protocol == REST && c.idleSince.Load() != 0 && c.state.Load() != int32(http.StateNew) {
			idle = append(idle, c)
		}
	}
	cs.mu.Unlock()
	for _, c := range idle {
		if !pending(c.Conn) {
			c.Close()
		}
	}
}

// StallBytes is the least a connection that owes responses must write of
// them in each stretch CloseStalled checks (all it owes, if less).
const StallBytes = 64 << 10

// CloseStalled closes every connection that has owed responses (Owe) for
// stall or longer and written less than StallBytes of them in that time:
// a gRPC client that reads its frames and answers the keepalive pings
// but opens no flow-control window would hold its responses, and the
// calls blocked sending them, for ever. A connection that repays enough
// starts a new stretch. It returns how many it closed.
func (cs *Set) CloseStalled(stall time.Duration) int {
	now := time.Now().UnixNano()
	cs.mu.Lock()
	var stalled []*Conn
	for c := range cs.conns {
		owed := c.owed.Load()
		since := c.owing.Load()
		switch {
		case owed <= 0:
			c.owing.Store(0)
		case since == 0:
			c.owing.Store(now)
			c.repaidAt.Store(c.repaid.Load())
		case now-since >= int64(stall):
			if c.repaid.Load()-c.repaidAt.Load() < min(owed, StallBytes) {
				stalled = append(stalled, c)
				continue
			}
			c.owing.Store(now)
			c.repaidAt.Store(c.repaid.Load())
		}
	}
	cs.mu.Unlock()
	for _, c := range stalled {
		c.Close()
	}
	return len(stalled)
}

// ConnState follows a REST connection's state for the choice of an idle
// connection to close (Set): set it as the http.Server's ConnState.
func ConnState(c net.Conn, st http.ConnState) {
	lc, ok := c.(*Conn)
	if !ok {
		return
	}
	lc.state.Store(int32(st))
	if st != http.StateActive {
		lc.release()
	}
	switch st {
	case http.StateActive:
		lc.busy(true)
	case http.StateIdle:
		lc.busy(false)
	}
}
