package server

import (
	"net"
	"sync"
)

// Listener wraps ln so that its connections count against the server's cap
// on open connections (Options.MaxConnections), one cap shared by every
// listener wrapped (REST and gRPC): at the cap, Accept waits for a
// connection to close, and new clients wait in the kernel's accept queue
// (their connect completes there; their requests are read once a slot
// frees). golang.org/x/net/netutil.LimitListener caps one listener; this
// cap spans listeners and feeds the rnnserve_open_connections gauge.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, s: s, done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	s         *Server
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.s.conns <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.s.conns
		return nil, err
	}
	l.s.metrics.connections.Inc()
	return &limitConn{Conn: c, s: l.s}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back when closed.
type limitConn struct {
	net.Conn
	s    *Server
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		<-c.s.conns
		c.s.metrics.connections.Dec()
	})
	return err
}
