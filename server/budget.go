package server

import (
	"io"
	"net/http"
	"rnnserve/server/internal/limits"
	"runtime/debug"
	"time"
)

// The memory budget is package limits': one server-wide bound on the
// request bytes in flight. This file makes it from the options and keeps
// what is the server's: the refusal's name, draining a refused body, and
// giving memory back after a burst.

// ErrOverBudget refuses a request that found no room in the memory budget
// within BudgetOptions.Wait.
var ErrOverBudget = limits.ErrOverBudget

// newBudget makes the budget of options o (Bytes 0: DefaultBudgetBytes,
// and never less than one body at the limit maxBody); see limits.New.
func newBudget(o BudgetOptions, maxBody int64, m *metrics) *limits.Budget {
	size := o.Bytes
	if size == 0 {
		size = max(DefaultBudgetBytes, maxBody)
	}
	m.budgetSize.Set(float64(size))
	return limits.New(size, maxBody, o.Wait, m.budgetUsed, m.budgetRefused)
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
	busy := false
	every(stop, time.Second, func() {
		peak, used := s.budget.TakePeak()
		busy = busy || peak > memoryBurst
		if busy && used <= memoryIdle {
			debug.FreeOSMemory()
			debug.FreeOSMemory()
			busy = false
		}
	})
}

// memoryBurst is the budget use after which a server that is back to
// using at most memoryIdle returns its memory (a few small requests go
// on being served through a burst and after it).
const (
	memoryBurst = 32 << 20
	memoryIdle  = 1 << 20
)
