package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"rnnserve/server/internal/infer"
)

// Shutdown in steps, for the owner (cmd/serve) to drive:
//
//  1. LameDuck: readiness answers 503 at once (REST /v2/health/ready and
//     the models' ready, gRPC ServerReady and the health service), so load
//     balancers stop sending; every request is still served, and every
//     REST response carries Connection: close, so keep-alive clients
//     reconnect, to another replica once the balancer has taken this one
//     out.
//  2. The owner stops its listeners and waits for the connections to
//     finish (http.Server.Shutdown, grpc.Server.GracefulStop) for at most
//     its drain timeout.
//  3. If the timeout expires, Cut ends every request still in flight with
//     ErrCut: a streamed generation ends with a final error line (an SSE
//     error event, an NDJSON line with "error"), anything else answers
//     503; Cut returns what it cut for the owner's log, and Idle waits for
//     the handlers to write their last bytes.
//  4. Stop ends the batchers.

// ErrCut ends a request the drain timeout cut short. It wraps ErrDraining
// (503).
var ErrCut = fmt.Errorf("%w: the request was cut short by the drain timeout", ErrDraining)

// LameDuck starts the lame-duck period: readiness fails from now on and
// REST responses close their connections, while requests are still
// served. Stop (or the end of the process) ends it.
func (s *Server) LameDuck() {
	s.lameDuck.Store(true)
	s.ready.Store(false)
	s.mu.Lock()
	hooks := s.lameDuckHooks
	s.mu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// endStreams tells the open gRPC streams to end once they have answered
// what they were sent (the drain has begun).
func (s *Server) endStreams() {
	s.streamsEndOnce.Do(func() { close(s.streamsEnd) })
}

// onLameDuck registers f to run when LameDuck is called (a front end's
// own readiness, such as gRPC's health service).
func (s *Server) onLameDuck(f func()) {
	s.mu.Lock()
	s.lameDuckHooks = append(s.lameDuckHooks, f)
	s.mu.Unlock()
}

// InLameDuck reports whether LameDuck was called.
func (s *Server) InLameDuck() bool { return s.lameDuck.Load() }

// inflight are the requests being served, for Cut and Idle.
type inflight struct {
	mu   sync.Mutex
	reqs map[*tracked]struct{}
}

// tracked is one request in flight.
type tracked struct {
	what   string // model, endpoint and protocol, for the log
	start  time.Time
	cancel context.CancelCauseFunc
}

// track counts a request in until the returned func is called; its
// context ends with ErrCut when Cut is called.
func (s *Server) track(ctx context.Context, model, endpoint, protocol string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	t := &tracked{what: fmt.Sprintf("%s %s (%s)", endpoint, infer.Clip(model), protocol), start: time.Now(), cancel: cancel}
	f := &s.inflight
	f.mu.Lock()
	if f.reqs == nil {
		f.reqs = map[*tracked]struct{}{}
	}
	f.reqs[t] = struct{}{}
	f.mu.Unlock()
	return ctx, func() {
		f.mu.Lock()
		delete(f.reqs, t)
		f.mu.Unlock()
		cancel(nil)
	}
}

// Cut ends every request in flight with ErrCut and returns a description
// of each (endpoint, model, protocol, age), oldest first.
func (s *Server) Cut() []string {
	f := &s.inflight
	f.mu.Lock()
	reqs := make([]*tracked, 0, len(f.reqs))
	for t := range f.reqs {
		reqs = append(reqs, t)
	}
	f.mu.Unlock()
	slices.SortFunc(reqs, func(a, b *tracked) int { return a.start.Compare(b.start) })
	var cut []string
	for _, t := range reqs {
		t.cancel(ErrCut)
		cut = append(cut, fmt.Sprintf("%s after %v", t.what, time.Since(t.start).Round(time.Millisecond)))
	}
	return cut
}

// InFlight is the number of requests being served.
func (s *Server) InFlight() int {
	f := &s.inflight
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

// Idle waits until no request is in flight, or ctx ends.
func (s *Server) Idle(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for s.InFlight() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("server: %d requests still in flight: %w", s.InFlight(), ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
