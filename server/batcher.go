package server

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"rnnserve/schedule"
)

// job is one request's rows in a batcher. W is the model kind's own part
// of it (a sequence model's sequences, a tree model's trees). The batcher
// owns a job from submit until it sends on done; the submitter reads the
// job only after receiving from done.
type job[W any] struct {
	ctx      context.Context
	rows     int // rows it takes in a batch
	work     W
	done     chan error // buffered; receives exactly once
	enqueued time.Time
	started  time.Time // admitted to a batch
	finished time.Time
	// solo, when set, runs the job by itself as one whole-request plan in
	// the submitter's goroutine when it arrives alone (see batcher.solo),
	// holding one of cores and free to take the rest.
	solo func(cores coreSlots) error
}

// batch is a lane's model-specific half: the rows it is running. The
// lane goroutine alone calls it.
type batch[W any] interface {
	// fits reports whether j may join the batch now. An empty batch must
	// take any job.
	fits(j *job[W]) bool
	// add admits j's rows; an error fails j alone.
	add(j *job[W]) error
	// reap drops the rows of jobs whose context has ended and returns
	// those jobs, whose rows are all gone.
	reap() []*job[W]
	// step runs one step of every row and returns the jobs it finished,
	// each with its error.
	step() []finishedJob[W]
	// rows is the number of rows in the batch.
	rows() int
}

type finishedJob[W any] struct {
	j   *job[W]
	err error
}

// batcher runs one model's batches, for every kind of model. Its lanes
// (one goroutine each) share one queue; each lane owns a batch, admits
// queued jobs between steps while they fit, steps its rows together and
// hands finished jobs back. Lanes run on different cores, so a busy model
// keeps every core working; an idle lane blocks on the queue, so a new
// job goes to it first.
//
// A job that arrives alone (nothing queued, a core free) and can run as
// a whole plan runs at once in the submitter's goroutine (solo): batching
// has nothing to gain then, and the request pays neither the step-by-step
// overhead nor a hand-off to another goroutine.
//
// cores are the model's core slots: a lane holds one while it has rows, a
// solo plan while it runs, so plans and batches never run more work at
// once than the model has cores.
type batcher[W any] struct {
	m     *modelBase
	queue chan *job[W]
	delay time.Duration
	lanes []*lane[W]
	// newBatch makes a lane's batch (see newBatcher).
	newBatch func() (batch[W], error)

	mu     sync.Mutex
	closed bool // set when the batcher stops taking jobs; guards submit
}

// lane is one batch and the goroutine that runs it.
type lane[W any] struct {
	b       *batcher[W]
	batch   batch[W]
	waiting *job[W]   // dequeued but not yet admitted: it did not fit
	running []*job[W] // admitted and not finished: what a panic fails
	// rows is the lane's rows, for the other lanes to see.
	rows atomic.Int64
	// admitted counts the jobs the lane has taken in.
	admitted atomic.Int64
}

// newBatcher makes a batcher with lanes lanes, each with a batch from
// newBatch, which also replaces a lane's batch after a panic in it (see
// lane.run). newBatch may fail only on the first call.
func newBatcher[W any](m *modelBase, o BatchOptions, lanes int, newBatch func() (batch[W], error)) (*batcher[W], error) {
	b := &batcher[W]{m: m, queue: make(chan *job[W], o.QueueLength), delay: o.MaxQueueDelay, newBatch: newBatch}
	for range lanes {
		bt, err := newBatch()
		if err != nil {
			return nil, err
		}
		b.lanes = append(b.lanes, &lane[W]{b: b, batch: bt})
	}
	return b, nil
}

// submit queues j, failing at once with ErrBusy when the queue is full
// and with ErrDraining once the batcher is stopping.
func (b *batcher[W]) submit(j *job[W]) error {
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

// wait waits for a submitted job until ctx ends; on ctx's end the lane
// drops the job's rows at its next step (and still sends on done).
func (b *batcher[W]) wait(ctx context.Context, j *job[W]) error {
	select {
	case err := <-j.done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// solo runs j's plan now, in the caller's goroutine, if j can run as a
// plan and the model is idle: nothing queued and every core free (a lane
// holds a core while it has rows or a job waiting, a plan while it
// runs); it reports whether it did.
// Otherwise the job joins a batch: a whole plan would hold a core for the
// whole request where a batch serves a row for a fraction of a step.
// Where lone requests stay on one core, letting a second arrival take the
// other core as a plan too kept the lanes empty under load: at 64 clients
// on bytelm 58-74% of requests ran as one-core plans, at 269 µs of CPU a
// request against 221 batched (2026-11-27-peers-2207 and -2211 in
// docs/data/peers.csv, AMD Zen 5).
// After a plan the caller yields its P if any goroutine waits for one: a
// handler that ran a plan wakes the goroutine reading its connection's
// next request, which inherits its time slice, and so on, so that the
// connections queued on the same P (made runnable by the network poller)
// waited for the runtime's 10 ms preemption while one connection's
// requests ran as plans one after another (Go execution traces at 8
// clients on bytelm, AMD Zen 5).
func (b *batcher[W]) solo(j *job[W]) (ran bool, err error) {
	if j.solo == nil || len(b.queue) > 0 || len(b.m.cores) > 0 {
		return false, nil
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed || !b.m.cores.tryTake() {
		return false, nil
	}
	defer func() { // once the cores are back
		if schedule.Runnable() > 0 {
			runtime.Gosched()
		}
	}()
	defer b.m.cores.give()
	b.m.metrics.solo.Inc()
	return true, j.solo(b.m.cores)
}

// run runs every lane; when stop is closed they take no more jobs, and run
// returns once every admitted or queued job has finished.
func (b *batcher[W]) run(stop <-chan struct{}) {
	var wg sync.WaitGroup
	for _, l := range b.lanes {
		wg.Go(func() { l.run(stop) })
	}
	wg.Wait()
}

func (l *lane[W]) run(stop <-chan struct{}) {
	st := laneState{stop: stop}
	for !l.cycle(&st) {
	}
}

// laneState is what a lane's loop carries from one cycle to the next.
type laneState struct {
	stop     <-chan struct{} // nil once stopping
	stopping bool
	busy     bool // holding a core slot
}

// cycle waits for work if the lane is idle, admits queued jobs and runs
// one step; it reports whether the lane is done (stopping, nothing left).
// A panic in the batch (a kernel, the model's bookkeeping) fails every
// job the lane holds with ErrInternal, logs the stack and gives the lane
// a new batch: the state of the old one cannot be trusted. Jobs in the
// queue and on other lanes are untouched.
func (l *lane[W]) cycle(st *laneState) (done bool) {
	b := l.b
	defer func() {
		if v := recover(); v != nil {
			l.replace(b.m.panicked("batch lane", v))
		}
	}()
	if l.batch.rows() == 0 && l.waiting == nil {
		if st.busy {
			b.m.cores.give()
			st.busy = false
		}
		var j *job[W]
		if st.stopping {
			// No job comes after the stop: take what is queued, or end
			// (another lane may have taken the last one since a look).
			select {
			case j = <-b.queue:
			default:
				return true
			}
		} else {
			select {
			case j = <-b.queue:
			case <-st.stop:
				b.mu.Lock()
				b.closed = true
				b.mu.Unlock()
				st.stopping, st.stop = true, nil
				return false
			}
		}
		b.m.cores <- struct{}{} // waits out a solo plan holding the last core
		st.busy = true
		l.waiting = j
		b.gather()
	}
	l.admit()
	for _, j := range l.batch.reap() {
		l.finish(j, context.Cause(j.ctx))
	}
	rows := l.batch.rows()
	if rows == 0 {
		l.rows.Store(0)
		return false
	}
	fin := l.batch.step()
	b.m.observeStep(rows)
	for _, f := range fin {
		l.finish(f.j, f.err)
	}
	l.rows.Store(int64(l.batch.rows()))
	// A step can take milliseconds and the lanes keep every P busy:
	// let the handlers waiting to decode requests and write responses
	// run between steps rather than at the next forced preemption.
	runtime.Gosched()
	return false
}

// replace fails every job the lane holds with err and gives it a new,
// empty batch.
func (l *lane[W]) replace(err error) {
	b := l.b
	for _, j := range l.running {
		b.finish(j, err)
	}
	l.running = l.running[:0]
	if j := l.waiting; j != nil {
		l.waiting = nil
		b.finish(j, err)
	}
	nb, nerr := b.newBatch()
	if nerr != nil {
		// newBatch succeeded with the same arguments when the model
		// loaded; failing now is a bug of its own.
		panic(fmt.Sprintf("server: model %q: a new batch after a panic: %v", b.m.name, nerr))
	}
	l.batch = nb
	l.rows.Store(0)
}

// finish hands a job the lane admitted back to its submitter.
func (l *lane[W]) finish(j *job[W], err error) {
	if i := slices.Index(l.running, j); i >= 0 {
		l.running = slices.Delete(l.running, i, i+1)
	}
	l.b.finish(j, err)
}

// gather waits up to the queue delay for more jobs to start a batch with.
func (b *batcher[W]) gather() {
	if b.delay <= 0 {
		return
	}
	t := time.NewTimer(b.delay)
	defer t.Stop()
	<-t.C
}

// admit adds the waiting job and then queued jobs while they fit and the
// lane holds less than its share of the work (see underShare), so the
// lanes' batches, and cores, stay even.
func (l *lane[W]) admit() {
	b := l.b
	defer func() { l.rows.Store(int64(l.batch.rows())) }()
	for {
		if l.waiting == nil {
			if !l.underShare() {
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
			b.finish(j, context.Cause(j.ctx))
			continue
		}
		if !l.batch.fits(j) {
			return
		}
		err := l.batch.add(j) // j stays waiting until then, for a panic to fail
		l.waiting = nil
		if err != nil {
			b.finish(j, err)
			continue
		}
		l.running = append(l.running, j)
		j.started = time.Now()
		l.admitted.Add(1)
		b.m.metrics.queue.Observe(j.started.Sub(j.enqueued).Seconds())
	}
}

// underShare reports whether l holds fewer rows than its even share of
// all the work in sight: every lane's rows and the queued jobs, divided
// among the lanes, rounded up. A lane whose goroutine has not run yet (its
// core busy elsewhere) thus leaves work in the queue for itself without
// holding the others to one row at a time.
func (l *lane[W]) underShare() bool {
	mine := int64(l.batch.rows())
	total := int64(len(l.b.queue))
	for _, o := range l.b.lanes {
		if o == l {
			total += mine
		} else {
			total += o.rows.Load()
		}
	}
	n := int64(len(l.b.lanes))
	return mine < (total+n-1)/n
}

func (b *batcher[W]) finish(j *job[W], err error) {
	j.finished = time.Now()
	if err == nil && !j.started.IsZero() {
		b.m.metrics.compute.Observe(j.finished.Sub(j.started).Seconds())
	}
	j.done <- err
}

// queued is the number of jobs waiting in the queue.
func (b *batcher[W]) queued() int { return len(b.queue) }
