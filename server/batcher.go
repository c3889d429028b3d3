package server

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"rnnserve/rnn"
	"rnnserve/schedule"
	"rnnserve/server/api"
)

// job is one request's rows in a batcher. The batcher goroutine owns it
// from enqueue until it sends on done; the handler reads it only after.
type job struct {
	ctx       context.Context
	seqs      []*schedule.Sequence
	remaining int
	done      chan error // buffered; receives exactly once
	enqueued  time.Time
	started   time.Time // first step
	finished  time.Time
	gen       *generation
}

// generation is the sampling state of a generate request.
type generation struct {
	maxTokens   int
	temperature float64
	topK        int
	rng         *rand.Rand
	produced    int
	events      chan api.GenerateEvent // buffered for maxTokens+1: never blocks
	text        func(tok int64) string
	scratch     []float64
}

// batcher runs one model's cellular batch: a single goroutine owns the
// Stepper, admits queued jobs between steps while rows are free, steps
// every active sequence together, and hands finished jobs back.
type batcher struct {
	model *model
	st    *schedule.Stepper
	queue chan *job
	delay time.Duration

	waiting *job // dequeued but not yet admitted: too few free rows
	owner   map[*schedule.Sequence]*job

	mu     sync.Mutex
	closed bool // set when the batcher stops taking jobs; guards submit
}

func newBatcher(m *model, o BatchOptions) (*batcher, error) {
	st, err := schedule.NewStepper(m.net, o.MaxRows)
	if err != nil {
		return nil, err
	}
	return &batcher{model: m, st: st, queue: make(chan *job, o.QueueLength), delay: o.MaxQueueDelay,
		owner: map[*schedule.Sequence]*job{}}, nil
}

// submit queues j, failing at once with ErrBusy when the queue is full
// and with ErrDraining once the batcher is stopping.
func (b *batcher) submit(j *job) error {
	j.enqueued = time.Now()
	j.done = make(chan error, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrDraining
	}
	select {
	case b.queue <- j:
		return nil
	default:
		return ErrBusy
	}
}

// run is the batcher's loop; when stop is closed it takes no more jobs and
// returns once every admitted or queued job has finished.
func (b *batcher) run(stop <-chan struct{}) {
	stopping := false
	for {
		if b.st.Active() == 0 && b.waiting == nil {
			if stopping && len(b.queue) == 0 {
				return
			}
			select {
			case j := <-b.queue:
				b.waiting = j
				b.gather()
			case <-stop:
				b.mu.Lock()
				b.closed = true
				b.mu.Unlock()
				stopping, stop = true, nil
				continue
			}
		}
		b.admit()
		b.reap()
		if b.st.Active() == 0 {
			continue
		}
		b.step()
	}
}

// gather waits up to the queue delay for more jobs to start a batch with.
func (b *batcher) gather() {
	if b.delay <= 0 {
		return
	}
	t := time.NewTimer(b.delay)
	defer t.Stop()
	<-t.C
}

// admit adds the waiting job and then queued jobs while their rows fit.
func (b *batcher) admit() {
	for {
		if b.waiting == nil {
			select {
			case j := <-b.queue:
				b.waiting = j
			default:
				return
			}
		}
		j := b.waiting
		if j.ctx.Err() != nil {
			b.waiting = nil
			b.finish(j, j.ctx.Err())
			continue
		}
		if b.st.Active()+len(j.seqs) > b.st.Capacity() {
			return
		}
		b.waiting = nil
		for i, q := range j.seqs {
			if err := b.st.Add(q); err != nil {
				for _, added := range j.seqs[:i] {
					b.st.Remove(added)
					delete(b.owner, added)
				}
				b.finish(j, err)
				j = nil
				break
			}
			b.owner[q] = j
		}
		if j != nil {
			j.remaining = len(j.seqs)
			j.started = time.Now()
			b.model.metrics.queue.WithLabelValues(b.model.name).Observe(j.started.Sub(j.enqueued).Seconds())
		}
	}
}

// reap drops the rows of jobs whose client has gone.
func (b *batcher) reap() {
	for q, j := range b.owner {
		if j.ctx.Err() != nil {
			b.st.Remove(q)
			delete(b.owner, q)
			if j.remaining--; j.remaining == 0 {
				b.finish(j, j.ctx.Err())
			}
		}
	}
}

func (b *batcher) step() {
	m := b.model
	rows := b.st.Active()
	done := b.st.Step()
	m.metrics.steps.WithLabelValues(m.name).Inc()
	m.metrics.tokens.WithLabelValues(m.name).Add(float64(rows))
	m.metrics.batchRows.WithLabelValues(m.name).Observe(float64(rows))
	m.stats.step(rows)
	for _, q := range done {
		j := b.owner[q]
		if j.gen != nil && b.generate(j, q) {
			continue
		}
		b.st.Remove(q)
		delete(b.owner, q)
		if j.remaining--; j.remaining == 0 {
			b.finish(j, nil)
		}
	}
}

// generate samples the next token of a generation row and feeds it back;
// it reports whether the row goes on.
func (b *batcher) generate(j *job, q *schedule.Sequence) bool {
	g, n := j.gen, b.model.net
	V := n.HeadOut
	logp := q.HeadOut[len(q.HeadOut)-V:]
	tok := rnn.Sample(logp, g.temperature, g.topK, g.rng, g.scratch)
	probs := make([]float32, V)
	rnn.Probabilities(n.Activation, logp, probs)
	q.HeadOut = q.HeadOut[:0]
	g.events <- api.GenerateEvent{Index: g.produced, Token: int64(tok), Text: g.text(int64(tok)), LogProb: logOf(probs[tok])}
	g.produced++
	if g.produced >= g.maxTokens {
		return false
	}
	if err := b.st.Extend(q, []int64{int64(tok)}, nil); err != nil {
		return false
	}
	return true
}

func (b *batcher) finish(j *job, err error) {
	j.finished = time.Now()
	if err == nil && !j.started.IsZero() {
		b.model.metrics.compute.WithLabelValues(b.model.name).Observe(j.finished.Sub(j.started).Seconds())
	}
	if j.gen != nil {
		close(j.gen.events)
	}
	j.done <- err
}
