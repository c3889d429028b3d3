package server

import (
	"context"
	"net"
	"net/http"

	"rnnserve/server/internal/connlimit"
)

// The cap on open connections is package connlimit's: one Set over the
// REST and gRPC listeners (Options.MaxConnections), idle connections
// closed to make room, and what a connection's bytes tell (a request head
// that could be smuggled, the sizes gRPC messages announce). These are
// the Server's handles on it for its owner's listeners and http.Servers.

// Listener wraps the REST listener ln so that its connections count
// against the server's cap on open connections (Options.MaxConnections).
// Set the http.Server's ConnState to Server.ConnState, so that idle
// connections are known, and its ConnContext to Server.ConnContext.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return s.conns.Listener(ln, connlimit.REST)
}

// GRPCListener wraps the gRPC listener ln alike.
func (s *Server) GRPCListener(ln net.Listener) net.Listener {
	return s.conns.Listener(ln, connlimit.GRPC)
}

// maxManagementConns caps the management listener's connections apart
// from max_connections, so that a flood on the public ports cannot lock
// operators out, nor the management port take the public ports' slots.
const maxManagementConns = 64

// ManagementListener wraps the management listener ln as Listener does
// the REST one, against a cap of its own (maxManagementConns, three
// quarters of which a protocol may hold).
func (s *Server) ManagementListener(ln net.Listener) net.Listener {
	return s.mgmtConns.Listener(ln, connlimit.REST)
}

// ConnState follows a REST connection's state for the choice of an idle
// connection to close: set it as the http.Server's ConnState.
func (s *Server) ConnState(c net.Conn, st http.ConnState) { connlimit.ConnState(c, st) }

// ConnContext puts a REST connection in its requests' contexts, for the
// checks made on its bytes: set it as the http.Server's ConnContext.
func (s *Server) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return connlimit.ConnContext(ctx, c)
}

// CloseIdle closes the REST connections that are idle between requests,
// once the REST listener has closed, before the http.Server's Shutdown
// (which would close them too, whether or not a request is arriving on
// one): a connection on which a request has arrived unread is left to be
// served (with Connection: close, in the lame-duck period), so a request
// a client wrote in full is answered, not reset.
func (s *Server) CloseIdle() {
	s.conns.CloseIdle()
	s.mgmtConns.CloseIdle()
}
