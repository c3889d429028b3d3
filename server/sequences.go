package server

import (
	"fmt"
	"maps"
	"sync"
	"time"

	"rnnserve/server/internal/infer"
)

// sequenceStore keeps the recurrent state of a model's live sequences
// between requests. A sequence is live from its sequence_start request
// until its sequence_end request or until it has been idle for the idle
// timeout; a request for an ended or expired id gets an error that says
// which, for as long as the store remembers the id (tombstones are kept
// for several idle timeouts, up to a bounded number).
type sequenceStore struct {
	mu      sync.Mutex
	live    map[string]*seqState
	gone    map[string]goneState
	idle    time.Duration
	maxLive int
	now     func() time.Time
}

type seqState struct {
	h, c     []float32 // [layers][Out], [layers][H]; nil before the first step
	lastUsed time.Time
	busy     bool
}

type goneState struct {
	err error // wraps ErrSequenceEnded or ErrSequenceExpired
	at  time.Time
}

func newSequenceStore(o SequenceOptions) *sequenceStore {
	return &sequenceStore{live: map[string]*seqState{}, gone: map[string]goneState{},
		idle: o.IdleTimeout, maxLive: o.MaxLive, now: time.Now}
}

// acquire returns the state of sequence id for a request and marks it
// busy; start begins a new sequence (resetting one that is live).
func (s *sequenceStore) acquire(id string, start bool) (*seqState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expireLocked(now)
	st, ok := s.live[id]
	switch {
	case ok && st.busy:
		return nil, fmt.Errorf("%w: %q", ErrSequenceBusy, infer.Clip(id))
	case start:
		if !ok && len(s.live) >= s.maxLive {
			return nil, fmt.Errorf("%w: %d live, limit %d", ErrTooManySequences, len(s.live), s.maxLive)
		}
		st = &seqState{}
		s.live[id] = st
		delete(s.gone, id)
	case !ok:
		if g, ok := s.gone[id]; ok {
			return nil, fmt.Errorf("%w: %q", g.err, infer.Clip(id))
		}
		return nil, fmt.Errorf("%w: %q (start it with sequence_start)", ErrUnknownSequence, infer.Clip(id))
	}
	st.busy, st.lastUsed = true, now
	return st, nil
}

// release stores a request's final state (nil h on failure keeps the old
// one) and ends the sequence if end is set.
func (s *sequenceStore) release(id string, st *seqState, h, c []float32, end bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	st.busy, st.lastUsed = false, now
	if h != nil {
		st.h, st.c = h, c
	}
	if end && s.live[id] == st {
		delete(s.live, id)
		s.bury(id, ErrSequenceEnded, now)
	}
}

// expireLocked ends sequences idle past the timeout and forgets old tombstones.
func (s *sequenceStore) expireLocked(now time.Time) {
	for id, st := range s.live {
		if !st.busy && now.Sub(st.lastUsed) > s.idle {
			delete(s.live, id)
			s.bury(id, ErrSequenceExpired, now)
		}
	}
	for id, g := range s.gone {
		if now.Sub(g.at) > 10*s.idle {
			delete(s.gone, id)
		}
	}
}

func (s *sequenceStore) bury(id string, err error, now time.Time) {
	if len(s.gone) >= 4*s.maxLive {
		for old := range s.gone { // drop an arbitrary tombstone
			delete(s.gone, old)
			break
		}
	}
	s.gone[id] = goneState{err: err, at: now}
}

// expire runs the idle check now; the server calls it periodically.
func (s *sequenceStore) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(s.now())
}

// count is the number of live sequences.
func (s *sequenceStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

// endAll ends every live sequence with err (wrapping ErrSequenceEnded) and
// returns how many there were: a later request for one gets err. A
// request in flight finishes, but its state is not kept.
func (s *sequenceStore) endAll(err error) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.live)
	now := s.now()
	for id := range s.live {
		delete(s.live, id)
		s.bury(id, err, now)
	}
	return n
}

// adoptGone copies o's tombstones, so that a request for a sequence that
// ended with an earlier version of the model is told why.
func (s *sequenceStore) adoptGone(o *sequenceStore) {
	if s == o {
		return
	}
	o.mu.Lock()
	gone := maps.Clone(o.gone)
	o.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, g := range gone {
		if _, live := s.live[id]; !live {
			s.gone[id] = g
		}
	}
}
