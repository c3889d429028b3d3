package server

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
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
	// plan, when set, runs the job as one whole-request plan instead of
	// step by step when it arrives alone (see batcher.solo), across every
	// core when wide.
	plan func(wide bool) ([]rowResult, error)
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

// batcher runs one model's cellular batches. Its lanes (one goroutine
// each, batching.workers of them) share one queue; each lane owns a
// Stepper, admits queued jobs between steps while rows are free, steps
// every active sequence together and hands finished jobs back. Lanes run
// on different cores, so a busy model keeps every core doing batched
// steps; an idle lane blocks on the queue, so a new job goes to it first.
//
// A job that arrives alone (nothing queued, a core free) runs as one
// whole-request plan of the model's schedule in the request's own
// goroutine (A+ or P reads the input weights once, not per step):
// batching has nothing to gain then, and the request pays neither the
// step-by-step overhead nor a hand-off to another goroutine.
//
// cores is the model's core slots (model.workers, one per lane): a lane
// holds one while it has rows, a whole-request plan while it runs, so
// plans (solo, unbatched or wide) and batches never oversubscribe the
// cores the lanes stand for, generation included when infer runs
// unbatched.
type batcher struct {
	model *model
	queue chan *job
	delay time.Duration
	lanes []*lane
	cores chan struct{}

	mu     sync.Mutex
	closed bool // set when the batcher stops taking jobs; guards submit
}

// lane is one cellular batch and the goroutine that runs it.
type lane struct {
	b       *batcher
	st      *schedule.Stepper
	waiting *job // dequeued but not yet admitted: too few free rows
	owner   map[*schedule.Sequence]*job
	// rows is the lane's active rows, for the other lanes to see.
	rows atomic.Int64
}

func newBatcher(m *model, o BatchOptions) (*batcher, error) {
	b := &batcher{model: m, queue: make(chan *job, o.QueueLength), delay: o.MaxQueueDelay, cores: m.workers}
	for range cap(m.workers) {
		st, err := schedule.NewStepper(m.net, o.MaxRows)
		if err != nil {
			return nil, err
		}
		b.lanes = append(b.lanes, &lane{b: b, st: st, owner: map[*schedule.Sequence]*job{}})
	}
	return b, nil
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

// solo runs j's plan now, in the caller's goroutine, if j can run as a
// plan, nothing is queued and a core is free; it reports whether it did.
func (b *batcher) solo(j *job) (res []rowResult, ran bool, err error) {
	if j.plan == nil || len(b.queue) > 0 {
		return nil, false, nil
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return nil, false, nil
	}
	select {
	case b.cores <- struct{}{}:
	default:
		return nil, false, nil
	}
	defer func() { <-b.cores }()
	b.model.metrics.solo.WithLabelValues(b.model.name).Inc()
	wide, release := b.model.widen(b.cores)
	defer release()
	res, err = j.plan(wide)
	return res, true, err
}

// run runs every lane; when stop is closed they take no more jobs, and run
// returns once every admitted or queued job has finished.
func (b *batcher) run(stop <-chan struct{}) {
	var wg sync.WaitGroup
	for _, l := range b.lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.run(stop)
		}()
	}
	wg.Wait()
}

func (l *lane) run(stop <-chan struct{}) {
	b := l.b
	stopping := false
	busy := false // holding a core token
	for {
		if l.st.Active() == 0 && l.waiting == nil {
			if busy {
				<-b.cores
				busy = false
			}
			if stopping && len(b.queue) == 0 {
				return
			}
			select {
			case j := <-b.queue:
				b.cores <- struct{}{} // waits out a solo plan holding the last core
				busy = true
				l.waiting = j
				b.gather()
			case <-stop:
				b.mu.Lock()
				b.closed = true
				b.mu.Unlock()
				stopping, stop = true, nil
				continue
			}
		}
		l.admit()
		l.reap()
		if l.st.Active() == 0 {
			continue
		}
		l.step()
		// A step can take milliseconds and the lanes keep every P busy:
		// let the handlers waiting to decode requests and write responses
		// run between steps rather than at the next forced preemption.
		runtime.Gosched()
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

// admit adds the waiting job and then queued jobs while their rows fit
// and no other lane that takes jobs has fewer rows: queued work goes to
// the least loaded lane, so the lanes' batches, and cores, stay even.
func (l *lane) admit() {
	b := l.b
	defer func() { l.rows.Store(int64(l.st.Active())) }()
	for {
		if l.waiting == nil {
			if !l.least() {
				return
			}
			select {
			case j := <-b.queue:
				l.waiting = j
			default:
				return
			}
		}
		j := l.waiting
		if j.ctx.Err() != nil {
			l.waiting = nil
			b.finish(j, j.ctx.Err())
			continue
		}
		if l.st.Active()+len(j.seqs) > l.st.Capacity() {
			return
		}
		l.waiting = nil
		for i, q := range j.seqs {
			if err := l.st.Add(q); err != nil {
				for _, added := range j.seqs[:i] {
					l.st.Remove(added)
					delete(l.owner, added)
				}
				b.finish(j, err)
				j = nil
				break
			}
			l.owner[q] = j
		}
		if j != nil {
			j.remaining = len(j.seqs)
			j.started = time.Now()
			b.model.metrics.queue.WithLabelValues(b.model.name).Observe(j.started.Sub(j.enqueued).Seconds())
		}
	}
}

// least reports whether no other lane taking jobs has fewer rows than l.
func (l *lane) least() bool {
	mine := int64(l.st.Active())
	for _, o := range l.b.lanes {
		if o != l && o.rows.Load() < mine {
			return false
		}
	}
	return true
}

// reap drops the rows of jobs whose client has gone.
func (l *lane) reap() {
	for q, j := range l.owner {
		if j.ctx.Err() != nil {
			l.st.Remove(q)
			delete(l.owner, q)
			if j.remaining--; j.remaining == 0 {
				l.b.finish(j, j.ctx.Err())
			}
		}
	}
}

func (l *lane) step() {
	m := l.b.model
	rows := l.st.Active()
	done := l.st.Step()
	m.metrics.steps.WithLabelValues(m.name).Inc()
	m.metrics.tokens.WithLabelValues(m.name).Add(float64(rows))
	m.metrics.batchRows.WithLabelValues(m.name).Observe(float64(rows))
	m.stats.step(rows)
	for _, q := range done {
		j := l.owner[q]
		if j.gen != nil && l.generate(j, q) {
			continue
		}
		l.st.Remove(q)
		delete(l.owner, q)
		if j.remaining--; j.remaining == 0 {
			l.b.finish(j, nil)
		}
	}
	l.rows.Store(int64(l.st.Active()))
}

// generate samples the next token of a generation row and feeds it back;
// it reports whether the row goes on.
func (l *lane) generate(j *job, q *schedule.Sequence) bool {
	g, n := j.gen, l.b.model.net
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
	if err := l.st.Extend(q, []int64{int64(tok)}, nil); err != nil {
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
