package schedule

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Pool is a fixed set of workers, one per core, that run the phases of a
// Partitioned plan together: every worker runs its part of a phase, and
// the next phase starts when every part of this one is done.
//
// Worker 0 is the goroutine that calls Phases: for the length of the job
// it is locked to its OS thread and pinned to the pool's first CPU, so it
// needs no wake-up and its weights stay in that core's cache from one run
// to the next. Workers 1..n-1 are goroutines started by NewPool, each
// locked to an OS thread pinned to its own CPU (sched_setaffinity, where
// the platform has it). Between jobs they spin briefly
// (PoolOptions.IdleSpin), then park, giving their cores back; one that
// jobs keep from parking yields its P now and then to goroutines waiting
// for one (holdFor).
//
// Parts are claimed, not assigned: each worker claims its own part of a
// phase, and a worker whose peers' parts are late (stealDelay) takes any
// of them nobody has claimed yet, and then keeps taking them at once
// while it finds them unclaimed. A worker whose core is taken by another
// process (or that is still parked) therefore never holds the others up:
// when it comes back it finds its parts done and catches up, and a job
// that finds only one core runs on that one, as if the plan were serial.
// Only a part already started is waited for, and in a job of chunked
// parts (chunkedPhases: a tree plan's) not even all of it: its worker
// runs its chunks from the front, a worker that has run out of work takes
// them from the back, so a late helper (a wake-up late, hundreds of
// microseconds on a VM) does the chunks left when it comes, and the
// caller waits at most for a chunk in progress.
// Each is the exception: its parts run on their own workers' threads,
// whatever the wait, because it is how memory gets first-touched there.
//
// Phases leaves the caller as it found it: its thread's CPU set restored
// and the thread unlocked. The helpers' threads end with them at Close,
// so no pinned thread goes back to the Go runtime.
//
// A part that panics does not take the process down: its worker recovers,
// the job's remaining parts are skipped (every phase still completes, so
// no worker is left waiting), and once the job is over Phases panics in
// its caller's goroutine with a *PanicError holding the value and the
// panicking worker's stack, for the caller to recover. The pool stays
// usable.
//
// A Pool runs one job at a time; Phases serialises concurrent callers.
// Close stops the workers; a Pool must not be used after Close.
type Pool struct {
	n        int
	cpus     []int         // CPU of each worker; nil when not pinned
	spinFor  time.Duration // PoolOptions.Spin (0 when negative): the most a waiting worker spins
	idleSpin time.Duration // PoolOptions.IdleSpin (0 when negative): between jobs
	mu       sync.Mutex    // one job at a time
	cur      atomic.Pointer[poolJob]
	gen      atomic.Uint64 // bumped for every job and at Close
	wake     waiter        // helpers waiting for a job
	quit     atomic.Bool
	done     sync.WaitGroup
	pinErr   atomic.Pointer[error]
	stolen   atomic.Int64 // parts run by a worker other than their own
	yields   atomic.Int64 // helpers' yields of their P (holdFor)
	parts    []partState  // one per part, reused by every job
	// wakeNs is how long a job of longPhases waits for its helpers to
	// start their parts, in ns: measured at NewPool with the helpers
	// parked (measureWake), then moved towards what every such job sees
	// (noteWake). Pays weighs it against a plan's work.
	wakeNs atomic.Int64
	probes atomic.Int64 // plans that would pay with no wake-up (pays)
}

// partState is where one part's progress is published, phase after
// phase and job after job. claimed counts the phases whose part some
// worker has taken, done those it has finished; both only grow, and at
// the end of a job every part's counters are equal. Each counter has a
// cache line to itself (128 bytes apart, so no adjacent-line prefetch
// pairs them either): a part's owner writes its claim without touching a
// line any other core reads, and the one line a phase hands over is the
// done counter, which the others poll. With the former shared per-phase
// claim bytes and done counter, every phase moved three or four lines
// between the cores; this way, two (BenchmarkPoolBarrier).
//
// A chunked part (chunkedPhases) also has, on its claim's line, the
// chunks of the phase that nobody has taken yet (cut) and those not yet
// finished (left), each tagged with the phase (see chunkTag): its worker
// takes chunks from the front of cut, any other worker from the back.
type partState struct {
	claimed atomic.Int64
	cut     atomic.Uint64 // tag | first chunk not taken <<chunkBits | end
	left    atomic.Uint64 // tag | chunks not finished
	_       [104]byte
	done    atomic.Int64
	_       [120]byte
}

// A chunked part's words pack the phase's tag, the low 40 bits of its
// counter t, above two 12-bit chunk counters (cut) or one 24-bit one
// (left), so a worker still looking at an earlier phase finds no chunk to
// take (unless 2^40 phases ran between two of its reads).
const (
	chunkBits = 12
	chunkMask = 1<<chunkBits - 1
	tagShift  = 2 * chunkBits
	maxChunks = chunkMask // the most chunks of a part
)

func chunkTag(t int64) uint64 { return uint64(t) << tagShift }

// takeChunk takes a chunk of part q of the phase whose counter is t: the
// first one left (front) or the last; -1 when none is left, or the part's
// chunks are not yet laid out for this phase.
func (s *partState) takeChunk(t int64, front bool) int {
	tag := chunkTag(t)
	for {
		v := s.cut.Load()
		if v>>tagShift<<tagShift != tag {
			return -1
		}
		f, e := int(v>>chunkBits&chunkMask), int(v&chunkMask)
		if f >= e {
			return -1
		}
		if front {
			if s.cut.CompareAndSwap(v, v+1<<chunkBits) {
				return f
			}
		} else if s.cut.CompareAndSwap(v, v-1) {
			return e - 1
		}
	}
}

// poolJob is one call of Phases: n phases of the pool's parts.
type poolJob struct {
	f func(phase, w int)
	// A chunked job's (chunkedPhases) parts: chunks(ph, q) chunks in part
	// q of phase ph, chunk c run by chunk(ph, q, c).
	chunk  func(phase, q, c int)
	chunks func(phase, q int) int
	id     uint64 // the pool's gen when it started
	phases int
	base   int64                      // every part's counters at the start
	own    bool                       // every part on its own worker (Each)
	finish waiter                     // workers waiting for a phase's parts
	failed atomic.Pointer[PanicError] // the first part that panicked

	// A timed job (longPhases, chunkedPhases) records when its helpers
	// started: the latest helper's arrival in the job (and how many
	// came) and the caller's first take-over of a part nobody had
	// started, in ns from t0.
	timed    bool
	spinFor  time.Duration // how long a waiting worker spins, by the clock
	t0       time.Time
	arrived  atomic.Int64
	nArrived atomic.Int32
	tookOver atomic.Int64
}

// PoolOptions configure NewPool. Zero values mean defaults.
type PoolOptions struct {
	// Workers is the number of workers, the calling goroutine included; 0
	// means runtime.GOMAXPROCS(0). It may not exceed GOMAXPROCS: every
	// worker needs a P to spin on.
	Workers int
	// NoPin leaves the workers' threads wherever the OS schedules them,
	// and the workers unlocked from any thread.
	NoPin bool
	// Spin is how long a worker waiting within a job (for a part another
	// worker is running) spins before it parks; 0 means DefaultSpin, a
	// negative value parks at once.
	Spin time.Duration
	// IdleSpin is how long a helper spins after a job for the next one
	// before it parks; 0 means DefaultIdleSpin, a negative value parks at
	// once.
	IdleSpin time.Duration
}

// DefaultIdleSpin is the default PoolOptions.IdleSpin. A helper that
// spins between jobs holds its core and one of the Go runtime's Ps, which
// the server's other goroutines (lanes, handlers) then cannot use (a
// helper that holds it through back-to-back jobs yields it: holdFor); a
// helper parked when a job starts costs a wake-up, and its share of the
// job runs on the caller until it comes. Serving one client whose
// requests run as two-core plans, at 20 µs the helper parked between
// requests and bytelm served 34% fewer a second
// (2026-11-27-ab-idlespin-2356 in docs/data/figures.csv, AMD Zen 5). The
// spin had been counted in iterations of a loop timed inlined (0.24 ns
// each, a sixth to an eighth of what a poll costs), so "20 µs" spun
// 120-160; spinning 150 µs by the clock, one client's p99 was 1.05-1.37
// times lower than that and 8 clients' the same (-2359). 300 µs against 100
// lowered one client's p99 further (0.94-1.30 times) but raised 8
// clients' (0.85-1.02; 2026-11-28-ab-idlespin-0001).
const DefaultIdleSpin = 150 * time.Microsecond

// DefaultSpin is the default PoolOptions.Spin: long enough to cover the
// occasional stall of one core within a job, short enough that a worker
// gives its core back within half a millisecond. A parked worker
// costs a futex wake-up, 40-70 µs on the project's VM; at 50 µs of spin
// enough waits parked that a 2-worker LSTM (hidden 128, T = 100) took
// 76 µs per step against 7 µs on one worker; at 500 µs it takes 8 µs,
// and hidden 512 (4 layers) 224 µs against 418 on one core.
const DefaultSpin = 500 * time.Microsecond

// MaxWorkers bounds PoolOptions.Workers and PartitionOptions.Workers.
const MaxWorkers = 256

// ErrPool is wrapped by every error about pool or partition settings.
var ErrPool = errors.New("schedule: invalid pool settings")

// NewPool starts a pool. The caller owns it and must Close it.
func NewPool(opt PoolOptions) (*Pool, error) {
	procs := runtime.GOMAXPROCS(0)
	if opt.Workers == 0 {
		opt.Workers = procs
	}
	if opt.Workers < 1 || opt.Workers > min(procs, MaxWorkers) {
		return nil, fmt.Errorf("%w: %d workers, want 1..GOMAXPROCS (%d)", ErrPool, opt.Workers, procs)
	}
	if opt.Spin == 0 {
		opt.Spin = DefaultSpin
	}
	if opt.IdleSpin == 0 {
		opt.IdleSpin = DefaultIdleSpin
	}
	p := &Pool{n: opt.Workers, idleSpin: max(opt.IdleSpin, 0)}
	p.spinFor = max(opt.Spin, 0)
	p.wake.init()
	if !opt.NoPin {
		p.cpus = workerCPUs(p.n)
	}
	p.done.Add(p.n - 1)
	for w := 1; w < p.n; w++ {
		go p.worker(w)
	}
	p.measureWake()
	return p, nil
}

// Workers is the number of workers, the caller of Phases included.
func (p *Pool) Workers() int { return p.n }

// Stolen is how many parts so far ran on a worker other than their own:
// how often a worker's core was busy elsewhere when its part was due.
func (p *Pool) Stolen() int64 { return p.stolen.Load() }

// PinError reports the first error from pinning a worker's thread to its
// CPU (the pool still runs, unpinned), or nil.
func (p *Pool) PinError() error {
	if e := p.pinErr.Load(); e != nil {
		return *e
	}
	return nil
}

func (p *Pool) notePinErr(err error) {
	if err != nil {
		p.pinErr.CompareAndSwap(nil, &err)
	}
}

// Close stops the helper workers and waits for them to exit.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.quit.Swap(true) {
		return
	}
	p.gen.Add(1)
	p.wake.broadcast()
	p.done.Wait()
}

func (p *Pool) worker(w int) {
	defer p.done.Done()
	// A pinned worker keeps its thread, and exits still locked, so the
	// runtime ends the thread: unlocked, it would go back to the runtime
	// still pinned to one CPU and confine whatever goroutine it ran next.
	// An unpinned worker stays unlocked, so that after a collection's stop
	// any thread with a P runs it, not only its own.
	if p.cpus != nil {
		runtime.LockOSThread()
		p.notePinErr(pinThread(p.cpus[w]))
	}
	var seen, last uint64 // the last gen seen, the last job run
	held := time.Now()    // since this helper last gave its P back
	for {
		g := seen
		if p.wake.wait(p.idleSpin, func() bool { return p.gen.Load() != g }) {
			held = time.Now()
		}
		seen = p.gen.Load()
		if p.quit.Load() {
			return
		}
		// A helper that woke for a job it has run finds nothing in it,
		// and must not count as arriving in it again.
		if j := p.cur.Load(); j != nil && j.id != last {
			last = j.id
			if j.timed {
				atomicMax(&j.arrived, int64(time.Since(j.t0)))
				j.nArrived.Add(1)
			}
			p.run(j, w)
			if time.Since(held) >= holdFor && Runnable() > 1 {
				p.yields.Add(1)
				runtime.Gosched()
				held = time.Now()
			}
		}
	}
}

// holdFor is how long a helper keeps its P through jobs that follow one
// another within its idle spin before it yields it, at a job's end, if
// more than one goroutine is waiting to run. The Go scheduler cannot see
// a spinning helper as idle: the goroutines queued on its P (a server's
// connections, made runnable by the network poller) run only when it
// parks, or when the runtime preempts it after 10 ms, and the other P
// takes them only once it runs out of work of its own. Serving bytelm at
// 8 clients, where requests ran as two-core plans one after another,
// connections waited 10-20 ms in the helper's P's queue (Go execution
// traces, AMD Zen 5). A yield of a thread-locked goroutine hands its P
// to another thread and back: two thread wake-ups, once a millisecond at
// most. One goroutine waiting is not enough: serving one client, it is
// the connection's reader, which net/http starts with each request and
// which waits out the plan, and yielding for it raised that client's p99
// (2026-11-27-ab-serve-2335 in docs/data/figures.csv).
const holdFor = time.Millisecond

// Runnable is the number of goroutines waiting for a P (the runtime's
// approximate count, runtime/metrics; about 50 ns). The sample it reads
// into comes from runnableSamples: a server's handlers call it after
// every plan, and a sample of its own would be an allocation each time.
func Runnable() int {
	s := runnableSamples.Get().(*[1]metrics.Sample)
	defer runnableSamples.Put(s)
	metrics.Read(s[:])
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int(min(s[0].Value.Uint64(), math.MaxInt32))
}

var runnableSamples = sync.Pool{New: func() any {
	return &[1]metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}}
}}

// Yields is how often a helper yielded its P after holding it for
// holdFor through back-to-back jobs.
func (p *Pool) Yields() int64 { return p.yields.Load() }

// run is worker w's share of job j: phase by phase, its own part (if
// nobody has taken it), then wait until the phase is done, taking any
// part nobody has claimed.
func (p *Pool) run(j *poolJob, w int) {
	eager := false // the last phase found a part unclaimed: look at once
	for ph := range j.phases {
		t := j.base + int64(ph) // a part's counters before phase ph
		// Claimed even in a job of Each, where nobody else may take it:
		// a helper can come back to a job it has run (it woke for a later
		// one and found this one still current), and must then run
		// nothing.
		if p.parts[w].claimed.CompareAndSwap(t, t+1) {
			p.runPart(j, ph, w, t)
		}
		p.await(j, w, ph, t, &eager)
	}
}

// stealDelay is how long a worker waits for another's part of a phase
// before it looks at whether that part was claimed at all. Looking moves
// the claim's cache line to this core and back, so a worker does it only
// when the part is late, or at once after a phase whose part it found
// unclaimed (its worker is absent: parked, or its core taken). A helper
// that is absent at the start of a job thus costs its job one delay.
const stealDelay = time.Microsecond

// await returns once every part of phase ph is done. A part that is late
// and unclaimed it runs itself (not in a job of Each).
func (p *Pool) await(j *poolJob, w, ph int, t int64, eager *bool) {
	ready := func() bool { // its own part too: another may have taken it
		for k := range p.n {
			if p.parts[(w+k)%p.n].done.Load() <= t {
				return false
			}
		}
		return true
	}
	// The spin is timed by the clock, read every 16 polls (a read costs
	// about as much as 10 polls): counted in polls it would depend on
	// what a poll costs, 2-13 ns with the parts' counters moving between
	// cores against the 0.3 ns of an idle loop.
	if ready() {
		return
	}
	if *eager && !j.own {
		*eager = p.steal(j, w, ph, t)
	}
	stole := *eager || j.own
	var t0 time.Time
	for i := 1; ; i++ {
		if ready() {
			return
		}
		if i&15 != 0 {
			continue
		}
		now := time.Now()
		if t0.IsZero() {
			t0 = now
		}
		waited := now.Sub(t0)
		if !stole && (waited >= stealDelay || waited >= j.spinFor) {
			stole = true
			*eager = p.steal(j, w, ph, t)
			continue
		}
		if waited >= j.spinFor {
			break
		}
	}
	j.finish.wait(0, ready)
}

// steal runs every other part of phase ph nobody has claimed yet, and
// reports whether there was one. In a chunked job it then takes, from
// the back, the chunks nobody has taken of every part (its own too: a
// worker that came late may find its part started by another), until
// none is left.
func (p *Pool) steal(j *poolJob, w, ph int, t int64) bool {
	took := false
	for k := 1; k < p.n; k++ {
		q := (w + k) % p.n
		if p.parts[q].claimed.Load() == t && p.parts[q].claimed.CompareAndSwap(t, t+1) {
			p.stolen.Add(1)
			took = true
			if j.timed {
				j.tookOver.CompareAndSwap(0, int64(time.Since(j.t0)))
			}
			p.runPart(j, ph, q, t)
		}
	}
	if j.chunk == nil {
		return took
	}
	for k := range p.n {
		q := (w + k) % p.n
		for {
			c := p.parts[q].takeChunk(t, false)
			if c < 0 {
				break
			}
			if q != w {
				p.stolen.Add(1)
			}
			p.runChunk(j, ph, q, c, t)
		}
	}
	return took
}

// runPart runs part q of phase ph and publishes it done, waking parked
// waiters. A part of more than one chunk is laid out for the phase and
// run from the front, chunk by chunk, while other workers may take its
// chunks from the back; whoever finishes its last chunk publishes it.
func (p *Pool) runPart(j *poolJob, ph, q int, t int64) {
	k := 1
	if j.chunks != nil {
		k = j.chunks(ph, q)
	}
	if k <= 1 {
		switch {
		case j.chunk == nil:
			j.call(ph, q)
		case k == 1:
			j.callChunk(ph, q, 0)
		}
		p.parts[q].done.Store(t + 1)
		j.finish.broadcast()
		return
	}
	s := &p.parts[q]
	tag := chunkTag(t)
	s.left.Store(tag | uint64(k))
	s.cut.Store(tag | uint64(k))
	for {
		c := s.takeChunk(t, true)
		if c < 0 {
			return
		}
		p.runChunk(j, ph, q, c, t)
	}
}

// runChunk runs chunk c of part q of phase ph and, if it was the part's
// last to finish, publishes the part done.
func (p *Pool) runChunk(j *poolJob, ph, q, c int, t int64) {
	j.callChunk(ph, q, c)
	if p.parts[q].left.Add(^uint64(0))<<(64-tagShift) == 0 {
		p.parts[q].done.Store(t + 1)
		j.finish.broadcast()
	}
}

// serial runs phase ph's parts in turn on the caller (a pool of one).
func (j *poolJob) serial(ph int) {
	if j.chunk == nil {
		j.f(ph, 0)
		return
	}
	for c := range j.chunks(ph, 0) {
		j.chunk(ph, 0, c)
	}
}

// call runs part of phase ph, unless a part has panicked already; a panic
// is recorded (the first one wins) and the part counts as done.
func (j *poolJob) call(ph, part int) {
	if j.failed.Load() != nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			j.failed.CompareAndSwap(nil, panicked(v, ph, part))
		}
	}()
	j.f(ph, part)
}

// callChunk is call for chunk c of a chunked job's part.
func (j *poolJob) callChunk(ph, part, c int) {
	if j.failed.Load() != nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			j.failed.CompareAndSwap(nil, panicked(v, ph, part))
		}
	}()
	j.chunk(ph, part, c)
}

// Phases runs a job of n phases on all workers: f(ph, w) for every part w
// of phase ph, each part once, the next phase only when every part of
// this one is done. It returns when the last phase is done. A part may
// run on any worker's thread (see Pool). f must not call Phases. If a
// part panics, Phases panics with a *PanicError once the job is over.
func (p *Pool) Phases(n int, f func(phase, w int)) { p.start(&poolJob{f: f, phases: n}) }

// longPhases is Phases for a job whose parts are long and uneven: a tree
// plan's parts or a generation's wave, hundreds of microseconds each where
// a phase of P takes a few. A worker that finds another's part still
// running spins, by the clock, for twice the pool's measured wake-up
// (WakeUp; PoolOptions.Spin if shorter), then parks. The caller's usual
// wait is for a helper that started its part a wake-up late: two cover
// that and a wake-up's worth of uneven parts, and a longer wait is worth
// a wake-up at its end (the goroutines this runtime replaced parked at
// once), while a worker holds for a whole part no core that anything
// else on the machine could use. The job times its helpers' start (noteWake).
func (p *Pool) longPhases(n int, f func(phase, w int)) {
	p.start(&poolJob{f: f, phases: n, timed: true})
}

// chunkedPhases is longPhases for parts cut into chunks that may run on
// any worker, in any order, but each on one: part q of phase ph has
// chunks(ph, q) chunks (at most maxChunks), chunk c run by chunk(ph, q,
// c). A part's worker runs its chunks from the first; a worker with no
// work left takes chunks of any part from the last, so nobody waits for
// more than a chunk in progress.
func (p *Pool) chunkedPhases(n int, chunks func(phase, q int) int, chunk func(phase, q, c int)) {
	p.start(&poolJob{chunk: chunk, chunks: chunks, phases: n, timed: true})
}

// Run runs the phases on all workers: phases[ph](w) for every part w
// (Phases with one function per phase).
func (p *Pool) Run(phases []func(w int)) {
	p.Phases(len(phases), func(ph, w int) { phases[ph](w) })
}

// Each runs f(w) once on every worker, on that worker's own thread: how a
// Partitioned program copies each worker's weights into memory that worker
// touches first.
func (p *Pool) Each(f func(w int)) {
	p.start(&poolJob{f: func(_, w int) { f(w) }, phases: 1, own: true})
}

// start runs job j (its function, phases, own and timed set); its
// workers wait for each other's parts, spinning by the clock
// (PoolOptions.Spin, or a timed job's shorter time), before they park. A
// timed job updates the pool's wake-up time.
func (p *Pool) start(j *poolJob) {
	n := j.phases
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.quit.Load() {
		panic("schedule: Run on a closed Pool")
	}
	if p.n == 1 {
		for ph := range n {
			j.serial(ph)
		}
		return
	}
	// A pinned pool's caller runs its part locked to its thread, as its
	// workers do; an unpinned pool's is left unlocked, as its workers are.
	if p.cpus != nil {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	if p.cpus != nil && n > pinCallerPhases {
		restore, err := pinCaller(p.cpus[0])
		p.notePinErr(err)
		defer restore()
	}
	if len(p.parts) != p.n {
		p.parts = make([]partState, p.n)
	}
	j.base, j.spinFor = p.parts[0].done.Load(), p.spinFor
	j.finish.init()
	if j.timed {
		j.spinFor = min(2*time.Duration(p.wakeNs.Load()), p.spinFor)
		j.t0 = time.Now()
	}
	j.id = p.gen.Load() + 1
	p.cur.Store(j)
	p.gen.Add(1)
	p.wake.broadcast()
	p.run(j, 0)
	// Every part is done: the job's function (and the plan it runs, with
	// all its buffers) need not stay reachable until the next job. A
	// helper that wakes late finds no job; one that has this one runs
	// nothing of it (its parts are claimed).
	p.cur.Store(nil)
	if j.timed {
		p.noteWake(j.arrived.Load(), int(j.nArrived.Load()), j.tookOver.Load())
	}
	if pe := j.failed.Load(); pe != nil {
		panic(pe)
	}
}

// pinCallerPhases is the number of phases above which a pinned pool pins
// its caller's thread to worker 0's CPU for the job (the helpers are
// pinned once, when they start). Pinning and restoring costs three
// system calls per job, and a thread moved to another CPU: about 5 µs on
// the project's VM, more than a whole one-step plan of a small model on
// two cores. Table I under P on two cores, a caller never pinned against
// one always pinned (5 alternating runs, 2026-11-26, quiet): T = 1 shapes
// 1.1-3.7x faster, T = 10 mostly 1.0-1.6x, T = 100 0.78-1.15x (lstm and
// gru at hidden 64, 4 layers, 0.78-0.80), so jobs of up to 64 phases (a
// 4-layer stack at T = 10 has about 45) run with the caller wherever
// the OS has it. With this rule, against always pinned (medians of 5
// alternating runs): T = 1 1.05-4.44x (lstm/64/1/1 8.3 to 2.2 µs a step),
// T = 10 0.96-1.55x, T = 100 (unchanged) 0.89-1.23x, the noise.
const pinCallerPhases = 64

// wakeTrials is the number of jobs measureWake times.
const wakeTrials = 5

// measureWake sets the pool's wake-up time: the median, over wakeTrials
// jobs each started once every helper has parked (or after a
// millisecond), of how long the last helper took to start its part. On
// the project's VM, quiet, 40-100 µs: a futex wake-up, and the Go
// runtime's hand-over of a P to the helper's locked thread.
func (p *Pool) measureWake() {
	if p.n == 1 {
		return
	}
	var last atomic.Int64
	var t0 time.Time
	f := func(w int) {
		if w != 0 {
			atomicMax(&last, int64(time.Since(t0)))
		}
	}
	times := make([]int64, wakeTrials)
	for i := range times {
		deadline := time.Now().Add(time.Millisecond)
		for p.wake.parked.Load() < int32(p.n-1) && time.Now().Before(deadline) {
			runtime.Gosched()
		}
		last.Store(0)
		t0 = time.Now()
		p.Each(f) // the caller takes over no part: every helper's start is timed
		times[i] = last.Load()
	}
	slices.Sort(times)
	p.wakeNs.Store(times[len(times)/2])
}

// noteWake moves the pool's wake-up time a quarter of the way towards
// what a timed job saw: the latest arrival of its helpers (came of them
// arrived) or, when one never came before the job ended, at least the
// caller's first take-over of a part nobody had started (a helper that
// never came is known only to be later than that).
func (p *Pool) noteWake(arrived int64, came int, tookOver int64) {
	old := p.wakeNs.Load()
	seen := arrived
	if came < p.n-1 {
		seen = max(seen, tookOver, old)
	}
	p.wakeNs.Store(old + (seen-old)/4)
}

// WakeUp is the pool's current estimate of how long a job waits for a
// parked helper to start its part (see Pays); 0 for a pool of one worker.
func (p *Pool) WakeUp() time.Duration { return time.Duration(p.wakeNs.Load()) }

// atomicMax raises x to v if v is larger.
func atomicMax(x *atomic.Int64, v int64) {
	for {
		old := x.Load()
		if v <= old || x.CompareAndSwap(old, v) {
			return
		}
	}
}

// waiter lets goroutines wait for a condition: they spin on it for a
// while, then park until a broadcast.
type waiter struct {
	parked atomic.Int32
	mu     sync.Mutex
	cond   sync.Cond
}

func (w *waiter) init() { w.cond.L = &w.mu }

// wait returns once ready() holds: it polls ready for up to spin (the
// clock read every 16 polls), then parks, re-checking after every
// broadcast. It reports whether it parked.
func (w *waiter) wait(spin time.Duration, ready func() bool) (parked bool) {
	if spin > 0 {
		t0 := time.Now()
		for i := 1; ; i++ {
			if ready() {
				return false
			}
			if i&15 == 0 && time.Since(t0) >= spin {
				break
			}
		}
	}
	if ready() {
		return false
	}
	w.mu.Lock()
	w.parked.Add(1)
	for !ready() {
		parked = true
		w.cond.Wait()
	}
	w.parked.Add(-1)
	w.mu.Unlock()
	return parked
}

// broadcast wakes the parked waiters; call it after making their
// condition true.
func (w *waiter) broadcast() {
	if w.parked.Load() > 0 {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	}
}
