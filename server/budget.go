package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The memory budget: one server-wide bound on the request bytes in flight,
// whatever the protocol. A REST body is charged as its bytes arrive, a
// step (budgetChunk) ahead of the reader, never on the word of its
// Content-Length; a compressed body's inflated bytes are charged beside
// its wire bytes, with the inflater's own state. A gRPC message is
// charged before the transport reads it (grpc.go). Decoded tensors and
// the response a request asks for are charged beside its bytes. A request
// keeps its share until its response is written. A request that finds
// too little room waits at most BudgetOptions.Wait and is then refused
// with ErrOverBudget (503 with Retry-After; gRPC UNAVAILABLE with a retry
// delay).
//
// Waiters are served in tiers, first come first served within each: a
// request already holding bytes first (it has work done that a refusal
// would waste, and behind a queue of new requests it would wait until its
// own deadline), then a gRPC read on a connection whose messages have all
// been small (so a known small client is not queued behind a flood of
// unknown-size reads: grpc-go cannot tell a message's size before it
// reads it), then the rest. And the last share of the budget (budget
// reserve) is for small requests alone (at most smallRequest bytes), so
// that small requests keep being served while large ones fill the rest.
// golang.org/x/sync/semaphore has one queue only, hence this one.

// ErrOverBudget refuses a request that found no room in the memory budget
// within BudgetOptions.Wait.
var ErrOverBudget = errors.New("server busy: request bytes in flight are at the memory budget")

// budgetChunk is the step in which a streamed body takes more budget.
const budgetChunk = 64 << 10

// smallRequest is the most a small request holds: one whose every byte
// fits the budget's reserve for small requests.
const smallRequest = 64 << 10

// Waiting tiers, in the order they are served.
const (
	tierAdmitted = iota // holds bytes already
	tierTrusted         // a gRPC read on a connection whose messages have all been small
	tierNew
)

// budget is the server's memory budget: a weighted semaphore with tiers
// of waiters and a reserve for small requests.
type budget struct {
	size       int64
	smallShare int64 // the part only small requests may take
	wait       time.Duration
	gauge      prometheus.Gauge
	refused    prometheus.Counter

	mu    sync.Mutex
	used  int64
	peak  int64           // the most used since takePeak
	queue []*budgetWaiter // by tier, then arrival
}

// budgetWaiter is a request waiting for n bytes; ready is closed when
// they are its.
type budgetWaiter struct {
	n     int64
	tier  int
	small bool
	ready chan struct{}
}

// newBudget makes the budget of options o (Bytes 0: DefaultBudgetBytes,
// and never less than one body at the limit maxBody). Its reserve for
// small requests is an eighth of it, less where that would leave the
// rest room for fewer than four bodies at the limit.
func newBudget(o BudgetOptions, maxBody int64, m *metrics) *budget {
	size := o.Bytes
	if size == 0 {
		size = max(DefaultBudgetBytes, maxBody)
	}
	m.budgetSize.Set(float64(size))
	return &budget{size: size, smallShare: max(0, min(size/8, size-4*maxBody)), wait: o.Wait, gauge: m.budgetUsed, refused: m.budgetRefused}
}

// acquire takes n bytes (at most size), waiting in its tier until ctx
// ends; small says whether the request may take the reserve.
func (b *budget) acquire(ctx context.Context, n int64, tier int, small bool) error {
	w := &budgetWaiter{n: n, tier: tier, small: small, ready: make(chan struct{})}
	b.mu.Lock()
	at := len(b.queue)
	for at > 0 && b.queue[at-1].tier > tier {
		at--
	}
	b.queue = slices.Insert(b.queue, at, w)
	b.grant()
	b.mu.Unlock()
	select {
	case <-w.ready:
		b.gauge.Add(float64(n))
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready: // granted as the wait ended: keep it
		b.gauge.Add(float64(n))
		return nil
	default:
	}
	if i := slices.Index(b.queue, w); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
	}
	b.grant() // it may have blocked waiters behind it
	return ctx.Err()
}

// takePeak returns the most bytes used at once since the last call, and
// what is used now.
func (b *budget) takePeak() (peak, used int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	peak, b.peak = b.peak, b.used
	return peak, b.used
}

// release gives n bytes back.
func (b *budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.grant()
	b.mu.Unlock()
	b.gauge.Sub(float64(n))
}

// grant hands room to the waiters in queue order while they fit; b.mu is
// held. A large waiter that does not fit blocks the large ones behind it
// but not the small ones, which may use the reserve; a small one that
// does not fit blocks everyone behind it. A large waiter wanting more
// than the part for large requests gets the whole budget when it is
// empty.
func (b *budget) grant() {
	largeBlocked := false
	for i := 0; i < len(b.queue); {
		w := b.queue[i]
		limit := b.size
		if !w.small {
			if largeBlocked {
				i++
				continue
			}
			if w.n <= b.size-b.smallShare || b.used > 0 {
				limit -= b.smallShare
			}
		}
		if b.used+w.n <= limit {
			b.queue = slices.Delete(b.queue, i, i+1)
			b.used += w.n
			b.peak = max(b.peak, b.used)
			close(w.ready)
			continue
		}
		if w.small {
			return
		}
		largeBlocked = true
		i++
	}
}

// reservation is one request's share of the budget. The zero
// reservation's methods are no-ops (a request without a body).
type reservation struct {
	b        *budget
	ctx      context.Context
	held     int64
	used     int64     // what its readers have read (charged.Read)
	small    bool      // its size is known and small: it may use the reserve while it holds at most smallRequest
	trusted  bool      // waits in tierTrusted before it holds bytes, and may use the reserve whatever it takes
	deadline time.Time // the request waits for room until then
	closers  []io.Closer
}

// reserve starts a request's reservation; its waits for room end at most
// b.wait from now, or when ctx ends.
func (b *budget) reserve(ctx context.Context) *reservation {
	return &reservation{b: b, ctx: ctx, deadline: time.Now().Add(b.wait)}
}

// grow takes n more bytes, waiting for room until the deadline. A
// request known to be small stays small while everything it holds fits
// smallRequest.
func (r *reservation) grow(n int64) error {
	if r == nil || r.b == nil || n <= 0 {
		return nil
	}
	b := r.b
	if r.held+n > b.size {
		n = b.size - r.held // a body larger than the budget fails the body limit first
		if n <= 0 {
			return nil
		}
	}
	tier := tierNew
	switch {
	case r.held > 0:
		tier = tierAdmitted
	case r.trusted:
		tier = tierTrusted
	}
	ctx, cancel := context.WithDeadline(r.ctx, r.deadline)
	err := b.acquire(ctx, n, tier, r.trusted || r.small && r.held+n <= smallRequest)
	cancel()
	if err != nil {
		if r.ctx.Err() != nil {
			return context.Cause(r.ctx)
		}
		b.refused.Inc()
		return fmt.Errorf("%w (%d bytes; waited %v)", ErrOverBudget, b.size, b.wait)
	}
	r.held += n
	return nil
}

// settle gives back what the reservation holds beyond n bytes: a
// reservation taken for the most a message may be, once its size is
// known.
func (r *reservation) settle(n int64) {
	if r == nil || r.b == nil || r.held <= n {
		return
	}
	r.b.release(r.held - max(n, 0))
	r.held = max(n, 0)
}

// release gives the reservation's bytes back and closes its closers.
func (r *reservation) release() {
	if r == nil {
		return
	}
	for _, c := range r.closers {
		c.Close()
	}
	r.closers = nil
	if r.b == nil || r.held == 0 {
		return
	}
	r.b.release(r.held)
	r.held = 0
}

// charged counts the bytes read from r against a reservation: before a
// read that could take it past what it holds, it takes budgetChunk more
// (with sized, no more than the left bytes still expected), so bytes are
// charged before they are held, and a reader that sends nothing holds at
// most one step.
type charged struct {
	r     io.Reader
	res   *reservation
	sized bool  // left is known
	left  int64 // bytes still expected: a Content-Length not yet read
}

func (c *charged) Read(p []byte) (int, error) {
	res := c.res
	if res.used >= res.held {
		step := int64(budgetChunk)
		if c.sized {
			step = min(step, max(c.left, 1))
		}
		if err := res.grow(step); err != nil {
			return 0, err
		}
	}
	if room := res.held - res.used; int64(len(p)) > room && room > 0 {
		p = p[:room]
	}
	n, err := c.r.Read(p)
	res.used += int64(n)
	c.left = max(c.left-int64(n), 0)
	return n, err
}

// drainBody reads and discards what is left of a request body, up to
// limit bytes, so that an error answered before the body was read (a full
// budget, malformed JSON early in a large body) reaches a client still
// sending it, on a connection that stays open, instead of a reset. A body
// over limit is left: the server closes that connection after answering.
// The http.Server's ReadTimeout bounds how long a slow client can make
// this take.
func drainBody(r *http.Request, limit int64) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	io.CopyN(io.Discard, r.Body, limit+1)
}

// returnMemory gives the memory of a burst of requests back to the
// operating system once the burst is over: when the budget has held more
// than memoryBurst since the last look and holds little now, it runs the
// collector and returns the freed memory (debug.FreeOSMemory), twice, so
// that buffers parked in sync.Pools (grpc-go's, the JSON decoder's) go
// too. Left to itself, an idle Go process collects only every two minutes
// and returns freed memory slowly, so the resident memory of an attack
// would stay long after its connections closed.
func (s *Server) returnMemory(stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	busy := false
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		peak, used := s.budget.takePeak()
		busy = busy || peak > memoryBurst
		if busy && used <= memoryIdle {
			debug.FreeOSMemory()
			debug.FreeOSMemory()
			busy = false
		}
	}
}

// memoryBurst is the budget use after which a server that is back to
// using at most memoryIdle returns its memory (a few small requests go
// on being served through a burst and after it).
const (
	memoryBurst = 32 << 20
	memoryIdle  = 1 << 20
)
