// Package limits holds the server's memory budget: one bound on the
// request bytes in flight, whatever the protocol, with tiers of waiters
// and a reserve for small requests. It knows bytes, contexts and
// Prometheus collectors, not requests: the REST and gRPC transports of
// package server charge it (a body as it is read, a gRPC message before
// it is read) and map ErrOverBudget to their status codes.
package limits

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The memory budget: one server-wide bound on the request bytes in flight,
// whatever the protocol. A REST body is charged as its bytes arrive, a
// step (Chunk) ahead of the reader, never on the word of its
// Content-Length; a compressed body's inflated bytes are charged beside
// its wire bytes, with the inflater's own state. A gRPC message is
// charged before the transport reads it (server/grpclimits.go). Decoded tensors and
// the response a request asks for are charged beside its bytes. A request
// keeps its share until its response is written. A request that finds
// too little room waits at most the budget's wait and is then refused
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
// reserve) is for small requests alone (at most SmallRequest bytes), so
// that small requests keep being served while large ones fill the rest.
// golang.org/x/sync/semaphore has one queue only, hence this one.

// ErrOverBudget refuses a request that found no room in the memory budget
// within its wait (server.ErrOverBudget is this error).
var ErrOverBudget = errors.New("server busy: request bytes in flight are at the memory budget")

// Chunk is the step in which a streamed body takes more budget.
const Chunk = 64 << 10

// SmallRequest is the most a small request holds: one whose every byte
// fits the budget's reserve for small requests.
const SmallRequest = 64 << 10

// Tier is a waiter's place in the queue: waiters are served by tier,
// then by arrival.
type Tier int

// Waiting tiers, in the order they are served.
const (
	TierAdmitted Tier = iota // holds bytes already
	TierTrusted              // a gRPC read on a connection whose messages have all been small
	TierNew
)

// Budget is the server's memory budget: a weighted semaphore with tiers
// of waiters and a reserve for small requests.
type Budget struct {
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
	tier  Tier
	small bool
	ready chan struct{}
}

// New makes a budget of size bytes (at least one body at the limit
// maxBody) whose waits last at most wait; gauge follows the bytes in use
// and refused counts the refusals. Its reserve for small requests is an
// eighth of it, less where that would leave the rest room for fewer than
// four bodies at the limit.
func New(size, maxBody int64, wait time.Duration, gauge prometheus.Gauge, refused prometheus.Counter) *Budget {
	size = max(size, maxBody)
	return &Budget{size: size, smallShare: max(0, min(size/8, size-4*maxBody)), wait: wait, gauge: gauge, refused: refused}
}

// Size is the budget's bytes.
func (b *Budget) Size() int64 { return b.size }

// Wait is how long a request waits for room before it is refused.
func (b *Budget) Wait() time.Duration { return b.wait }

// InUse is the bytes taken now.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Acquire takes n bytes (at most size), waiting in its tier until ctx
// ends; small says whether the request may take the reserve.
func (b *Budget) Acquire(ctx context.Context, n int64, tier Tier, small bool) error {
	if b.take(n, small) {
		return nil
	}
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

// TakePeak returns the most bytes used at once since the last call, and
// what is used now.
func (b *Budget) TakePeak() (peak, used int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	peak, b.peak = b.peak, b.used
	return peak, b.used
}

// Release gives n bytes back.
func (b *Budget) Release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.grant()
	b.mu.Unlock()
	b.gauge.Sub(float64(n))
}

// take takes n bytes at once when no one waits and they fit, as grant
// would grant them to a lone waiter; it reports whether it took them.
// Most requests find room: they get it without a waiter, a channel or a
// timer.
func (b *Budget) take(n int64, small bool) bool {
	b.mu.Lock()
	ok := len(b.queue) == 0 && b.used+n <= b.limit(n, small)
	if ok {
		b.used += n
		b.peak = max(b.peak, b.used)
	}
	b.mu.Unlock()
	if ok {
		b.gauge.Add(float64(n))
	}
	return ok
}

// limit is the most the budget may have in use once a request of n
// bytes has them: the whole budget for a small request, and for a large
// one the part outside the reserve, or the whole budget when it is empty
// and the request wants more than that part; b.mu is held.
func (b *Budget) limit(n int64, small bool) int64 {
	if !small && (n <= b.size-b.smallShare || b.used > 0) {
		return b.size - b.smallShare
	}
	return b.size
}

// grant hands room to the waiters in queue order while they fit; b.mu is
// held. A large waiter that does not fit blocks the large ones behind it
// but not the small ones, which may use the reserve; a small one that
// does not fit blocks everyone behind it. A large waiter wanting more
// than the part for large requests gets the whole budget when it is
// empty.
func (b *Budget) grant() {
	largeBlocked := false
	for i := 0; i < len(b.queue); {
		w := b.queue[i]
		if !w.small && largeBlocked {
			i++
			continue
		}
		if b.used+w.n <= b.limit(w.n, w.small) {
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

// Reservation is one request's share of the budget. The zero
// reservation's methods are no-ops (a request without a body).
type Reservation struct {
	b    *Budget
	ctx  context.Context
	held int64
	used int64 // what its readers have read (charged.Read)
	// Small says its size is known and small: it may use the reserve
	// while it holds at most SmallRequest.
	Small bool
	// Trusted makes it wait in TierTrusted before it holds bytes, and
	// lets it use the reserve whatever it takes.
	Trusted  bool
	deadline time.Time // the request waits for room until then
	closers  []io.Closer
}

// Reserve starts a request's reservation; its waits for room end at most
// b.wait from now, or when ctx ends.
func (b *Budget) Reserve(ctx context.Context) *Reservation {
	return &Reservation{b: b, ctx: ctx, deadline: time.Now().Add(b.wait)}
}

// Grow takes n more bytes, waiting for room until the deadline. A
// request known to be small stays small while everything it holds fits
// SmallRequest.
func (r *Reservation) Grow(n int64) error {
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
	tier := TierNew
	switch {
	case r.held > 0:
		tier = TierAdmitted
	case r.Trusted:
		tier = TierTrusted
	}
	small := r.Trusted || r.Small && r.held+n <= SmallRequest
	if b.take(n, small) { // room now: no deadline to set
		r.held += n
		return nil
	}
	ctx, cancel := context.WithDeadline(r.ctx, r.deadline)
	err := b.Acquire(ctx, n, tier, small)
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

// Settle gives back what the reservation holds beyond n bytes: a
// reservation taken for the most a message may be, once its size is
// known.
func (r *Reservation) Settle(n int64) {
	if r == nil || r.b == nil || r.held <= n {
		return
	}
	r.b.Release(r.held - max(n, 0))
	r.held = max(n, 0)
}

// Absorb moves what o holds, of the same budget, into r; o holds nothing
// after. A nil o is nothing to move.
func (r *Reservation) Absorb(o *Reservation) {
	if o == nil || o.held == 0 {
		return
	}
	r.held += o.held
	o.held = 0
}

// Release gives the reservation's bytes back and closes its closers.
// The zero and nil reservations' Release does nothing; twice is once.
func (r *Reservation) Release() {
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
	r.b.Release(r.held)
	r.held = 0
}

// charged counts the bytes read from r against a reservation: before a
// read that could take it past what it holds, it takes Chunk more
// (with sized, no more than the left bytes still expected), so bytes are
// charged before they are held, and a reader that sends nothing holds at
// most one step.
type charged struct {
	r     io.Reader
	res   *Reservation
	sized bool  // left is known
	left  int64 // bytes still expected: a Content-Length not yet read
}

func (c *charged) Read(p []byte) (int, error) {
	res := c.res
	if res.used >= res.held {
		step := int64(Chunk)
		if c.sized {
			step = min(step, max(c.left, 1))
		}
		if err := res.Grow(step); err != nil {
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

// Held is the bytes the reservation holds.
func (r *Reservation) Held() int64 { return r.held }

// Hand takes up to n of the bytes the reservation holds out of it,
// still charged, and returns how many: the taker gives them back to the
// budget (Budget.Release), as a connection does once it has written a
// response handed to it.
func (r *Reservation) Hand(n int64) int64 {
	n = max(min(n, r.held), 0)
	r.held -= n
	return n
}

// Close makes Release close c: an inflater whose state is charged to the
// reservation.
func (r *Reservation) Close(c io.Closer) { r.closers = append(r.closers, c) }

// NewReader counts the bytes read from rd against res, taking Chunk
// bytes (at most the size still expected, when size >= 0 gives it) before
// each read that could take res past what it holds: bytes are charged
// before they are held, and a reader that sends nothing holds at most one
// step.
func NewReader(rd io.Reader, res *Reservation, size int64) io.Reader {
	return &charged{r: rd, res: res, sized: size >= 0, left: max(size, 0)}
}
