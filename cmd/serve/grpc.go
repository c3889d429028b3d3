package main

import (
	"context"
	"net"

	"google.golang.org/grpc"

	"rnnserve/server"
)

// grpcFront is the gRPC listener beside the HTTP one. A nil *grpcFront
// (gRPC turned off) does nothing.
type grpcFront struct {
	gs *server.GRPCServer
	ln net.Listener
}

// grpcOff reports whether a -grpc address turns gRPC off.
func grpcOff(addr string) bool { return addr == "" || addr == "off" }

// listenGRPC listens on addr for srv's gRPC front end, built with opts;
// nil when addr turns gRPC off.
func listenGRPC(addr string, srv *server.Server, opts ...grpc.ServerOption) (*grpcFront, error) {
	if grpcOff(addr) {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &grpcFront{gs: srv.NewGRPC(opts...), ln: srv.GRPCListener(ln)}, nil
}

// addr is where the front end listens, "off" when it does not.
func (f *grpcFront) addr() string {
	if f == nil {
		return "off"
	}
	return f.ln.Addr().String()
}

// serve answers gRPC until stop, sending a serving failure to errc.
func (f *grpcFront) serve(errc chan<- error) {
	if f == nil {
		return
	}
	go func() {
		if err := f.gs.Serve(f.ln); err != nil {
			errc <- err
		}
	}()
}

// stop stops accepting and drains the calls in flight until ctx ends.
func (f *grpcFront) stop(ctx context.Context) error {
	if f == nil {
		return nil
	}
	return f.gs.Stop(ctx)
}

// drain stops accepting and waits for the calls in flight until ctx ends,
// leaving the connections of calls still running open (see close).
func (f *grpcFront) drain(ctx context.Context) error {
	if f == nil {
		return nil
	}
	return f.gs.Drain(ctx)
}

// close closes every connection left.
func (f *grpcFront) close() {
	if f != nil {
		f.gs.Close()
	}
}
