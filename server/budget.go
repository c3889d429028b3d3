package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The memory budget: one server-wide bound on the request body bytes in
// flight, whatever the protocol. A request takes its share before its body
// is read: its Content-Length when the body is sent as it is, and, as the
// bytes stream, whatever a chunked body or the inflated form of a
// compressed one holds beyond that. It keeps its share until its response
// is written, since its decoded tensors live that long. A request that
// finds too little room waits at most BudgetOptions.Wait (in arrival
// order, requests already holding bytes first) and is then refused
// with ErrOverBudget (503 with Retry-After). Decoded tensors are no
// larger than the text they came from for FP32 and for JSON integers of
// two digits or more, so the body bytes bound a request's memory within a
// small factor; docs/load.md measures it.

// ErrOverBudget refuses a request that found no room in the memory budget
// within BudgetOptions.Wait.
var ErrOverBudget = errors.New("server busy: request bytes in flight are at the memory budget")

// budgetChunk is the step in which a streamed body takes more budget.
const budgetChunk = 64 << 10

// budget is the server's memory budget: a weighted semaphore whose
// waiters queue first come, first served, except that a request already
// holding bytes (taking more as its body streams, or for its decoded
// tensors) queues ahead of requests not yet admitted: it holds memory
// and has work done that a refusal would waste, and behind a queue of
// new requests it would wait until its own deadline and be refused.
// golang.org/x/sync/semaphore has one queue only, hence this one.
type budget struct {
	size    int64
	wait    time.Duration
	gauge   prometheus.Gauge
	refused prometheus.Counter

	mu    sync.Mutex
	used  int64
	queue []*budgetWaiter // admitted requests' waits first, then new ones'
}

// budgetWaiter is a request waiting for n bytes; ready is closed when
// they are its.
type budgetWaiter struct {
	n        int64
	admitted bool
	ready    chan struct{}
}

// newBudget makes the budget of options o (Bytes 0: DefaultBudgetBytes,
// and never less than one body at the limit maxBody).
func newBudget(o BudgetOptions, maxBody int64, m *metrics) *budget {
	size := o.Bytes
	if size == 0 {
		size = max(DefaultBudgetBytes, maxBody)
	}
	m.budgetSize.Set(float64(size))
	return &budget{size: size, wait: o.Wait, gauge: m.budgetUsed, refused: m.budgetRefused}
}

// acquire takes n bytes (at most size), waiting in the queue until ctx
// ends; admitted says whether the request already holds bytes.
func (b *budget) acquire(ctx context.Context, n int64, admitted bool) error {
	b.mu.Lock()
	ahead := len(b.queue) // the waiters it would queue behind
	if admitted {
		ahead = 0
		for ahead < len(b.queue) && b.queue[ahead].admitted {
			ahead++
		}
	}
	if ahead == 0 && b.used+n <= b.size {
		b.used += n
		b.mu.Unlock()
		b.gauge.Add(float64(n))
		return nil
	}
	w := &budgetWaiter{n: n, admitted: admitted, ready: make(chan struct{})}
	b.queue = slices.Insert(b.queue, ahead, w)
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
	b.grant() // it may have blocked smaller waiters behind it
	return ctx.Err()
}

// release gives n bytes back.
func (b *budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.grant()
	b.mu.Unlock()
	b.gauge.Sub(float64(n))
}

// grant hands room to the waiters at the head of the queue, in order,
// while they fit; b.mu is held.
func (b *budget) grant() {
	for len(b.queue) > 0 && b.used+b.queue[0].n <= b.size {
		w := b.queue[0]
		b.queue = b.queue[1:]
		b.used += w.n
		close(w.ready)
	}
}

// reservation is one request's share of the budget. The zero
// reservation's methods are no-ops (a request without a body).
type reservation struct {
	b        *budget
	ctx      context.Context
	held     int64
	deadline time.Time     // the request waits for room until then
	closer   io.ReadCloser // closed by release: the body's inflater
}

// reserve starts a request's reservation; its waits for room end at most
// b.wait from now, or when ctx ends.
func (b *budget) reserve(ctx context.Context) *reservation {
	return &reservation{b: b, ctx: ctx, deadline: time.Now().Add(b.wait)}
}

// grow takes n more bytes, waiting for room until the deadline.
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
	ctx, cancel := context.WithDeadline(r.ctx, r.deadline)
	err := b.acquire(ctx, n, r.held > 0)
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

// release gives the reservation's bytes back and closes its closer.
func (r *reservation) release() {
	if r == nil {
		return
	}
	if r.closer != nil {
		r.closer.Close()
		r.closer = nil
	}
	if r.b == nil || r.held == 0 {
		return
	}
	r.b.release(r.held)
	r.held = 0
}

// charged counts the bytes read from r against a reservation, taking more
// budget in budgetChunk steps once they pass what it holds.
type charged struct {
	r    io.Reader
	res  *reservation
	read int64
}

func (c *charged) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += int64(n)
	if over := c.read - c.res.held; over > 0 {
		if gerr := c.res.grow((over + budgetChunk - 1) / budgetChunk * budgetChunk); gerr != nil {
			return n, gerr
		}
	}
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
